package server

// The lock kinds beside the plain lock (docs/locks.md): SEMACQUIRE and SEMRELEASE, MLOCK, and
// the lists of holders (LOCKS) and of a key's waiters (LOCKWAITERS). LOCK ... SHARED, and
// UNLOCK, RENEW, VALIDATE and LOCKINFO on a share or a permit, are in locks.go: a share or a
// permit is named by its key and its token, as a plain lock is.

import (
	"bytes"
	"encoding/hex"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// maxMLockKeys bounds the keys of one MLOCK: its grants are one log entry, and a waiting MLOCK
// sits in every one of its keys' queues.
const maxMLockKeys = 64

// SEMACQUIRE key permits ttl_ms [OWNER id] [WAIT ms] [DELAY ms] -> :token, or nil while every
// permit is held. The first acquire fixes the count while anyone holds a permit; another count
// is an error.
func cmdSemAcquire(r *request) {
	a := lockRequest{Request: locks.Request{Key: r.args[1]}}
	if !r.checkKey(a.Key) {
		return
	}
	n, ok := parseInt(r.args[2])
	if !ok || n < 1 || n > fsm.MaxPermits {
		r.w.Error("ERR invalid permits: a count from 1 to " + itoa(fsm.MaxPermits))
		return
	}
	a.Permits = uint64(n)
	ttl, ok := r.leaseArg(r.args[3], "semacquire")
	if !ok || !r.parseLockOptions(&a, r.args[4:], false) {
		return
	}
	a.TTL = ttl
	r.lock(a)
}

// SEMRELEASE key token -> :1 the permit went back, :0 nobody holds one of key with token.
func cmdSemRelease(r *request) {
	t, ok := parseToken(r.args[2])
	if !ok {
		r.w.Error("ERR invalid token: a fencing token is a positive integer")
		return
	}
	key, token := r.args[1], fsm.Token(t)
	released, ok := r.applyIfHolder(key, token, locks.Unlock(key, token), fsm.StatusReleased)
	if !ok {
		return
	}
	if released && r.path != onScript {
		r.s.lockWatch.released(r.c, key, token)
		r.s.stats.releases.Add(1)
	}
	r.w.Int(b2i(released))
}

// mlockKeysEnd is where MLOCK's keys end in args: before its trailing options (OWNER id, WAIT
// ms, DELAY ms), read from the end, so a key may be named like an option anywhere but in the
// last pairs.
func mlockKeysEnd(args [][]byte) int {
	end := len(args)
	for seen := 0; end-2 > 2 && seen < 3; seen++ {
		if o := args[end-2]; !is(o, "owner") && !is(o, "wait") && !is(o, "delay") {
			break
		}
		end -= 2
	}
	return end
}

// MLOCK ttl_ms key [key ...] [OWNER id] [WAIT ms] [DELAY ms] -> an array of one token per key, in
// the order given, or nil: granted in one entry or not at all. With WAIT it queues on every one
// of its keys at once and is granted once it heads all their queues and all are free.
func cmdMLock(r *request) {
	end := mlockKeysEnd(r.args)
	keys := r.args[2:end]
	switch {
	case len(keys) > maxMLockKeys:
		r.w.Error("ERR MLOCK takes at most " + itoa(maxMLockKeys) + " keys")
		return
	case hasDuplicate(keys):
		r.w.Error("ERR MLOCK names a key twice")
		return
	}
	for _, k := range keys {
		if !r.checkKey(k) {
			return
		}
	}
	ttl, ok := r.leaseArg(r.args[1], "mlock")
	var opts lockRequest
	if !ok || !r.parseLockOptions(&opts, r.args[end:], false) {
		return
	}
	reqs := make([]lockRequest, len(keys))
	for i, k := range keys {
		reqs[i] = opts
		reqs[i].Key, reqs[i].TTL, reqs[i].Explicit = k, ttl, false // MLOCK renews nothing: all free, or none
	}
	var res []fsm.Result
	var err error
	if opts.wait > 0 {
		res, err = r.waitForLocks(reqs, time.Duration(opts.wait)*time.Millisecond)
	} else {
		var refused error
		res, err = r.exec(keys, locksEval(reqs, &refused))
		if err == nil {
			err = refused
		}
	}
	if err != nil {
		r.replyError(err)
		return
	}
	if len(res) != len(keys) || slices.ContainsFunc(res, func(x fsm.Result) bool { return x.Status != fsm.StatusGranted }) {
		r.s.stats.refusals.Add(1)
		r.w.Null()
		return
	}
	r.w.Array(len(res))
	for i, x := range res {
		r.lockResult(keys[i], res[i:i+1])
		r.w.Int(int64(x.Token))
	}
}

// hasDuplicate reports whether two of keys are equal.
func hasDuplicate(keys [][]byte) bool {
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[string(k)] {
			return true
		}
		seen[string(k)] = true
	}
	return false
}

