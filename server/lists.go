package server

// List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LRANGE, LINDEX, LREM, LSET,
// LTRIM, and the blocking pops BLPOP and BRPOP. A list's elements are head to tail.
// python-redis-lock signals its waiters through a list: LPUSH on release, BLPOP to wait.
//
// A blocking pop waits on the node its client is connected to (DESIGN.md §7): it queues on its
// keys in the waiters (waiters.go), which the node's change hook tells after each applied batch,
// and tries again. The clients blocked on a key of one node are served first come, first served,
// as in Redis: only the first one queued on a key tries it, and takes its element (the others
// try once it has left). The pop itself is an ordinary Write evaluated on the leader, so on a
// follower each try is forwarded as a BLPOP that the leader never blocks (its connection is a
// forwarding hop), and two waiters cannot both get one element: the leader evaluates one pop
// after the other, each guarded by the revision it saw. (Clients blocked on different nodes are
// not ordered among themselves: each node orders its own.)

import (
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// listOf returns a list holding elems (nil: none, the key goes).
func listOf(elems [][]byte) *fsm.Collection {
	return &fsm.Collection{Type: fsm.TypeList, Elems: elems}
}

// LPUSH key element [element ...], RPUSH ... -> the list's new length. LPUSHX and RPUSHX push
// only onto an existing list (:0 otherwise).
func cmdLPush(r *request)  { pushList(r, true, false) }
func cmdRPush(r *request)  { pushList(r, false, false) }
func cmdLPushX(r *request) { pushList(r, true, true) }
func cmdRPushX(r *request) { pushList(r, false, true) }

func pushList(r *request, head, existing bool) {
	if !r.checkKey(r.args[1]) || !r.checkValues(2) {
		return
	}
	elems := r.args[2:]
	var n int64
	ok := r.update(r.args[1], fsm.TypeList, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		n = 0
		if cur == nil && existing {
			return nil, false, ""
		}
		var old [][]byte
		if cur != nil {
			old = cur.Elems
		}
		next := make([][]byte, 0, len(old)+len(elems))
		if head {
			// Each element goes to the head in turn: the last one pushed is first.
			for i := len(elems) - 1; i >= 0; i-- {
				next = append(next, elems[i])
			}
			next = append(next, old...)
		} else {
			next = append(append(next, old...), elems...)
		}
		n = int64(len(next))
		return listOf(next), true, ""
	})
	if ok {
		r.w.Int(n)
	}
}

// popped returns l with n elements taken from its head or tail, and those elements in the order
// they were popped.
func popped(l *fsm.Collection, n int, head bool) (rest *fsm.Collection, elems [][]byte) {
	n = min(n, len(l.Elems))
	if head {
		return listOf(l.Elems[n:]), l.Elems[:n]
	}
	end := len(l.Elems) - n
	elems = slices.Clone(l.Elems[end:])
	slices.Reverse(elems)
	return listOf(l.Elems[:end:end]), elems
}

// LPOP key [count], RPOP key [count] -> the element popped (nil when the key is missing); with a
// count, an array of up to count elements (a nil array when the key is missing).
func cmdLPop(r *request) { popList(r, true) }
func cmdRPop(r *request) { popList(r, false) }

func popList(r *request, head bool) {
	if len(r.args) > 3 {
		r.w.Error(wrongArity(r.cmd.name))
		return
	}
	withCount := len(r.args) == 3
	count := int64(1)
	if withCount {
		var ok bool
		if count, ok = parseInt(r.args[2]); !ok || count < 0 {
			// Redis's one error for both (getPositiveLongFromObjectOrReply).
			r.w.Error("ERR value is out of range, must be positive")
			return
		}
	}
	var elems [][]byte
	missing := false
	ok := r.update(r.args[1], fsm.TypeList, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		elems, missing = nil, cur == nil
		if cur == nil || count == 0 {
			return nil, false, ""
		}
		next, e := popped(cur, int(min(count, int64(cur.Len()))), head)
		elems = e
		return next, true, ""
	})
	switch {
	case !ok:
	case missing && withCount:
		r.w.NullArray()
	case missing:
		r.w.Null()
	case withCount:
		r.w.Array(len(elems))
		for _, e := range elems {
			r.w.Bulk(e)
		}
	default:
		r.w.Bulk(elems[0])
	}
}

