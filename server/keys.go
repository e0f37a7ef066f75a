package server

// Key commands, whatever the key holds: DEL/UNLINK, EXISTS, TYPE, PTTL/TTL, the EXPIRE family,
// PERSIST, PEXPIRETIME/EXPIRETIME, DBSIZE.

import (
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// DEL key [key ...] -> the number of keys removed. The keys are removed together or not at all.
func cmdDel(r *request) { r.runHalves(stageDel(r)) }

// stageDel is DEL in two halves (stage.go): a pipeline of DELs (a recipe's release without a
// script) is proposed by the connection's goroutine, not a worker per command.
func stageDel(r *request) (keys [][]byte, eval node.Eval, finish finishFunc) {
	keys = r.args[1:]
	return keys, func(v node.View) []fsm.Command {
		var cmds []fsm.Command
		seen := make(map[string]bool, len(keys))
		for _, k := range keys {
			if seen[string(k)] {
				continue
			}
			seen[string(k)] = true
			if l, _, held := v.Lookup(k); held {
				cmds = append(cmds, fsm.Command{Kind: fsm.KindRelease, Key: k, Match: locks.ByToken(l.Token)})
			}
		}
		return cmds
	}, r.finishDel
}

// finishDel is DEL's second half: it replies how many keys it deleted.
func (r *request) finishDel(res []fsm.Result, err error) {
	if err != nil {
		r.replyError(err)
		return
	}
	if fsm.Aborted(res) {
		// The keys' releases travel as one entry: all of them apply, or none.
		r.w.Error(errAborted)
		return
	}
	n := int64(0)
	for _, r := range res {
		if r.Status == fsm.StatusReleased {
			n++
		}
	}
	r.s.stats.releases.Add(uint64(n))
	r.w.Int(n)
}

// EXISTS key [key ...] -> how many of the keys (repeats counted) are held.
func cmdExists(r *request) {
	n := int64(0)
	_, err := r.exec(r.args[1:], func(v node.View) []fsm.Command {
		n = 0
		for _, k := range r.args[1:] {
			if _, _, held := v.Lookup(k); held {
				n++
			}
		}
		return nil
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.Int(n)
}

// PTTL key and TTL key.
func cmdPTTL(r *request) { replyTTL(r, false) }
func cmdTTL(r *request)  { replyTTL(r, true) }

func replyTTL(r *request, seconds bool) {
	_, ttl, _, ok := r.readKey(r.args[1])
	if !ok {
		return
	}
	if seconds && ttl > 0 {
		ttl = (ttl + 500) / 1000
	}
	r.w.Int(ttl)
}

// PEXPIRE/EXPIRE/PEXPIREAT/EXPIREAT key time [NX|XX|GT|LT]
func cmdPExpire(r *request)   { expireGeneric(r, "pexpire", false, true) }
func cmdExpire(r *request)    { expireGeneric(r, "expire", true, true) }
func cmdPExpireAt(r *request) { expireGeneric(r, "pexpireat", false, false) }
func cmdExpireAt(r *request)  { expireGeneric(r, "expireat", true, false) }

func expireGeneric(r *request, name string, seconds, relative bool) {
	key := r.args[1]
	var nx, xx, gt, lt bool
	for _, a := range r.args[3:] {
		switch {
		case is(a, "nx"):
			nx = true
		case is(a, "xx"):
			xx = true
		case is(a, "gt"):
			gt = true
		case is(a, "lt"):
			lt = true
		default:
			r.w.Error("ERR Unsupported option " + string(a))
			return
		}
	}
	if nx && (xx || gt || lt) {
		r.w.Error("ERR NX and XX, GT or LT options at the same time are not compatible")
		return
	}
	if gt && lt {
		r.w.Error("ERR GT and LT options at the same time are not compatible")
		return
	}
	when, ok := parseInt(r.args[2])
	if !ok {
		r.w.Error(errNotInt)
		return
	}
	invalid := func() { r.w.Error("ERR invalid expire time in '" + name + "' command") }
	if seconds {
		if when > (1<<63-1)/1000 || when < -(1<<63-1)/1000 {
			invalid()
			return
		}
		when *= 1000
	}
	var lease int64
	if relative {
		lease = when
	} else {
		lease = when - r.s.cfg.Now().UnixMilli()
	}
	if lease > r.s.cfg.MaxLeaseMs {
		invalid()
		return
	}
	res, err := r.exec(r.args[1:2], func(v node.View) []fsm.Command {
		l, cur, held := lookupTTL(v, key)
		if !held {
			return nil
		}
		switch {
		case nx && cur != -1, xx && cur == -1,
			gt && (cur == -1 || lease <= cur),
			lt && cur != -1 && lease >= cur:
			return nil
		}
		if lease <= 0 {
			// A time already passed deletes the key, as in Redis.
			return []fsm.Command{{Kind: fsm.KindRelease, Key: key, Match: locks.ByToken(l.Token)}}
		}
		return []fsm.Command{{Kind: fsm.KindRenew, Key: key, LeaseMs: uint64(lease), Match: locks.ByToken(l.Token)}}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	if len(res) == 1 && (res[0].Status == fsm.StatusRenewed || res[0].Status == fsm.StatusReleased) {
		r.w.Int(1)
		return
	}
	r.w.Int(0)
}

// DBSIZE -> the number of held locks.
func cmdDBSize(r *request) {
	n := 0
	if r.spans {
		r.s.eachGroup(func(v node.View) { n += v.Len(r.db) })
		r.w.Int(int64(n))
		return
	}
	_, err := r.exec(nil, func(v node.View) []fsm.Command {
		n = v.Len(r.db)
		return nil
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.Int(int64(n))
}

// readKey reads one key linearizably (or from the local table on a READONLY follower
// connection): the lock, its remaining lease in ms (-1 without one, -2 when free). On an error it
// has replied already and returns ok false.
func (r *request) readKey(key []byte) (l fsm.Lock, pttl int64, held, ok bool) {
	_, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		l, pttl, held = lookupTTL(v, key)
		return nil
	})
	if err != nil {
		r.replyError(err)
		return l, pttl, held, false
	}
	return l, pttl, held, true
}

// lookupTTL returns the lock on key and its remaining lease in ms (-1 without a lease).
func lookupTTL(v node.View, key []byte) (fsm.Lock, int64, bool) {
	l, rem, held := v.Lookup(key)
	if !held {
		return l, -2, false
	}
	if l.LeaseMs == 0 {
		return l, -1, true
	}
	return l, rem.Milliseconds(), true
}

// TYPE key -> +string, +hash, +set, +zset or +list, or +none for a missing key.
func cmdType(r *request) {
	l, _, held, ok := r.readKey(r.args[1])
	switch {
	case !ok:
	case held:
		r.w.SimpleString(l.Type().String())
	default:
		r.w.SimpleString("none")
	}
}

// PERSIST key -> :1 when the key's expiry was removed, :0 when it had none or is missing.
func cmdPersist(r *request) {
	key := r.args[1]
	res, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		l, _, held := v.Lookup(key)
		if !held || l.LeaseMs == 0 {
			return nil
		}
		// The same value again, without a lease: the holder, and so its token, stay.
		if l.Value != nil {
			w := writeOf(key, l, l.Value, l.Value)
			w.KeepLease = false
			return []fsm.Command{w}
		}
		return []fsm.Command{locks.Grant(key, l.Owner, 0, locks.ByToken(l.Token))}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.Int(b2i(len(res) == 1 && (res[0].Status == fsm.StatusGranted || res[0].Status == fsm.StatusWritten)))
}

// PEXPIRETIME key and EXPIRETIME key -> the Unix time the key expires at (ms, s), -1 without
// an expiry, -2 for a missing key. The time is this node's clock plus what its timer says is
// left of the lease.
func cmdPExpireTime(r *request) { replyExpireTime(r, false) }
func cmdExpireTime(r *request)  { replyExpireTime(r, true) }

func replyExpireTime(r *request, seconds bool) {
	_, ttl, _, ok := r.readKey(r.args[1])
	if !ok {
		return
	}
	if ttl < 0 {
		r.w.Int(ttl)
		return
	}
	at := r.s.cfg.Now().UnixMilli() + ttl
	if seconds {
		at = (at + 500) / 1000
	}
	r.w.Int(at)
}

// FLUSHDB [ASYNC|SYNC] and FLUSHALL [ASYNC|SYNC] -> +OK: every key of the database (of all of
// them) deleted, by one replicated command. ASYNC and SYNC mean the same here.
func cmdFlushDB(r *request)  { flush(r, []byte{byte(r.db)}) }
func cmdFlushAll(r *request) { flush(r, nil) }

func flush(r *request, db []byte) {
	if len(r.args) > 2 || len(r.args) == 2 && !is(r.args[1], "async") && !is(r.args[1], "sync") {
		r.w.Error(errSyntax)
		return
	}
	if r.spans && !r.pinned {
		r.acrossGroups()
		return
	}
	_, err := r.exec(nil, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindFlush, Key: db}}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.SimpleString("OK")
}