// locksEval is the evaluation of one attempt at every one of reqs together: their grants, all or
// none (nothing while any key has no room or a waiter ahead). One request alone may renew (the
// same explicit owner asking again); several (MLOCK) only take free keys.
func locksEval(reqs []lockRequest, refused *error) node.Eval {
	if len(reqs) == 1 {
		return locks.LockEval(reqs[0].Request, refused)
	}
	return func(v node.View) []fsm.Command {
		cmds := make([]fsm.Command, 0, len(reqs))
		for _, a := range reqs {
			c, ok, _ := locks.Lock(v, a.Request) // plain locks: never an error
			if !ok || c.Kind != fsm.KindGrant {
				return nil
			}
			cmds = append(cmds, c)
		}
		return cmds
	}
}

// waitersOf lists key's queue in order, as v has it.
func waitersOf(v node.View, key []byte) []node.LockWaiter {
	var out []node.LockWaiter
	v.Waiters(key, func(w fsm.Waiter, rem time.Duration) bool {
		kind := "lock"
		switch {
		case len(w.Request.Keys) > 0:
			kind = "mlock"
		case w.Request.Mode == fsm.WaitShared:
			kind = "shared"
		case w.Request.Mode == fsm.WaitPermit:
			kind = "semaphore"
		}
		out = append(out, node.LockWaiter{Owner: bytes.Clone(w.Request.Owner), Kind: kind, Place: w.Seq,
			Waited: time.Duration(w.Lock.LeaseMs)*time.Millisecond - rem, Left: rem,
			Since: sinceOf(w.Lock), Node: string(w.Lock.Origin)})
		return true
	})
	return out
}

// sinceOf is when l was granted (or, a waiter's entry, queued), zero when not recorded.
func sinceOf(l fsm.Lock) time.Time {
	if l.Since == 0 {
		return time.Time{}
	}
	return time.UnixMilli(l.Since)
}

// writeSince writes a grant or queueing time as Unix milliseconds, or nil when not recorded.
func (r *request) writeSince(t time.Time) {
	if t.IsZero() {
		r.w.Null()
		return
	}
	r.w.Int(t.UnixMilli())
}

// writeNode writes a node's ID, or nil when not recorded.
func (r *request) writeNode(id string) {
	if id == "" {
		r.w.Null()
		return
	}
	r.w.BulkString(id)
}

// LOCKWAITERS key -> the requests queued on key in order (LOCK, SEMACQUIRE and MLOCK with WAIT),
// each {owner, kind, place, waiting-ms, wait-left-ms, since, node}: the replicated queue, as on
// the leader. since is when it queued (Unix ms, the leader's clock), node the ID of the node its
// client is on; either is nil when not recorded.
func cmdLockWaiters(r *request) {
	var ws []node.LockWaiter
	if _, err := r.exec(r.oneKey(r.args[1]), func(v node.View) []fsm.Command {
		ws = waitersOf(v, r.args[1])
		return nil
	}); err != nil {
		r.replyError(err)
		return
	}
	r.w.Array(len(ws))
	for _, w := range ws {
		r.w.Map(7)
		r.w.BulkString("owner")
		r.w.Bulk(w.Owner)
		r.w.BulkString("kind")
		r.w.BulkString(w.Kind)
		r.w.BulkString("place")
		r.w.Int(int64(w.Place))
		r.w.BulkString("waiting-ms")
		r.w.Int(w.Waited.Milliseconds())
		r.w.BulkString("wait-left-ms")
		r.w.Int(w.Left.Milliseconds())
		r.w.BulkString("since")
		r.writeSince(w.Since)
		r.w.BulkString("node")
		r.writeNode(w.Node)
	}
}