// LLEN key -> the list's length.
func cmdLLen(r *request) {
	if l, ok := r.readTyped(r.args[1], fsm.TypeList); ok {
		r.w.Int(int64(collectionLen(l)))
	}
}

// listRange clips Redis's start and stop (negative: from the tail) to a list of n elements:
// the elements [from, to) (empty when from == to).
func listRange(start, stop int64, n int) (from, to int) {
	ln := int64(n)
	if start < 0 {
		start += ln
	}
	if stop < 0 {
		stop += ln
	}
	start = max(start, 0)
	if start > stop || start >= ln {
		return 0, 0
	}
	stop = min(stop, ln-1)
	return int(start), int(stop + 1)
}

// rangeArgs parses the start and stop of LRANGE and LTRIM.
func rangeArgs(r *request) (start, stop int64, ok bool) {
	start, ok1 := parseInt(r.args[2])
	stop, ok2 := parseInt(r.args[3])
	if !ok1 || !ok2 {
		r.w.Error(errNotInt)
		return 0, 0, false
	}
	return start, stop, true
}

// LRANGE key start stop -> the elements from start to stop, both included.
func cmdLRange(r *request) {
	start, stop, ok := rangeArgs(r)
	if !ok {
		return
	}
	l, ok := r.readTyped(r.args[1], fsm.TypeList)
	if !ok {
		return
	}
	var elems [][]byte
	if l != nil {
		from, to := listRange(start, stop, l.Len())
		elems = l.Elems[from:to]
	}
	r.w.Array(len(elems))
	for _, e := range elems {
		r.w.Bulk(e)
	}
}

// listIndex is the position of Redis's index (negative: from the tail) in a list of n
// elements, or -1 when it is out of range.
func listIndex(index int64, n int) int {
	if index < 0 {
		index += int64(n)
	}
	if index < 0 || index >= int64(n) {
		return -1
	}
	return int(index)
}

// LINDEX key index -> the element at index, or nil.
func cmdLIndex(r *request) {
	l, ok := r.readTyped(r.args[1], fsm.TypeList)
	switch {
	case !ok:
		return
	case l == nil:
		// Redis answers a missing key before it reads the index.
		r.w.Null()
		return
	}
	index, ok := parseInt(r.args[2])
	if !ok {
		r.w.Error(errNotInt)
		return
	}
	if i := listIndex(index, l.Len()); i >= 0 {
		r.w.Bulk(l.Elems[i])
	} else {
		r.w.Null()
	}
}

// LREM key count element -> how many elements equal to element were removed: the first count
// from the head, the last -count from the tail, every one for 0.
func cmdLRem(r *request) {
	count, ok := parseInt(r.args[2])
	if !ok {
		r.w.Error(errNotInt)
		return
	}
	elem := r.args[3]
	var removed int64
	ok = r.update(r.args[1], fsm.TypeList, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		removed = 0
		if cur == nil {
			return nil, false, ""
		}
		keep := make([]bool, len(cur.Elems))
		for i := range cur.Elems {
			j := i
			if count < 0 {
				j = len(cur.Elems) - 1 - i // from the tail
			}
			keep[j] = string(cur.Elems[j]) != string(elem) || count != 0 && removed == abs(count)
			if !keep[j] {
				removed++
			}
		}
		next := make([][]byte, 0, len(cur.Elems)-int(removed))
		for i, e := range cur.Elems {
			if keep[i] {
				next = append(next, e)
			}
		}
		return listOf(next), removed > 0, ""
	})
	if ok {
		r.w.Int(removed)
	}
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// LSET key index element -> +OK; "no such key" for a missing key, "index out of range".
func cmdLSet(r *request) {
	key, elem := r.args[1], r.args[3]
	if !r.checkValue(elem) {
		return
	}
	ok := r.update(key, fsm.TypeList, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		if cur == nil {
			return nil, false, "ERR no such key"
		}
		index, ok := parseInt(r.args[2])
		if !ok {
			return nil, false, errNotInt
		}
		i := listIndex(index, cur.Len())
		if i < 0 {
			return nil, false, "ERR index out of range"
		}
		next := slices.Clone(cur.Elems)
		next[i] = elem
		return listOf(next), true, ""
	})
	if ok {
		r.w.SimpleString("OK")
	}
}

