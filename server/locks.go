package server

// The native lock commands: LOCK, UNLOCK, RENEW, LOCKINFO, VALIDATE (DESIGN.md §7). The lock
// kinds beside the plain lock (shares, permits, MLOCK, the lists of holders and waiters) are in
// lockkinds.go.

import (
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// maxLockWait bounds LOCK ... WAIT: a waiting LOCK holds its connection.
const maxLockWait = 60 * 1000

// lockRequest is a parsed LOCK (or SEMACQUIRE, MLOCK): what it asks for, and how long it waits.
type lockRequest struct {
	locks.Request
	wait int64 // WAIT, in milliseconds
}

// parseLock reads LOCK's arguments, or replies why it cannot and returns false.
func (r *request) parseLock() (lockRequest, bool) {
	a := lockRequest{Request: locks.Request{Key: r.args[1]}}
	if !r.checkKey(a.Key) {
		return a, false
	}
	ttl, ok := r.leaseArg(r.args[2], "lock")
	if !ok || !r.parseLockOptions(&a, r.args[3:], true) {
		return a, false
	}
	a.TTL = ttl
	return a, true
}

// parseLockOptions reads the options of a lock request, [OWNER id] [WAIT ms] [DELAY ms] and,
// where shared is allowed, [SHARED], in any order, into a; or replies why it cannot and returns
// false. A request without OWNER gets an owner of its own (defaultOwner), without DELAY the
// server's lock-delay (Config.LockDelayMs).
func (r *request) parseLockOptions(a *lockRequest, opts [][]byte, shared bool) bool {
	var waitArg, delayArg []byte
	for i := 0; i < len(opts); i++ {
		switch {
		case is(opts[i], "owner") && i+1 < len(opts) && !a.Explicit:
			a.Owner, a.Explicit = opts[i+1], true
		case is(opts[i], "wait") && i+1 < len(opts) && waitArg == nil:
			waitArg = opts[i+1]
		case is(opts[i], "delay") && i+1 < len(opts) && delayArg == nil:
			delayArg = opts[i+1]
		case is(opts[i], "shared") && shared && !a.Shared:
			a.Shared = true
			continue
		default:
			r.w.Error(errSyntax)
			return false
		}
		i++
	}
	if a.Explicit && !r.checkValue(a.Owner) {
		return false
	}
	var ok bool
	if waitArg != nil {
		if a.wait, ok = parseInt(waitArg); !ok || a.wait < 0 || a.wait > maxLockWait {
			r.w.Error("ERR invalid WAIT: milliseconds from 0 to " + itoa(maxLockWait))
			return false
		}
	}
	a.Delay = r.s.cfg.LockDelayMs
	if delayArg != nil {
		d, ok := parseInt(delayArg)
		if !ok || d < 0 || d > fsm.MaxDelayMs {
			r.w.Error("ERR invalid DELAY: milliseconds from 0 to " + itoa(fsm.MaxDelayMs))
			return false
		}
		a.Delay = uint64(d)
	}
	if !a.Explicit {
		a.Owner = r.c.defaultOwner()
	}
	return true
}

// LOCK key ttl_ms [OWNER id] [WAIT ms] [SHARED] [DELAY ms] -> :token, or nil while another owner
// holds key (after waiting up to WAIT ms for it to be released or to expire). SHARED takes a
// share: any number of shares are held together, each with its own token and lease.
func cmdLock(r *request) { r.runHalves(stageLock(r)) }

// stageLock is LOCK in two halves (stage.go): one attempt, proposed now and answered by finish.
// A LOCK that waits runs whole here (it never runs pipelined), and has no second half.
func stageLock(r *request) (keys [][]byte, eval node.Eval, finish finishFunc) {
	a, ok := r.parseLock()
	if !ok {
		return nil, nil, nil
	}
	if a.wait > 0 || a.Shared {
		r.lock(a) // a share may be refused with an error, which a half does not reply
		return nil, nil, nil
	}
	if h := r.halves; h != nil {
		h.lock = a
		return r.oneKey(a.Key), h.lockEval, h.lockFinish
	}
	return r.oneKey(a.Key), locks.LockEval(a.Request, nil), func(res []fsm.Result, err error) {
		r.finishLock(a.Key, res, err)
	}
}

// finishLock is LOCK's second half: it replies the attempt's outcome.
func (r *request) finishLock(key []byte, res []fsm.Result, err error) {
	if err != nil {
		r.replyError(err)
		return
	}
	r.replyLock(r.lockResult(key, res))
}

// replyLock is LOCK's answer to one attempt: the token, or nil when refused.
func (r *request) replyLock(token fsm.Token, granted bool) {
	if granted {
		r.w.Int(int64(token))
		return
	}
	r.w.Null()
}

// lock runs a parsed LOCK that may wait (stageLock hands it only those): one attempt, or with
// WAIT the lock queue's (handoff.go), the one way a LOCK waits. Inside a script WAIT does not
// wait, as a blocking command inside a Redis script does not block: the script holds its view
// and may not hold it for the wait.
func (r *request) lock(a lockRequest) {
	if a.wait > 0 && r.path != onScript {
		r.lockQueued(a, time.Duration(a.wait)*time.Millisecond)
		return
	}
	token, granted, err := r.tryLock(a)
	switch {
	case err != nil:
		r.replyError(err)
	default:
		r.replyLock(token, granted)
	}
}

// tryLock makes one attempt of a: a grant where there is room, a renewal when the same explicit
// owner holds it (a retry gets its token back), a refusal otherwise (*locks.PermitsError for a
// semaphore held with another count).
func (r *request) tryLock(a lockRequest) (fsm.Token, bool, error) {
	var refused error
	res, err := r.exec([][]byte{a.Key}, locks.LockEval(a.Request, &refused))
	switch {
	case err != nil:
		return 0, false, err
	case refused != nil:
		return 0, false, refused
	}
	token, granted := r.lockResult(a.Key, res)
	return token, granted, nil
}

// lockResult reads the outcome of a LOCK attempt (no results: a refusal) and counts it.
func (r *request) lockResult(key []byte, res []fsm.Result) (fsm.Token, bool) {
	if len(res) == 1 {
		switch res := res[0]; res.Status {
		case fsm.StatusGranted, fsm.StatusRenewed:
			r.s.stats.grants.Add(1)
			r.c.sess.tokens.remember(key, res.Token)
			// Inside a script the grant is only predicted; a forwarding link's client is on the
			// follower, which remembers it there (noteForwardedReply); a RESP2 client is never
			// pushed to (lockwatch.go).
			if r.path != onScript && !r.c.hop.forwarded && r.w.Protocol() == 3 {
				r.s.lockWatch.hold(r.c, key, res.Token)
			}
			return res.Token, true
		}
	}
	r.s.stats.refusals.Add(1)
	r.s.metrics.contention.record(key, time.Now())
	return 0, false
}

// tokenArg returns the token a token-less UNLOCK/RENEW means: the one this connection holds.
// name is the command's (its error tells the client to send it with the token).
func (r *request) tokenArg(key []byte, arg []byte, name string) (fsm.Token, bool) {
	if arg != nil {
		t, ok := parseToken(arg)
		if !ok {
			r.w.Error("ERR invalid token: a fencing token is a positive integer")
			return 0, false
		}
		return fsm.Token(t), true
	}
	t, ok := r.c.sess.tokens.token(key)
	if !ok {
		r.w.Error("ERR this connection holds no lock on '" + string(userKey(key)) + "': use " + strings.ToUpper(name) + " with the token")
		return 0, false
	}
	return t, true
}

// holderToken reads the token of UNLOCK key [token] and RENEW key [token] ttl_ms: args[2] when
// the request has all n arguments, else the one this connection remembers for the key.
func (r *request) holderToken(n int, name string) (fsm.Token, bool) {
	if len(r.args) > n {
		r.w.Error(wrongArity(name))
		return 0, false
	}
	var tokArg []byte
	if len(r.args) == n {
		tokArg = r.args[2]
	}
	return r.tokenArg(r.args[1], tokArg, name)
}

// UNLOCK key [token] -> :1 released, :0 not held with that token.
func cmdUnlock(r *request) { r.runHalves(stageUnlock(r)) }

// stageUnlock is UNLOCK in two halves (stage.go).
func stageUnlock(r *request) (keys [][]byte, eval node.Eval, finish finishFunc) {
	key := r.args[1]
	token, ok := r.holderToken(3, "unlock")
	if !ok {
		return nil, nil, nil
	}
	release := locks.Unlock(key, token)
	if h := r.halves; h != nil {
		h.cmd = release
		return r.oneKey(key), h.unlockEval, h.unlockFinish
	}
	return r.oneKey(key), locks.IfHolder(key, token, release), func(res []fsm.Result, err error) {
		r.finishUnlock(key, token, res, err)
	}
}

// finishUnlock is UNLOCK's second half: it replies whether the lock was released, and forgets
// the connection's token for it.
func (r *request) finishUnlock(key []byte, token fsm.Token, res []fsm.Result, err error) {
	if err != nil {
		r.replyError(err)
		return
	}
	released := applied(res, fsm.StatusReleased)
	if released && r.path != onScript {
		r.s.lockWatch.released(r.c, key, token)
	}
	if t, ok := r.c.sess.tokens.token(key); ok && t == token && r.path != onScript {
		r.c.sess.tokens.forget(key) // (inside a script the release is only predicted)
	}
	if released {
		r.s.stats.releases.Add(1)
	}
	r.w.Int(b2i(released))
}

// RENEW key [token] ttl_ms -> :1 renewed, :0 not held with that token.
func cmdRenew(r *request) {
	key := r.args[1]
	token, ok := r.holderToken(4, "renew")
	if !ok {
		return
	}
	ttl, ok := r.leaseArg(r.args[len(r.args)-1], "renew")
	if !ok {
		return
	}
	renewed, ok := r.applyIfHolder(key, token, locks.Renew(key, token, ttl), fsm.StatusRenewed)
	if ok {
		r.w.Int(b2i(renewed))
	}
}

// LOCKINFO key -> {owner, token, pttl} or nil. pttl is -1 for a lock without a lease. The owner
// is a string's value; of a collection, the element a lock recipe keeps its holder in: a hash's
// first field (Redisson's "id:thread"), the first member of a set or sorted set, a list's head.
// A shared lock's or a semaphore's: {kind, [permits], holders: [{owner, token, pttl}, ...]}; a
// key within a lock-delay: {kind: delay, token, pttl} (kindsInfo).
func cmdLockInfo(r *request) {
	key := r.args[1]
	var l fsm.Lock
	var pttl int64
	var held bool
	var kinds kindsInfoRead
	// One read of the key and its shares: a hand-off that gives a plain lock to a waiter in the
	// entry that ends the last share leaves the key never free, and two reads could see neither.
	if _, err := r.exec(r.oneKey(key), func(v node.View) []fsm.Command {
		l, pttl, held = lookupTTL(v, key)
		if !held {
			kinds.read(v, key)
		}
		return nil
	}); err != nil {
		r.replyError(err)
		return
	}
	if r.predictedToken(l) {
		return
	}
	if !held {
		r.kindsInfo(kinds)
		return
	}
	r.w.Map(3)
	r.w.BulkString("owner")
	if l.Value != nil {
		r.w.Bulk(l.Value.Elems[0])
	} else {
		r.w.Bulk(l.Owner)
	}
	r.w.BulkString("token")
	r.w.Int(int64(l.Token))
	r.w.BulkString("pttl")
	r.w.Int(pttl)
}

// predictedToken replies an error and reports true when l was set by the script or transaction
// this request runs in: its token is a prediction until the entry applies, and a resource that
// keeps the highest token it saw must never be handed one.
func (r *request) predictedToken(l fsm.Lock) bool {
	if r.path != onScript || l.Token < fakeIndexBase {
		return false
	}
	r.w.Error("ERR this lock is set by the same script or transaction: its fencing token is known only once that applies; read LOCKINFO after it")
	return true
}

// applyIfHolder replicates cmd if key is held with token, and reports whether it applied with
// the status want. On an error it has replied already and returns ok false.
func (r *request) applyIfHolder(key []byte, token fsm.Token, cmd fsm.Command, want fsm.Status) (yes, ok bool) {
	res, err := r.exec([][]byte{key}, locks.IfHolder(key, token, cmd))
	if err != nil {
		r.replyError(err)
		return false, false
	}
	return applied(res, want), true
}

// lockHalves is where a staged LOCK or UNLOCK (stage.go) keeps its arguments between its two
// halves, and the halves themselves, made once for the staged command's memory: a connection
// reuses that memory for its next staged commands (pipeline.spare), so a pipeline of LOCKs and
// UNLOCKs makes no closures, and their evaluations return their command in cmds.
type lockHalves struct {
	r    *request
	lock lockRequest    // LOCK's
	cmd  fsm.Command    // UNLOCK's release: its key, guarded by the token
	cmds [1]fsm.Command // what an evaluation returns: valid until the request is answered

	lockEval, unlockEval     node.Eval
	lockFinish, unlockFinish finishFunc
}

// makeHalves readies h for r's commands, the request of the staged command h belongs to.
func (h *lockHalves) makeHalves(r *request) {
	if h.r == r {
		return // made for this memory already
	}
	h.r = r
	h.lockEval = func(v node.View) []fsm.Command {
		c, ok, _ := locks.Lock(v, h.lock.Request) // a plain lock: never an error
		return h.one(c, ok)
	}
	h.lockFinish = func(res []fsm.Result, err error) { h.r.finishLock(h.lock.Key, res, err) }
	h.unlockEval = func(v node.View) []fsm.Command {
		return h.one(locks.HolderCommand(v, h.cmd, h.cmd.Match.Token)) // a share's goes to its own key
	}
	h.unlockFinish = func(res []fsm.Result, err error) { h.r.finishUnlock(h.cmd.Key, h.cmd.Match.Token, res, err) }
}

// forget drops the last command's arguments, keeping the halves made for this memory.
func (h *lockHalves) forget() {
	h.lock, h.cmd, h.cmds = lockRequest{}, fsm.Command{}, [1]fsm.Command{}
}

// one is an evaluation's outcome: c alone if ok, else nothing.
func (h *lockHalves) one(c fsm.Command, ok bool) []fsm.Command {
	if !ok {
		return nil
	}
	h.cmds[0] = c
	return h.cmds[:1:1] // an append (a hand-off's grants) copies it
}

// applied reports whether a one-command request applied with the status want.
func applied(res []fsm.Result, want fsm.Status) bool {
	return len(res) == 1 && res[0].Status == want
}

// VALIDATE key token -> :1 while token is the holder's, else :0.
func cmdValidate(r *request) {
	t, ok := parseToken(r.args[2])
	if !ok {
		r.w.Error("ERR invalid token: a fencing token is a positive integer")
		return
	}
	var l fsm.Lock
	var valid bool
	if _, err := r.exec(r.oneKey(r.args[1]), func(v node.View) []fsm.Command {
		l, _, _ = v.Lookup(r.args[1])
		valid = locks.Holds(v, r.args[1], fsm.Token(t)) // its plain lock's, or a share's or a permit's
		return nil
	}); err != nil {
		r.replyError(err)
		return
	}
	if r.predictedToken(l) {
		return
	}
	r.w.Int(b2i(valid))
}
