package server

// String commands: SET (every option), SETNX, SETEX, PSETEX, GETSET, GETDEL, GETEX, the
// counters (INCR, DECR, INCRBY, DECRBY) and the reads of a string value, GET, MGET and GETRANGE.

import (
	"strconv"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
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
// value is invalid (it has replied); past is true when an absolute time has already passed.
func (r *request) leaseFor(e expiry, cmd string) (lease uint64, past, ok bool) {
	lease, past, msg := leaseOf(e, cmd, r.s.cfg.Now(), r.s.cfg.MaxLeaseMs)
	if msg != "" {
		r.w.Error(msg)
		return 0, false, false
	}
	return lease, past, true
}

func leaseOf(e expiry, cmd string, now time.Time, maxLeaseMs int64) (lease uint64, past bool, errMsg string) {
	if !e.set {
		return 0, false, ""
	}
	ms := e.ms
	if !e.relative {
		ms -= now.UnixMilli()
		if ms <= 0 {
			return 0, true, ""
		}
	}
	if ms > maxLeaseMs {
		return 0, false, invalidExpire(cmd)
	}
	return uint64(ms), false, ""
}

func invalidExpire(cmd string) string { return "ERR invalid expire time in '" + cmd + "' command" }

// expireValue parses the number after EX/PX/EXAT/PXAT the way Redis 7 does. On an error it has
// replied and returns ok false.
func (r *request) expireValue(arg []byte, seconds bool, cmd string) (int64, bool) {
	v, msg := expireValueOf(arg, seconds, cmd)
	if msg != "" {
		r.w.Error(msg)
		return 0, false
	}
	return v, true
}

func expireValueOf(arg []byte, seconds bool, cmd string) (int64, string) {
	v, ok := parseInt(arg)
	if !ok {
		return 0, errNotInt
	}
	if v <= 0 || seconds && v > (1<<63-1)/1000 {
		return 0, invalidExpire(cmd)
	}
	if seconds {
		v *= 1000
	}
	return v, ""
}

// setOptions are what a SET-like command asks for besides its key and value.
type setOptions struct {
	nx, xx bool
	keep   bool   // KEEPTTL
	lease  uint64 // 0: none
	past   bool   // an absolute expiry already gone: set and drop at once, as Redis does
	get    bool   // the old value is replied (SET ... GET, GETSET): only a string's may be
}

// setOutcome is what a SET-like command found and did.
type setOutcome struct {
	prev    []byte // the value before (when hadPrev)
	hadPrev bool
	refused bool // NX on a held key, XX on a free one
}

// set replicates SET key value with opts and reports what it found. On an error it has
// replied already and returns ok false.
func (r *request) set(key, value []byte, opts setOptions) (out setOutcome, ok bool) {
	eval, outcome := r.setHalves(key, value, opts)
	return outcome(r.exec([][]byte{key}, eval))
}

// setHalves is set in two halves (stage.go): the evaluation, and what reads its outcome.
func (r *request) setHalves(key, value []byte, opts setOptions) (node.Eval, func([]fsm.Result, error) (setOutcome, bool)) {
	var out setOutcome
	wrong, expiring := false, false
	eval := func(v node.View) []fsm.Command {
		expiring = false
		l, _, held := v.Lookup(key)
		out = setOutcome{prev: l.Owner, hadPrev: held, refused: opts.nx && held || opts.xx && !held}
		if opts.nx && !held {
			// NX takes a lock: not while the key has shares, permits or a lock-delay
			k, _ := v.Kinds(key)
			out.refused = k.Blocks()
		}
		if wrong = opts.get && l.Value != nil; wrong || out.refused {
			return nil
		}
		if opts.past {
			switch {
			case !held:
				return nil
			case l.LeaseMs != 0 && l.Token < fakeIndexBase && l.LeaseRev < fakeIndexBase:
				// Redis sets the key and expires it: the event is "expired". An Expire of the
				// lease the key has ends it the same way, on every node.
				expiring = true
				return []fsm.Command{{Kind: fsm.KindExpire, Key: key, Token: l.Token, LeaseRev: l.LeaseRev}}
			}
			// A key without a lease cannot take an Expire (only a lease ends so), nor can one
			// whose lease a script or transaction set before (its token and lease revision are
			// only predictions until it applies): it is released, which notifies "del" where
			// Redis says "expired".
			return []fsm.Command{{Kind: fsm.KindRelease, Key: key, Match: locks.ByToken(l.Token)}}
		}
		return []fsm.Command{locks.Set(key, value, opts.lease, opts.keep, opts.nx, l, held)}
	}
	return eval, func(res []fsm.Result, err error) (setOutcome, bool) {
		return r.setResult(key, opts, out, wrong, expiring, res, err)
	}
}

// setResult reads what a SET's evaluation saw (out, wrong, expiring) and its entry's results.
func (r *request) setResult(key []byte, opts setOptions, out setOutcome, wrong, expiring bool, res []fsm.Result, err error) (setOutcome, bool) {
	if err != nil {
		r.replyError(err)
		return out, false
	}
	if wrong {
		r.w.Error(errWrongType)
		return out, false
	}
	if expiring && len(res) == 1 && !res[0].Existed {
		// The lease it saw was renewed or replaced between the evaluation and the apply (a
		// leadership change): the Expire ended nothing.
		r.w.Error(errAborted)
		return out, false
	}
	if len(res) == 1 && res[0].Status == fsm.StatusGrantRejected && !opts.nx {
		// Only NX refuses; any other rejection is a key that changed between the evaluation
		// and the apply (a leadership change): nothing was written.
		r.w.Error(errAborted)
		return out, false
	}
	if len(res) == 1 && res[0].Status == fsm.StatusGranted {
		r.s.stats.grants.Add(1)
		if r.path != onScript { // inside a script the token is only a prediction
			r.c.sess.tokens.remember(key, res[0].Token)
		}
	} else if out.refused || len(res) == 1 && res[0].Status == fsm.StatusGrantRejected {
		r.s.stats.refusals.Add(1)
		r.s.metrics.contention.record(key, time.Now())
		out.refused = true
	}
	return out, true
}

// parseExpiry parses the EX s|PX ms|EXAT t|PXAT t option at args[j] (its value at args[j+1]).
func parseExpiry(a []byte) (e expiry, seconds, ok bool) {
	if is(a, "ex") || is(a, "px") || is(a, "exat") || is(a, "pxat") {
		return expiry{set: true, relative: len(a) == 2}, a[0] == 'e' || a[0] == 'E', true
	}
	return expiry{}, false, false
}

// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ms-ts|KEEPTTL]
func cmdSet(r *request) { r.runHalves(stageSet(r)) }

// stageSet is SET in two halves (stage.go).
func stageSet(r *request) (keys [][]byte, eval node.Eval, finish finishFunc) {
	key, value := r.args[1], r.args[2]
	var (
		opts       setOptions
		get        bool
		exp        expiry
		expArg     []byte
		expSeconds bool
	)
	for j := 3; j < len(r.args); j++ {
		a := r.args[j]
		hasNext := j+1 < len(r.args)
		switch {
		case is(a, "nx") && !opts.xx:
			opts.nx = true
		case is(a, "xx") && !opts.nx:
			opts.xx = true
		case is(a, "get"):
			get = true
		case is(a, "keepttl") && !exp.set:
			exp = expiry{set: true, keep: true}
		case !exp.set && hasNext:
			var ok bool
			if exp, expSeconds, ok = parseExpiry(a); !ok {
				r.w.Error(errSyntax)
				return nil, nil, nil
			}
			expArg = r.args[j+1]
			j++
		default:
			r.w.Error(errSyntax)
			return nil, nil, nil
		}
	}
	if !r.checkKey(key) || !r.checkValue(value) {
		return nil, nil, nil
	}
	if expArg != nil {
		ms, ok := r.expireValue(expArg, expSeconds, "set")
		if !ok {
			return nil, nil, nil
		}
		exp.ms = ms
	}
	opts.keep, opts.get = exp.keep, get
	if exp.set && !exp.keep {
		var ok bool
		if opts.lease, opts.past, ok = r.leaseFor(exp, "set"); !ok {
			return nil, nil, nil
		}
	}
	eval, outcome := r.setHalves(key, value, opts)
	return r.oneKey(key), eval, func(res []fsm.Result, err error) {
		out, ok := outcome(res, err)
		switch {
		case !ok:
		case get && out.hadPrev:
			r.w.Bulk(out.prev)
		case get, out.refused:
			r.w.Null()
		default:
			r.w.SimpleString("OK")
		}
	}
}

// MSET key value [key value ...] -> +OK. Every key is set, without an expiry, in one entry: all
// of them or none (a key that changed between evaluation and apply aborts it, TRYAGAIN).
func cmdMSet(r *request) {
	if len(r.args)%2 != 1 {
		r.w.Error(wrongArity("mset"))
		return
	}
	pairs := r.args[1:]
	keys := make([][]byte, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		if !r.checkKey(pairs[i]) || !r.checkValue(pairs[i+1]) {
			return
		}
		keys = append(keys, pairs[i])
	}
	res, err := r.exec(keys, func(v node.View) []fsm.Command {
		cmds := make([]fsm.Command, 0, len(keys))
		seen := map[string]bool{}
		for i := 0; i < len(pairs); i += 2 {
			m := fsm.Match{Kind: fsm.MatchAbsent}
			switch l, _, held := v.Lookup(pairs[i]); {
			case seen[string(pairs[i])]:
				// Set again by this entry: its first command's guard vouches for it (the last
				// value wins, as in Redis).
				m = fsm.Match{Kind: fsm.MatchAny}
			case held:
				m = locks.ByToken(l.Token)
			}
			seen[string(pairs[i])] = true
			cmds = append(cmds, locks.Grant(pairs[i], pairs[i+1], 0, m))
		}
		return cmds
	})
	switch {
	case err != nil:
		r.replyError(err)
	case fsm.Aborted(res) || len(res) > 0 && res[0].Status != fsm.StatusGranted:
		r.w.Error(errAborted)
	default:
		r.s.stats.grants.Add(uint64(len(res)))
		r.w.SimpleString("OK")
	}
}

// SETNX key value -> :1 set, :0 the key exists.
func cmdSetNX(r *request) {
	key, value := r.args[1], r.args[2]
	if !r.checkKey(key) || !r.checkValue(value) {
		return
	}
	if out, ok := r.set(key, value, setOptions{nx: true}); ok {
		r.w.Int(b2i(!out.refused))
	}
}

// SETEX key seconds value and PSETEX key milliseconds value -> +OK.
func cmdSetEX(r *request)  { setWithExpiry(r, "setex", true) }
func cmdPSetEX(r *request) { setWithExpiry(r, "psetex", false) }

func setWithExpiry(r *request, name string, seconds bool) {
	key, value := r.args[1], r.args[3]
	ms, ok := r.expireValue(r.args[2], seconds, name)
	if !ok || !r.checkKey(key) || !r.checkValue(value) {
		return
	}
	lease, _, ok := r.leaseFor(expiry{set: true, relative: true, ms: ms}, name)
	if !ok {
		return
	}
	if _, ok := r.set(key, value, setOptions{lease: lease}); ok {
		r.w.SimpleString("OK")
	}
}

// GETSET key value -> the old value or nil; the key is set with no expiry.
func cmdGetSet(r *request) {
	key, value := r.args[1], r.args[2]
	if !r.checkKey(key) || !r.checkValue(value) {
		return
	}
	out, ok := r.set(key, value, setOptions{get: true})
	switch {
	case !ok:
	case out.hadPrev:
		r.w.Bulk(out.prev)
	default:
		r.w.Null()
	}
}

// GETDEL key -> the value or nil; the key is deleted.
func cmdGetDel(r *request) {
	key := r.args[1]
	var (
		value       []byte
		held, wrong bool
	)
	_, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		var l fsm.Lock
		l, _, held = v.Lookup(key)
		if wrong = l.Value != nil; !held || wrong {
			return nil
		}
		value = l.Owner
		return []fsm.Command{{Kind: fsm.KindRelease, Key: key, Match: locks.ByToken(l.Token)}}
	})
	switch {
	case err != nil:
		r.replyError(err)
	case wrong:
		r.w.Error(errWrongType)
	case !held:
		r.w.Null()
	default:
		r.s.stats.releases.Add(1)
		r.w.Bulk(value)
	}
}

// GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST] -> the value or nil, changing its expiry.
func cmdGetEX(r *request) {
	key := r.args[1]
	var (
		exp        expiry
		expArg     []byte
		expSeconds bool
		persist    bool
	)
	for j := 2; j < len(r.args); j++ {
		a := r.args[j]
		switch e, secs, isExp := parseExpiry(a); {
		case isExp && !exp.set && !persist && j+1 < len(r.args):
			exp, expSeconds, expArg = e, secs, r.args[j+1]
			j++
		case is(a, "persist") && !exp.set && !persist:
			persist = true
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	// Redis looks the key up before it checks the expiry's value: a missing key is nil even
	// with EX 0. So the value's error is replied only for a key that exists.
	var (
		lease  uint64
		past   bool
		expErr string
	)
	if exp.set {
		if exp.ms, expErr = expireValueOf(expArg, expSeconds, "getex"); expErr == "" {
			lease, past, expErr = leaseOf(exp, "getex", r.s.cfg.Now(), r.s.cfg.MaxLeaseMs)
		}
	}
	var (
		value       []byte
		held, wrong bool
	)
	_, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		var l fsm.Lock
		l, _, held = v.Lookup(key)
		value, wrong = l.Owner, l.Value != nil
		switch {
		case !held, wrong, expErr != "":
			return nil
		case past:
			return []fsm.Command{{Kind: fsm.KindRelease, Key: key, Match: locks.ByToken(l.Token)}}
		case exp.set:
			return []fsm.Command{{Kind: fsm.KindRenew, Key: key, LeaseMs: lease, Match: locks.ByToken(l.Token)}}
		case persist && l.LeaseMs > 0:
			return []fsm.Command{locks.Grant(key, l.Owner, 0, locks.ByToken(l.Token))}
		}
		return nil
	})
	switch {
	case err != nil:
		r.replyError(err)
	case wrong:
		r.w.Error(errWrongType)
	case !held:
		r.w.Null()
	case expErr != "":
		r.w.Error(expErr)
	default:
		r.w.Bulk(value)
	}
}