// LTRIM key start stop -> +OK, the list cut to the elements from start to stop (gone when none
// is left).
func cmdLTrim(r *request) {
	start, stop, ok := rangeArgs(r)
	if !ok {
		return
	}
	ok = r.update(r.args[1], fsm.TypeList, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		if cur == nil {
			return nil, false, ""
		}
		from, to := listRange(start, stop, cur.Len())
		if from == 0 && to == cur.Len() {
			r.touch(r.args[1]) // every element stays: nothing to write, but WATCH sees it, as in Redis
			return nil, false, ""
		}
		return listOf(cur.Elems[from:to:to]), true, ""
	})
	if ok {
		r.w.SimpleString("OK")
	}
}

// BLPOP key [key ...] timeout, BRPOP ... -> [key, element] from the first of keys that is a
// non-empty list, waiting up to timeout seconds (0: for ever) for one to be; a nil array at
// the timeout. Inside MULTI (and on the leader's side of a forwarded try) it never waits.
func cmdBLPop(r *request) { blockingPop(r, true) }
func cmdBRPop(r *request) { blockingPop(r, false) }

func blockingPop(r *request, head bool) {
	timeout, ok := r.timeoutArg(r.args[len(r.args)-1])
	if !ok {
		return
	}
	keys := r.args[1 : len(r.args)-1]
	mayBlock := r.path == onNode && !r.c.hop.forwarded
	var deadline <-chan time.Time
	if mayBlock && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	// Queue on the keys before the first try, so a push between a try and the wait is seen,
	// and so that the keys others blocked on first are theirs (mayPop). Past a bound of the
	// waiters (full) the request still tries, any key, but does not wait.
	var wt *waiter
	var full error
	if mayBlock {
		wt, full = r.s.waiters.queuePop(keys...)
	}
	popped := false
	if wt != nil {
		defer func() { r.s.waiters.leavePop(wt, popped) }()
	}
	// The first try is Redis's: a key of another type before the first non-empty list is an
	// error. Once waiting, as in Redis 7.0, a key of another type is skipped.
	strict, counted := true, false
	for {
		done, again := r.tryPop(keys, head, strict, wt)
		strict = false
		if done || !mayBlock {
			popped = done
			if !done {
				r.w.NullArray()
			}
			return
		}
		if again {
			continue
		}
		if full != nil {
			r.replyError(full)
			return
		}
		if !counted {
			counted = true
			r.s.waiters.blocked.Add(1)
			defer r.s.waiters.blocked.Add(-1)
		}
		select {
		case <-wt.sig:
		case <-deadline:
			r.w.NullArray()
			return
		case <-r.c.ctx.Done():
			return
		}
		if r.c.ctx.Err() != nil {
			return // the client is gone: it must not take an element it cannot receive
		}
	}
}

// tryPop tries one blocking pop of keys (table keys), taking only from those the queued pop wt
// may take (all for nil: waiters.mayPop). done: it has replied (the pop, or an error); otherwise
// nothing was popped, and again says to try once more at once (the pop lost a race for the
// element at apply).
func (r *request) tryPop(keys [][]byte, head, strict bool, wt *waiter) (done, again bool) {
	if r.path == onNode && !r.home.IsLeader() {
		return r.tryPopForwarded(keys, strict, wt), false
	}
	var key, elem []byte
	var wrong bool
	res, err := r.exec(keys, func(v node.View) []fsm.Command {
		key, elem, wrong = nil, nil, false
		for _, k := range keys {
			l, cur, w := lookupTyped(v, k, fsm.TypeList)
			switch {
			case w && strict:
				wrong = true
				return nil
			case w || cur == nil || !r.s.waiters.mayPop(wt, k):
				// (A list that clients blocked on first is theirs: in Redis it is already
				// empty, their pops done before this one arrived.)
				continue
			}
			next, e := popped(cur, 1, head)
			key, elem = k, e[0]
			return []fsm.Command{writeOf(k, l, cur, next)}
		}
		return nil
	})
	switch {
	case err != nil:
		r.replyError(err)
	case wrong:
		r.w.Error(errWrongType)
	case key == nil:
		return false, false
	case len(res) != 1 || res[0].Status != fsm.StatusWritten:
		return false, true
	default:
		r.w.Array(2)
		r.w.Bulk(userKey(key))
		r.w.Bulk(elem)
	}
	return true, false
}