// kindsInfoRead is what LOCKINFO read of a key with no plain lock: its shares or permits, or its
// lock-delay.
type kindsInfoRead struct {
	k       fsm.Kinds
	left    time.Duration
	holders []holderInfo
}

// read reads key's kinds from v (in an evaluation, which may run again: it starts afresh).
func (kr *kindsInfoRead) read(v node.View, key []byte) {
	kr.k, kr.left = v.Kinds(key)
	kr.holders = kr.holders[:0]
	v.Holders(key, func(l fsm.Lock, rem time.Duration) bool {
		kr.holders = append(kr.holders, holderInfo{owner: l.Owner, token: l.Token, pttl: rem.Milliseconds()})
		return true
	})
}

// kindsInfo is LOCKINFO of a key with no plain lock: its shares or permits, or its lock-delay.
// It replies nil when the key has neither.
func (r *request) kindsInfo(kr kindsInfoRead) {
	k, left, holders := kr.k, kr.left, kr.holders
	switch {
	case len(holders) > 0:
		kind, fields := "shared", 2
		if k.Permits > 0 {
			kind, fields = "semaphore", 3
		}
		r.w.Map(fields)
		r.w.BulkString("kind")
		r.w.BulkString(kind)
		if k.Permits > 0 {
			r.w.BulkString("permits")
			r.w.Int(int64(k.Permits))
		}
		r.w.BulkString("holders")
		r.w.Array(len(holders))
		for _, h := range holders {
			h.reply(r)
		}
	case k.Delayed:
		r.w.Map(3)
		r.w.BulkString("kind")
		r.w.BulkString("delay")
		r.w.BulkString("token") // the holder whose lease expired
		r.w.Int(int64(k.Delay.Token))
		r.w.BulkString("pttl")
		r.w.Int(left.Milliseconds())
	default:
		r.w.Null()
	}
}

// holderInfo is one share's or permit's LOCKINFO.
type holderInfo struct {
	owner []byte
	token fsm.Token
	pttl  int64
}

func (h holderInfo) reply(r *request) {
	r.w.Map(3)
	r.w.BulkString("owner")
	r.w.Bulk(h.owner)
	r.w.BulkString("token")
	r.w.Int(int64(h.token))
	r.w.BulkString("pttl")
	r.w.Int(h.pttl)
}

// maxLocksCount bounds a LOCKS page's COUNT: the entries one call walks under the view lock.
const maxLocksCount = 1000

