package locks

// Fair hand-off from replicated queues. A request that waits for a lock (LOCK, SEMACQUIRE or
// MLOCK with WAIT) is a waiter in its key's queue in the replicated table (fsm/queues.go), so
// every node has every queue and a new leader grants in the same order. The leader grants them:
// the entry that frees a key (a Release, an Expire) also serves the queue's head when it is a
// plain lock's waiter (one grant however many wait, nobody barges in between); any other change
// of a key with waiters (a share or a permit given back, a lock-delay's end, a waiter giving up,
// a new leader) is followed by a hand-off entry that serves the head and every waiter after it
// that fits too (consecutive shares, permits left), and stops at the first that does not, so a
// waiting writer is never overtaken. A request that does not wait is refused while anyone waits
// on its key (fsm.Kinds.Waiting). An MLOCK waits at one place in each of its keys' queues and is
// served, in one entry, once it heads all of them and all are free; it never holds one key while
// it waits for another, so it cannot deadlock with any other waiter.
//
// Nobody is answered here: the node a waiting client is on answers it when it applies the Serve
// (or the waiter's expiry, or its release), whoever proposed it (node.Watchers.Waited).

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Handoffs appends to a request's commands the Serve of the head waiter of each key the entry
// frees, when that waiter asks for a plain lock of that key alone: one whose last command in the
// entry is a Release of the lock m holds, or the Expire of its lease in force. The core calls it
// under its view lock as it proposes cmds, in log format format, with m its applied table and
// inFlight telling which keys have proposals in flight: with none on the key, m is what the
// entry applies to, so the Serve (guarded: the waiter heads its queue, the key is free) cannot
// fail. Any other waiter's turn comes from Changed. While no key has shares, permits, a
// lock-delay or waiters it costs a counter's read.
func (p *Policy) Handoffs(m *fsm.Machine, inFlight func(key []byte) bool, cmds []fsm.Command, format byte) ([]fsm.Command, func([]fsm.Result, error)) {
	if format < fsm.FormatFunctions {
		return cmds, nil // no queues before that format
	}
	var serves []fsm.Command
	for i, c := range cmds {
		if c.Kind != fsm.KindRelease && c.Kind != fsm.KindExpire || fsm.Hidden(c.Key) {
			continue
		}
		k := m.Kinds(c.Key)
		if !k.Waiting || k.Blocks() || touchedAfter(cmds, i) || inFlight(c.Key) {
			continue
		}
		if l, held := m.Get(c.Key); !held || !fsm.FreesKey(l, c) {
			continue // its guard would fail: the key stays held, no grant can follow
		}
		m.Waiters(c.Key, func(w fsm.Waiter) bool {
			if w.Request.Mode == fsm.WaitLock && len(w.Request.Keys) == 0 {
				// A no-op if the waiter is gone by then (withdrawn, or expired in the same
				// round): the release or expiry applies whatever became of it.
				serves = append(serves, serve(c.Key, w.Seq, false))
			}
			return false // the head only
		})
	}
	if len(serves) == 0 {
		return cmds, nil
	}
	return append(slices.Clip(cmds), serves...), nil
}

// serve is the Serve of the waiter at place seq in key's queue; all makes it one of an MLOCK's
// Serves, which apply all or none (a failed one undoes its entry, where a lone one is a no-op).
func serve(key []byte, seq fsm.Token, all bool) fsm.Command {
	return fsm.Command{Kind: fsm.KindServe, Key: fsm.WaiterKey(key, seq), Token: seq, KeepLease: all}
}

// touchedAfter reports whether a command after cmds[i] names the same key.
func touchedAfter(cmds []fsm.Command, i int) bool {
	for _, c := range cmds[i+1:] {
		if bytes.Equal(c.Key, cmds[i].Key) {
			return true
		}
	}
	return false
}

