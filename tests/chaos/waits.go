package chaos

// Waiting for a lock (LOCK ... WAIT) under the same faults. A waiting client sends rounds of
// two or three plain LOCKs with WAIT, one connection each, through nodes picked at random, on
// keys of their own (wq…, rotating every keyEpoch): the first is granted, the others queue
// behind it in the key's replicated queue (fsm/queues.go). A grantee unlocks soon, or lets its
// short lease expire, and the queue's next is served. While a round lasts, the client itself
// observes: it polls LOCKWAITERS on the round's key through any node and records each waiter's
// place. checkWaitOrder then holds the server
// to FIFO: plain-lock waiters of one key are granted in the order of their places, across
// leader changes too (docs/locks.md, "Waiting").
//
// These keys see no request without WAIT (it would be refused while anyone waits, which the
// per-key lock model does not know of), so their ops are kept apart from Ops (History.Waits).

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Workload shape: each round queues two or three waiters on one of waitKeysPerEpoch keys, with
// leases of 300-800 ms and WAITs of 1.5-3 s, so most are granted in their WAIT and some, behind
// expiring leases or a fault, are not.
const waitKeysPerEpoch = 2

// waitKey is the i-th wait key of the epoch the run is in at now.
func waitKey(now int64, i int) string { return fmt.Sprintf("wq%d.%d", now/int64(keyEpoch), i) }

// QueueRead is one LOCKWAITERS reply: the key's waiters in the order it listed them.
type QueueRead struct {
	Client   int            `json:"client"`
	Node     string         `json:"node"`
	Key      string         `json:"key"`
	Invoke   int64          `json:"invoke_ns"`
	Complete int64          `json:"complete_ns"`
	Waiters  []QueuedWaiter `json:"waiters"`
}

// QueuedWaiter is one waiter a LOCKWAITERS listed.
type QueuedWaiter struct {
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
	Place uint64 `json:"place"`
}

// waits is the waiting client's loop: a round of waiters on one key, observed while it lasts,
// then a short pause.
func (w *worker) waits() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for round := 0; !w.stop.Load(); round++ {
		key := waitKey(w.rec.now(), w.rng.IntN(waitKeysPerEpoch))
		n := 2 + w.rng.IntN(2)
		var wg sync.WaitGroup
		for j := range n {
			// each waiter its own connection and rng: they run at once
			s := &worker{id: w.id, rng: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(j))), rec: w.rec, addrs: w.addrs,
				node: w.rng.IntN(len(w.addrs)), stop: w.stop}
			owner := fmt.Sprintf("w%d-%d-%d", w.id, round, j)
			wg.Go(func() {
				defer func() {
					if s.c != nil {
						s.c.close()
					}
				}()
				s.sleep(0, time.Duration(j)*30*time.Millisecond) // a rough order of arrival
				s.waitOnce(key, owner)
			})
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		w.observe(key, done)
		w.sleep(50*time.Millisecond, 200*time.Millisecond)
	}
}

// waitOnce sends one LOCK ... WAIT and, once granted, holds briefly and unlocks, or (one time
// in five) lets the lease expire.
func (w *worker) waitOnce(key, owner string) {
	ttl := int64(300 + w.rng.IntN(501))
	wait := int64(1500 + w.rng.IntN(1501))
	op := Op{Kind: Acquire, Via: "lock", Key: key, TTL: ttl, Owner: owner}
	c := w.conn()
	op.Client, op.Node = w.id, c.addr
	op.Invoke = w.rec.now()
	// the reply may take the whole WAIT, then a request's usual bound
	v, err := c.do(time.Duration(wait)*time.Millisecond+opTimeout, "LOCK", key, strconv.FormatInt(ttl, 10),
		"OWNER", owner, "WAIT", strconv.FormatInt(wait, 10))
	op.Complete = w.rec.now()
	op.Outcome, op.Err = outcomeOf(err)
	if op.Outcome == OK && v != nil {
		if n, ok := asInt(v); ok && n > 0 {
			op.Granted, op.Token = true, uint64(n)
		} else {
			unexpected(&op, v)
		}
	}
	w.rec.wait(op)
	if !op.Granted || w.rng.IntN(5) == 0 {
		return
	}
	w.sleep(20*time.Millisecond, 150*time.Millisecond)
	rl := Op{Kind: Release, Key: key, Owner: owner, Token: op.Token}
	v = w.call(&rl, "UNLOCK", key, strconv.FormatUint(op.Token, 10))
	boolReply(&rl, v)
	w.rec.wait(rl)
}

// observe polls LOCKWAITERS of key, through a node picked at random each time, until done is
// closed.
func (w *worker) observe(key string, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		default:
		}
		w.node = w.rng.IntN(len(w.addrs))
		var op Op
		v := w.call(&op, "LOCKWAITERS", key)
		if op.Outcome == OK {
			if ws, err := parseWaiters(v); err == nil {
				w.rec.queue(QueueRead{Client: w.id, Node: op.Node, Key: key, Invoke: op.Invoke, Complete: op.Complete, Waiters: ws})
			}
		}
		w.sleep(20*time.Millisecond, 60*time.Millisecond)
	}
}