// tryPopForwarded is tryPop on a follower: the leader pops, asked with the same command on this
// connection's upstream, where it never blocks. Only the keys wt may take are asked for (so on
// its first try a key of another type that clients here blocked on first is not reported);
// once waiting, only those this node sees holding a list: the others have nothing to give
// (Redis 7.0 skips them too).
func (r *request) tryPopForwarded(keys [][]byte, strict bool, wt *waiter) (done bool) {
	if wt != nil { // a pop that does not wait may take every key
		mine := make([][]byte, 0, len(keys))
		for _, k := range keys {
			if r.s.waiters.mayPop(wt, k) {
				mine = append(mine, k)
			}
		}
		keys = mine
	}
	if !strict {
		var lists [][]byte
		r.home.ExecLocal(func(v node.View) {
			for _, k := range keys {
				if _, cur, _ := lookupTyped(v, k, fsm.TypeList); cur != nil {
					lists = append(lists, k)
				}
			}
		})
		keys = lists
	}
	if len(keys) == 0 {
		return false
	}
	args := make([][]byte, 0, len(keys)+2)
	args = append(args, []byte(r.cmd.name))
	for _, k := range keys {
		args = append(args, userKey(k))
	}
	args = append(args, r.args[len(r.args)-1])
	fr := *r
	fr.args = args // the client's keys: a redirect names their slot
	reply, ok := fr.forward([][][]byte{args}, true)
	if !ok {
		return true // forward replied why
	}
	if s := string(reply); s == "*-1\r\n" || s == "_\r\n" {
		return false
	}
	if movedReply(reply) && !r.c.sess.slotAware {
		// The keys' slot moved to another group (slotmoves.go): the next try goes where it is.
		g, _ := r.s.ownerOfSlot(fsm.SlotOf(keys[0]))
		r.home = r.s.groups[g]
		return false
	}
	r.w.Raw(reply)
	return true
}

// longDoublePrec is the precision of the C long double Redis parses a timeout into (x86's
// 80-bit extended: a 64-bit mantissa), and its exponent range: what makes BLPOP's timeout
// arithmetic come out as Redis's (-0.001 seconds is 0 ms there, not -1).
const (
	longDoublePrec   = 64
	longDoubleMaxExp = 16384
	longDoubleMinExp = -16445
)

// timeoutArg parses a blocking command's timeout in seconds (a float; 0: for ever) as Redis
// 7.0 does: strtold, then the milliseconds truncated, then the range checks.
func (r *request) timeoutArg(arg []byte) (time.Duration, bool) {
	s := string(arg)
	if t := strings.ToLower(strings.TrimLeft(s, "+-")); t == "inf" || t == "infinity" {
		// Infinite seconds are no number of milliseconds: C's conversion makes them negative.
		r.w.Error("ERR timeout is negative")
		return 0, false
	}
	f, _, err := big.ParseFloat(s, 0, longDoublePrec, big.ToNearestEven)
	if err != nil || strings.ContainsRune(s, '_') || f.IsInf() {
		r.w.Error("ERR timeout is not a float or out of range")
		return 0, false
	}
	if exp := f.MantExp(nil); f.Sign() != 0 && (exp > longDoubleMaxExp || exp < longDoubleMinExp) {
		r.w.Error("ERR timeout is not a float or out of range")
		return 0, false
	}
	ms, acc := f.Mul(f, big.NewFloat(1000).SetPrec(longDoublePrec)).Int64()
	if ms < 0 || acc != big.Exact && (ms == -1<<63 || ms == 1<<63-1) {
		// An out of range conversion gives C's LLONG_MIN: negative too.
		r.w.Error("ERR timeout is negative")
		return 0, false
	}
	if ms > 1<<63-1-time.Now().UnixMilli() {
		r.w.Error("ERR timeout is out of range")
		return 0, false
	}
	// Past 292 years a time.Duration overflows: that long is for ever.
	return time.Duration(min(ms, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond, true
}
