package server

// String commands: SET (every option) and the reads of a string value, GET and GETRANGE.

import (
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// expiry is a parsed Redis expiry option.
type expiry struct {
	set      bool
	keep     bool  // KEEPTTL
	relative bool  // EX/PX: relative; EXAT/PXAT: absolute
	ms       int64 // milliseconds (relative) or a Unix time in ms (absolute)
}

// leaseFor turns an expiry into a lease length from now. An absolute time is converted here, on
// the leader, so the log only ever holds relative leases (DESIGN.md §5). ok is false when the
// value is invalid; past is true when an absolute time has already passed.
func (r *request) leaseFor(e expiry, cmd string) (lease uint64, past, ok bool) {
	if !e.set {
		return 0, false, true
	}
	ms := e.ms
	if !e.relative {
		ms -= r.s.cfg.Now().UnixMilli()
		if ms <= 0 {
			return 0, true, true
		}
	}
	if ms > r.s.cfg.MaxLeaseMs {
		r.w.Error("ERR invalid expire time in '" + cmd + "' command")
		return 0, false, false
	}
	return uint64(ms), false, true
}

// expireValue parses the number after EX/PX/EXAT/PXAT the way Redis 7 does.
func (r *request) expireValue(arg []byte, seconds bool, cmd string) (int64, bool) {
	v, ok := parseInt(arg)
	if !ok {
		r.w.Error(errNotInt)
		return 0, false
	}
	if v <= 0 || seconds && v > (1<<63-1)/1000 {
		r.w.Error("ERR invalid expire time in '" + cmd + "' command")
		return 0, false
	}
	if seconds {
		v *= 1000
	}
	return v, true
}

// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
func cmdSet(r *request) {
	key, value := r.args[1], r.args[2]
	var (
		nx, xx, get bool
		exp         expiry
		expArg      []byte
		expSeconds  bool
	)
	for j := 3; j < len(r.args); j++ {
		a := r.args[j]
		hasNext := j+1 < len(r.args)
		switch {
		case is(a, "nx") && !xx:
			nx = true
		case is(a, "xx") && !nx:
			xx = true
		case is(a, "get"):
			get = true
		case is(a, "keepttl") && !exp.set:
			exp = expiry{set: true, keep: true}
		case (is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat")) && !exp.set && hasNext:
			exp = expiry{set: true, relative: len(a) == 2}
			expSeconds = a[0] == 'e' || a[0] == 'E'
			expArg = r.args[j+1]
			j++
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	if !r.checkKey(key) || !r.checkValue(value) {
		return
	}
	if expArg != nil {
		ms, ok := r.expireValue(expArg, expSeconds, "set")
		if !ok {
			return
		}
		exp.ms = ms
	}
	var lease uint64
	past := false
	if exp.set && !exp.keep {
		var ok bool
		if lease, past, ok = r.leaseFor(exp, "set"); !ok {
			return
		}
	}
	var (
		prev    []byte
		hadPrev bool
		refused bool
	)
	res, err := r.exec(r.args[1:2], func(v node.View) []fsm.Command {
		l, _, held := v.Lookup(key)
		prev, hadPrev, refused = l.Owner, held, nx && held || xx && !held
		if refused {
			return nil
		}
		if past {
			// An expiry time already gone: Redis sets and drops the key at once.
			if !held {
				return nil
			}
			return []fsm.Command{{Kind: fsm.KindRelease, Key: key, Match: byToken(l.Token)}}
		}
		m := fsm.Match{Kind: fsm.MatchAny}
		switch {
		case nx:
			m.Kind = fsm.MatchAbsent
		case held:
			m = byToken(l.Token)
		}
		cmd := grant(key, value, lease, m)
		cmd.KeepLease = exp.keep
		return []fsm.Command{cmd}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	if len(res) == 1 && res[0].Status == fsm.StatusGranted {
		r.s.stats.grants.Add(1)
		if r.path != onScript { // inside a script the token is only a prediction
			r.c.sess.tokens[string(key)] = res[0].Token
		}
	} else if refused || len(res) == 1 && res[0].Status == fsm.StatusGrantRejected {
		r.s.stats.refusals.Add(1)
		refused = true
	}
	switch {
	case get && hadPrev:
		r.w.Bulk(prev)
	case get:
		r.w.Null()
	case refused:
		r.w.Null()
	default:
		r.w.SimpleString("OK")
	}
}

// GET key
func cmdGet(r *request) {
	l, _, held, ok := r.readKey(r.args[1])
	switch {
	case !ok:
	case !held:
		r.w.Null()
	default:
		r.w.Bulk(l.Owner)
	}
}

// GETRANGE key start end
func cmdGetRange(r *request) {
	start, ok1 := parseInt(r.args[2])
	end, ok2 := parseInt(r.args[3])
	if !ok1 || !ok2 {
		r.w.Error(errNotInt)
		return
	}
	l, _, _, ok := r.readKey(r.args[1])
	if !ok {
		return
	}
	owner := l.Owner
	// Redis's getrangeCommand, index for index.
	n := int64(len(owner))
	if start < 0 && end < 0 && start > end {
		r.w.BulkString("")
		return
	}
	if start < 0 {
		start = max(n+start, 0)
	}
	if end < 0 {
		end = max(n+end, 0)
	}
	end = min(end, n-1)
	if n == 0 || start > end {
		r.w.BulkString("")
		return
	}
	r.w.Bulk(owner[start : end+1])
}