// parseWaiters reads LOCKWAITERS's RESP2 reply: an array of flat maps [owner o kind k place p
// waiting-ms x wait-left-ms y].
func parseWaiters(v any) ([]QueuedWaiter, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array")
	}
	ws := make([]QueuedWaiter, 0, len(a))
	for _, x := range a {
		f, err := fields(x)
		if err != nil {
			return nil, err
		}
		o, ok1 := f["owner"].(string)
		k, ok2 := f["kind"].(string)
		p, ok3 := asInt(f["place"])
		if !ok1 || !ok2 || !ok3 || p <= 0 {
			return nil, fmt.Errorf("waiter fields")
		}
		ws = append(ws, QueuedWaiter{Owner: o, Kind: k, Place: uint64(p)})
	}
	return ws, nil
}

// WaitCounts is what the waiting workload did and how much of it the FIFO check could use.
type WaitCounts struct {
	Waits    int // LOCK ... WAIT requests
	Granted  int // of those, granted (a token)
	TimedOut int // of those, nil: the WAIT passed
	Failed   int // of those, certainly not done (CLUSTERDOWN, TRYAGAIN, no connection)
	Unknown  int
	Observed int // waiters whose place a LOCKWAITERS showed
	Pairs    int // pairs of granted, observed waiters of one key whose order was checked
}

// checkWaitOrder holds the server to the queues' FIFO:
//   - LOCKWAITERS lists a queue in order of places;
//   - a waiter keeps one place (an owner is unique per request; a follower whose leader died
//     rejoins the same waiter, never a new one);
//   - a place is a value taken from the token counter when the waiter queued, so its grant's
//     token is above it;
//   - plain-lock waiters of one key are granted in the order of their places: of two granted
//     waiters whose places were both observed, the earlier place has the lower token.
//
// Only what is certain counts: a waiter never observed, one whose WAIT passed (nil), and one
// whose outcome is unknown impose nothing, and tokens are compared, not times, so neither a
// stale follower's read nor a slow reply can raise a false alarm.
func checkWaitOrder(waits []Op, queues []QueueRead) (WaitCounts, []string) {
	var n WaitCounts
	var bad []string
	type seen struct {
		key   string
		place uint64
	}
	places := map[string]seen{}
	for _, q := range queues {
		for i, x := range q.Waiters {
			if i > 0 && q.Waiters[i-1].Place >= x.Place {
				bad = append(bad, fmt.Sprintf("queue: LOCKWAITERS %s on %s at %.3fs listed place %d before %d",
					q.Key, q.Node, sec(q.Invoke), q.Waiters[i-1].Place, x.Place))
			}
			prev, ok := places[x.Owner]
			switch {
			case !ok:
				places[x.Owner] = seen{q.Key, x.Place}
			case prev != seen{q.Key, x.Place}:
				bad = append(bad, fmt.Sprintf("queue: waiter %s seen at place %d of %s and at place %d of %s",
					x.Owner, prev.place, prev.key, x.Place, q.Key))
			}
		}
	}
	type grant struct {
		op    Op
		place uint64
	}
	byKey := map[string][]grant{}
	for _, op := range waits {
		if op.Kind != Acquire {
			continue
		}
		n.Waits++
		switch {
		case op.Outcome == Unknown:
			n.Unknown++
		case op.Outcome == Fail:
			n.Failed++
		case op.Outcome == OK && op.Granted:
			n.Granted++
		case op.Outcome == OK:
			n.TimedOut++
		}
		s, ok := places[op.Owner]
		if !ok {
			continue
		}
		n.Observed++
		if op.Outcome != OK || !op.Granted || op.Token == 0 || s.key != op.Key {
			continue
		}
		if op.Token <= s.place {
			bad = append(bad, fmt.Sprintf("queue: %s was granted token %d, not above its place %d", op, op.Token, s.place))
		}
		byKey[op.Key] = append(byKey[op.Key], grant{op, s.place})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		gs := byKey[k]
		slices.SortFunc(gs, func(a, b grant) int { return cmp.Compare(a.place, b.place) })
		n.Pairs += len(gs) * (len(gs) - 1) / 2
		// tokens increasing along places, pair by neighbouring pair, is every pair in order
		for i := 1; i < len(gs); i++ {
			a, b := gs[i-1], gs[i]
			if a.op.Token >= b.op.Token {
				bad = append(bad, fmt.Sprintf("fifo: %s waited at place %d before %s at place %d, but was granted after it",
					a.op, a.place, b.op, b.place))
			}
		}
	}
	return n, bad
}