// LOCKS [CURSOR c] [MATCH pattern] [TYPE lock|shared|semaphore] [COUNT n] -> [next cursor,
// [{key, kind, owner, token, pttl, since, node}, ...]] of the current database: its plain locks
// (string keys) and the holders of its shared locks and semaphores, paged as SCAN pages (COUNT
// entries looked at per call, 10 by default; cursor 0 starts and ends the walk). since is when
// the holder was granted it (Unix ms, the leader's clock) and node the ID of the node its client
// asked through; either is nil when not recorded (a key SET without NX, a lock granted before
// log format 6).
func cmdLocks(r *request) {
	from := []byte{byte(r.db)}
	count := int64(10)
	var pattern *glob
	var kind string
	for i := 1; i < len(r.args); i += 2 {
		if i+1 >= len(r.args) {
			r.w.Error(errSyntax)
			return
		}
		v := r.args[i+1]
		switch {
		case is(r.args[i], "cursor"):
			if string(v) == "0" {
				continue
			}
			c, err := hex.DecodeString(string(v))
			if err != nil || len(c) == 0 || c[0] != byte(r.db) && !(fsm.Hidden(c) && len(c) > 1 && c[1] == byte(r.db)) {
				r.w.Error("ERR invalid cursor")
				return
			}
			from = c
		case is(r.args[i], "match"):
			pattern = compileGlob(v, r.s.cfg.MaxKeyBytes) // before the view lock
		case is(r.args[i], "type"):
			kind = lower(v)
			if kind != "lock" && kind != "shared" && kind != "semaphore" {
				r.w.Error("ERR invalid TYPE: lock, shared or semaphore")
				return
			}
		case is(r.args[i], "count"):
			n, ok := parseInt(v)
			if !ok || n < 1 || n > maxLocksCount {
				r.w.Error("ERR invalid COUNT: from 1 to " + itoa(maxLocksCount))
				return
			}
			count = n
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	var page []lockEntry
	var next []byte
	user := r.s.users()[*r.c.user.Load()]
	if user == nil {
		r.w.Error("NOPERM this user has no permissions to access one of the keys used as arguments")
		return
	}
	readable := func(key []byte) bool { return user.canKey(key, permRead) }
	if r.spans {
		page, next = r.s.spanLocks(byte(r.db), from, int(count), pattern, kind, readable, nil)
	} else {
		_, err := r.exec(nil, func(v node.View) []fsm.Command {
			page, next = listLocks(v, byte(r.db), from, int(count), pattern, kind, readable)
			return nil
		})
		if err != nil {
			r.replyError(err)
			return
		}
	}
	r.w.Array(2)
	if next == nil {
		r.w.BulkString("0")
	} else {
		r.w.BulkString(hex.EncodeToString(next))
	}
	r.w.Array(len(page))
	for _, e := range page {
		r.w.Map(7)
		r.w.BulkString("key")
		r.w.Bulk(e.key)
		r.w.BulkString("kind")
		r.w.BulkString(e.kind)
		r.w.BulkString("owner")
		r.w.Bulk(e.owner)
		r.w.BulkString("token")
		r.w.Int(int64(e.token))
		r.w.BulkString("pttl")
		r.w.Int(e.pttl)
		r.w.BulkString("since")
		r.writeSince(e.since)
		r.w.BulkString("node")
		r.writeNode(e.node)
	}
}

// lockEntry is one holder LOCKS lists.
type lockEntry struct {
	at         []byte // its table key (a share's or a permit's: its holder key)
	key, owner []byte
	kind       string
	token      fsm.Token
	pttl       int64
	since      time.Time // zero: not recorded
	node       string    // "": not recorded
}

// listLocks walks database db's locks from the table key from: its plain locks (string keys), then
// its shares and permits (hidden keys, fsm.KindsFrom). It looks at up to limit entries and returns
// those that match and that the user may read (readable: an owner is a string's value), and the
// key to go on from (nil: the walk is done).
func listLocks(v node.View, db byte, from []byte, limit int, pattern *glob, kind string, readable func(key []byte) bool) (page []lockEntry, next []byte) {
	seen := 0
	visit := func(key []byte, l fsm.Lock) bool {
		if seen == limit {
			next = slices.Clone(key)
			return false
		}
		seen++
		e := lockEntry{owner: slices.Clone(l.Owner), token: l.Token, pttl: -1, since: sinceOf(l), node: string(l.Origin)}
		if l.LeaseMs > 0 {
			_, rem, _ := v.Lookup(key)
			e.pttl = rem.Milliseconds()
		}
		if base, _, ok := fsm.HolderOf(key); ok {
			e.key, e.kind = base[1:], "shared"
			if k, _ := v.Kinds(base); k.Permits > 0 {
				e.kind = "semaphore"
			}
		} else if fsm.Hidden(key) || l.Value != nil {
			return true // a marker, a lock-delay, a collection: no holder
		} else {
			e.key, e.kind = key[1:], "lock"
		}
		if (kind == "" || kind == e.kind) && (pattern == nil || pattern.match(e.key)) && readable(e.key) {
			e.key, e.at = slices.Clone(e.key), slices.Clone(key)
			page = append(page, e)
		}
		return true
	}
	if !fsm.Hidden(from) {
		done := true
		v.Ascend(from, func(key []byte, l fsm.Lock) bool {
			if key[0] != db {
				return false
			}
			if !visit(key, l) {
				done = false
				return false
			}
			return true
		})
		if !done {
			return page, next
		}
		from = []byte(fsm.KindsFrom(db))
	}
	v.Ascend(from, func(key []byte, l fsm.Lock) bool {
		if !fsm.Hidden(key) || key[1] != db {
			return false
		}
		return visit(key, l)
	})
	return page, next
}