// MGET key [key ...] -> each key's value, nil for a missing one.
func cmdMGet(r *request) {
	keys := r.args[1:]
	values := make([][]byte, len(keys))
	_, err := r.exec(keys, func(v node.View) []fsm.Command {
		for i, k := range keys {
			l, _, held := v.Lookup(k)
			values[i] = nil
			if held && l.Value == nil { // another type reads as nil, as in Redis
				values[i] = l.Owner
			}
		}
		return nil
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.Array(len(values))
	for _, v := range values {
		if v == nil {
			r.w.Null()
		} else {
			r.w.Bulk(v)
		}
	}
}

// INCR key, DECR key, INCRBY key n, DECRBY key n -> the new value. The key keeps its expiry.
func cmdIncr(r *request)   { incrBy(r, 1) }
func cmdDecr(r *request)   { incrBy(r, -1) }
func cmdIncrBy(r *request) { incrByArg(r, false) }
func cmdDecrBy(r *request) { incrByArg(r, true) }

func incrByArg(r *request, negate bool) {
	n, ok := parseInt(r.args[2])
	switch {
	case !ok:
		r.w.Error(errNotInt)
		return
	case negate && n == -1<<63:
		r.w.Error("ERR decrement would overflow")
		return
	case negate:
		n = -n
	}
	incrBy(r, n)
}

// incrBy adds by to the integer in key (0 when missing), as Redis's incrDecrCommand does.
func incrBy(r *request, by int64) {
	key := r.args[1]
	if !r.checkKey(key) {
		return
	}
	var (
		next    int64
		replyTo string // an error found while evaluating
	)
	res, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		replyTo = ""
		l, _, held := v.Lookup(key)
		var cur int64
		if held && l.Value != nil {
			replyTo = errWrongType
			return nil
		}
		if held {
			var ok bool
			if cur, ok = parseInt(l.Owner); !ok {
				replyTo = errNotInt
				return nil
			}
		}
		if by < 0 && cur < 0 && by < -1<<63-cur || by > 0 && cur > 0 && by > 1<<63-1-cur {
			replyTo = "ERR increment or decrement would overflow"
			return nil
		}
		next = cur + by
		m := fsm.Match{Kind: fsm.MatchAbsent}
		if held {
			m = locks.ByToken(l.Token)
		}
		cmd := locks.Grant(key, strconv.AppendInt(nil, next, 10), 0, m)
		cmd.KeepLease = true
		return []fsm.Command{cmd}
	})
	switch {
	case err != nil:
		r.replyError(err)
	case replyTo != "":
		r.w.Error(replyTo)
	case len(res) == 1 && res[0].Status != fsm.StatusGranted:
		// The key changed between the evaluation and the apply (a leadership change, a flush):
		// nothing was written.
		r.w.Error(errAborted)
	default:
		r.w.Int(next)
	}
}

// GET key
func cmdGet(r *request) {
	l, held, ok := r.readString(r.args[1])
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
	l, _, ok := r.readString(r.args[1])
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