// Changed looks, after each applied batch, for the keys that may have room for their waiters
// now: those whose lock, share, permit, lock-delay or queue changed (keys, as the core gives
// them: a hidden key stands for its key) and that have waiters; with flushed, every key that has
// waiters. It hands them off on a goroutine of its own. The core calls it under its view lock
// with m its table. Only the ready leader hands off.
func (p *Policy) Changed(m *fsm.Machine, keys [][]byte, flushed bool) {
	if !p.leading.Load() || len(keys) == 0 && !flushed || !m.AnyKinds() {
		return // not leading, nothing changed, or nobody waits anywhere
	}
	var queued []string
	if flushed {
		m.QueuedKeys(func(k []byte) bool {
			queued = append(queued, string(k))
			return true
		})
	}
	for _, k := range keys {
		k = fsm.BaseKey(k)
		if _, held := m.Get(k); held {
			continue // a plain lock: its release or expiry serves the head (Handoffs) or comes here
		}
		if k := m.Kinds(k); !k.Waiting || k.Delayed {
			continue // nobody waits, or a lock-delay: its end comes here
		}
		queued = append(queued, string(k))
	}
	if len(queued) == 0 {
		return
	}
	// A key an entry touched twice is in keys twice: one hand-off for it.
	slices.Sort(queued)
	queued = slices.Compact(queued)
	p.goFunc(func() { p.handOff(queued) })
}

// handOff proposes, as a request of its own, the Serves of the waiters that fit when it is
// evaluated (the core waits for proposals in flight on the keys first), in each of keys' queues
// (all queues when keys is nil: a new leader's look): the head, and each one after it that fits
// too, up to the first that does not. A waiter that can never fit as the key is held (a
// semaphore asked for with another permit count) is taken out of the queue (its client hears
// nil), so it does not hold up the others until it gives up.
func (p *Policy) handOff(keys []string) {
	// An entry of Serves aborts only when an MLOCK's could not all be made (a waiter of it left
	// in between): nothing applied, so nothing would look again. It is evaluated afresh.
	for try := 0; try < maxHandOffTries; try++ {
		res, err := p.handOffOnce(keys)
		if err != nil {
			p.log.Warn("lock hand-off failed", "keys", len(keys), "err", err)
			return
		}
		if !fsm.Aborted(res) {
			return
		}
		time.Sleep(time.Duration(try+1) * 10 * time.Millisecond)
	}
}

// maxHandOffTries bounds the evaluations of one hand-off whose entries abort.
const maxHandOffTries = 5

// handOffOnce is one evaluation of handOff and its entry's results.
func (p *Policy) handOffOnce(keys []string) ([]fsm.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.applyTimeout)
	defer cancel()
	var locked [][]byte
	for _, k := range keys {
		locked = append(locked, []byte(k))
	}
	return p.replica.Exec(ctx, locked, func(v node.View) []fsm.Command {
		var cmds []fsm.Command
		room := newRoom(v)
		slots := v.Slots()
		serveQueue := func(key []byte) {
			if slots.Moved() && slots.Of(fsm.SlotOf(key)).State != fsm.SlotOwned {
				// Moving away (its Serves would be refused, and the whole entry with them) or
				// gone: the move's end looks at every queue again.
				return
			}
			v.Waiters(key, func(w fsm.Waiter, _ time.Duration) bool {
				switch {
				case room.served[w.Seq]:
					return true // an MLOCK served from another of its keys' queues
				case room.mismatch(w.Request, key):
					room.served[w.Seq] = true
					cmds = append(cmds, fsm.Command{Kind: fsm.KindRelease, Key: fsm.WaiterKey(key, w.Seq),
						Match: fsm.Match{Kind: fsm.MatchToken, Token: w.Seq}})
					return true
				case !room.headsAll(w, key) || !room.fits(w.Request, key):
					return false
				}
				room.take(w, key)
				for _, k := range waiterKeys(w.Request, key) {
					cmds = append(cmds, serve(k, w.Seq, len(w.Request.Keys) > 0))
				}
				return true
			})
		}
		if keys == nil {
			v.QueuedKeys(func(k []byte) bool {
				serveQueue(slices.Clone(k))
				return true
			})
		} else {
			for _, k := range locked {
				serveQueue(k)
			}
		}
		return dedupServes(cmds)
	}, nil)
}

// waiterKeys are the keys a waiter is served on: an MLOCK's, or its queue's key.
func waiterKeys(q fsm.WaiterRequest, key []byte) [][]byte {
	if len(q.Keys) > 0 {
		return q.Keys
	}
	return [][]byte{key}
}

// dedupServes drops a Serve that an earlier one in cmds already makes (an MLOCK found at the head
// of two of the queues looked at).
func dedupServes(cmds []fsm.Command) []fsm.Command {
	seen := map[string]bool{}
	out := cmds[:0]
	for _, c := range cmds {
		if seen[string(c.Key)] {
			continue
		}
		seen[string(c.Key)] = true
		out = append(out, c)
	}
	return out
}
