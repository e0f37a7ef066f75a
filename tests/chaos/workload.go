package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// opTimeout bounds one request: longer than an election, so most requests caught by a fault
// still get a reply; those that do not are unknown outcomes.
const opTimeout = 4 * time.Second

// Workload shape: keys rotate every keyEpoch, keysPerEpoch at a time, so several clients
// contend on each key and each key's history (what porcupine searches) stays bounded.
const (
	keyEpoch     = 10 * time.Second
	keysPerEpoch = 3
)

// worker is one client of the workload, talking to one node at a time and moving to another on
// any failure.
type worker struct {
	id      int
	rng     *rand.Rand
	rec     *recorder
	addrs   []string // client addresses of the nodes, in node order
	node    int
	c       *client
	stop    *atomic.Bool
	attempt int
}

func (w *worker) sleep(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1)))
}

func (w *worker) key() string {
	return fmt.Sprintf("k%d.%d", w.rec.now()/int64(keyEpoch), w.rng.IntN(keysPerEpoch))
}

func (w *worker) conn() *client {
	addr := w.addrs[w.node%len(w.addrs)]
	if w.c == nil || w.c.addr != addr {
		if w.c != nil {
			w.c.close()
		}
		w.c = &client{addr: addr}
	}
	return w.c
}

// settle fills op's outcome from err, and moves the worker to another node on any failure.
func (w *worker) settle(op *Op, err error) {
	op.Outcome, op.Err = outcomeOf(err)
	if op.Outcome != OK {
		w.failover()
	}
}

// outcomeOf classifies a request's error: none (OK), certainly not done (Fail), or Unknown.
func outcomeOf(err error) (outcome, text string) {
	switch {
	case err == nil:
		return OK, ""
	case certainFailure(err):
		return Fail, err.Error()
	}
	return Unknown, err.Error()
}

// failover drops the worker's connection and moves it to another node.
func (w *worker) failover() {
	w.c.close()
	w.node = (w.node + 1 + w.rng.IntN(len(w.addrs))) % len(w.addrs)
}

// call runs one command against the current node and fills op's outcome and timing.
func (w *worker) call(op *Op, args ...string) any {
	c := w.conn()
	op.Client, op.Node = w.id, c.addr
	op.Invoke = w.rec.now()
	v, err := c.do(opTimeout, args...)
	op.Complete = w.rec.now()
	w.settle(op, err)
	return v
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case string:
		n, err := strconv.ParseInt(x, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// unexpected marks an op whose reply made no sense as unknown (and keeps the reply).
func unexpected(op *Op, v any) {
	op.Outcome = Unknown
	op.Err = fmt.Sprintf("unexpected reply %#v", v)
}

func (w *worker) newOwner() string {
	w.attempt++
	return fmt.Sprintf("c%d-%d", w.id, w.attempt)
}

// lock acquires with the native LOCK key ttl OWNER id: the reply is the token.
func (w *worker) lock(key string, ttl int64) Op {
	op := Op{Kind: Acquire, Via: "lock", Key: key, TTL: ttl, Owner: w.newOwner()}
	v := w.call(&op, "LOCK", key, strconv.FormatInt(ttl, 10), "OWNER", op.Owner)
	if op.Outcome == OK {
		if v == nil {
			op.Granted = false
		} else if n, ok := asInt(v); ok && n > 0 {
			op.Granted, op.Token = true, uint64(n)
		} else {
			unexpected(&op, v)
		}
	}
	w.rec.add(op)
	return op
}

// lockPipelined acquires key with LOCK as lock does, in one pipeline with a LOCK of every other
// key of the epoch (each its own owner): a pipeline of lock commands is proposed whole before
// any commits (server/stage.go), and each grant must still be linearizable on its own. The
// others' grants are released at once, in one pipeline of UNLOCKs. Every LOCK and UNLOCK is
// recorded, completed when its own reply came.
func (w *worker) lockPipelined(key string, ttl int64) Op {
	keys := []string{key}
	epoch := key[:strings.LastIndexByte(key, '.')+1] // "k<epoch>.", as key() names them
	for i := range keysPerEpoch {
		if k := epoch + strconv.Itoa(i); k != key {
			keys = append(keys, k)
		}
	}
	ops := make([]Op, len(keys))
	cmds := make([][]string, len(keys))
	for i, k := range keys {
		ops[i] = Op{Kind: Acquire, Via: "lock", Key: k, TTL: ttl, Owner: w.newOwner()}
		cmds[i] = []string{"LOCK", k, strconv.FormatInt(ttl, 10), "OWNER", ops[i].Owner}
	}
	var unlocks [][]string
	var releases []Op
	w.pipeline(ops, cmds, func(i int, v any) {
		op := &ops[i]
		if v == nil {
			op.Granted = false
		} else if n, ok := asInt(v); ok && n > 0 {
			op.Granted, op.Token = true, uint64(n)
			if i > 0 {
				releases = append(releases, Op{Kind: Release, Key: op.Key, Owner: op.Owner, Token: op.Token})
				unlocks = append(unlocks, []string{"UNLOCK", op.Key, strconv.FormatUint(op.Token, 10)})
			}
		} else {
			unexpected(op, v)
		}
	})
	if len(releases) > 0 && ops[0].Outcome != Fail {
		w.pipeline(releases, unlocks, func(i int, v any) { boolReply(&releases[i], v) })
	}
	return ops[0]
}

// pipeline sends cmds in one pipeline, one op each, and records every op: read sets the
// outcome of an op whose reply came (OK). Each op completes when its own reply came; an I/O
// error settles the rest as it settles one request.
func (w *worker) pipeline(ops []Op, cmds [][]string, read func(i int, v any)) {
	c := w.conn()
	start := w.rec.now()
	for i := range ops {
		ops[i].Client, ops[i].Node, ops[i].Invoke = w.id, c.addr, start
	}
	vs, errs := c.pipe(opTimeout, func(i int) { ops[i].Complete = w.rec.now() }, cmds...)
	end := w.rec.now()
	failed := false
	for i := range ops {
		if ops[i].Complete == 0 { // the last, or one an I/O error ended
			ops[i].Complete = end
		}
		ops[i].Outcome, ops[i].Err = outcomeOf(errs[i])
		failed = failed || ops[i].Outcome != OK
		if ops[i].Outcome == OK {
			read(i, vs[i])
		}
		w.rec.add(ops[i])
	}
	if failed {
		w.failover()
	}
}

// setNX acquires the Redlock way, SET key owner NX PX ttl, with LOCKINFO pipelined behind it
// for the token (docs/fencing.md). Both are recorded: the LOCKINFO as a read, and its token
// given to the grant when it names this owner (owners are unique per attempt, so that lock is
// this grant's).
func (w *worker) setNX(key string, ttl int64) Op {
	op := Op{Kind: Acquire, Via: "set", Key: key, TTL: ttl, Owner: w.newOwner()}
	return w.acquireThenRead(op, []string{"SET", key, op.Owner, "NX", "PX", strconv.FormatInt(ttl, 10)}, "OK")
}

// The hash lock, as Redisson keeps a re-entrant lock: a hash whose field is the holder, with a
// lease on the key. Each script is one replicated entry (a Write of the hash, and its lease).
const (
	hashAcquireScript = "if redis.call('exists', KEYS[1]) == 0 then redis.call('hset', KEYS[1], ARGV[1], 1) " +
		"redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end return 0"
	hashRenewScript = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then redis.call('pexpire', KEYS[1], ARGV[2]) " +
		"return 1 end return 0"
	hashReleaseScript = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then redis.call('hdel', KEYS[1], ARGV[1]) " +
		"return 1 end return 0"
)

// hashLock acquires with hashAcquireScript, LOCKINFO pipelined behind it for the token (a
// hash's holder is its first field). Its renewals and release go by owner (hashCall): owners
// are unique per attempt, so the owner names this grant as its token would.
func (w *worker) hashLock(key string, ttl int64) Op {
	op := Op{Kind: Acquire, Via: "hash", Key: key, TTL: ttl, Owner: w.newOwner()}
	return w.acquireThenRead(op, []string{"EVAL", hashAcquireScript, "1", key, op.Owner, strconv.FormatInt(ttl, 10)}, int64(1))
}

// hashCall renews (ttl > 0) or releases a hash lock by its owner.
func (w *worker) hashCall(kind string, key, owner string, token uint64, ttl int64) Op {
	op := Op{Kind: kind, Key: key, Owner: owner, Token: token, TTL: ttl}
	script := hashReleaseScript
	if kind == Renew {
		script = hashRenewScript
	}
	v := w.call(&op, "EVAL", script, "1", key, owner, strconv.FormatInt(ttl, 10))
	boolReply(&op, v)
	w.rec.add(op)
	return op
}

// acquireThenRead sends an acquire (whose reply is grantedReply when granted, nil when not)
// with LOCKINFO pipelined behind it, and records both.
func (w *worker) acquireThenRead(op Op, acquire []string, grantedReply any) Op {
	key := op.Key
	rd := Op{Kind: Read, Key: key}
	c := w.conn()
	op.Client, op.Node, rd.Client, rd.Node = w.id, c.addr, w.id, c.addr
	op.Invoke = w.rec.now()
	rd.Invoke = op.Invoke
	vs, errs := c.pipe(opTimeout, func(int) { op.Complete = w.rec.now() }, acquire, []string{"LOCKINFO", key})
	rd.Complete = w.rec.now()
	if op.Complete == 0 {
		op.Complete = rd.Complete
	}
	w.settle(&op, errs[0])
	if op.Outcome == OK {
		switch vs[0] {
		case nil, int64(0):
		case grantedReply:
			op.Granted = true
		default:
			unexpected(&op, vs[0])
		}
	}
	if op.Outcome == Fail {
		w.rec.add(op)
		return op // the connection is gone: so is the LOCKINFO
	}
	rd.Outcome = OK
	if errs[1] != nil {
		rd.Outcome, rd.Err = Unknown, errs[1].Error()
		if certainFailure(errs[1]) {
			rd.Outcome = Fail
		}
	} else if err := parseLockInfo(&rd, vs[1]); err != nil {
		unexpected(&rd, vs[1])
	}
	if op.Granted && rd.Outcome == OK && !rd.Free && rd.RdOwner == op.Owner {
		op.Token = rd.RdToken
	}
	w.rec.add(op)
	w.rec.add(rd)
	return op
}

func (w *worker) renew(key, owner string, token uint64, ttl int64) Op {
	op := Op{Kind: Renew, Key: key, TTL: ttl, Owner: owner, Token: token}
	v := w.call(&op, "RENEW", key, strconv.FormatUint(token, 10), strconv.FormatInt(ttl, 10))
	boolReply(&op, v)
	w.rec.add(op)
	return op
}

func (w *worker) release(key, owner string, token uint64) Op {
	op := Op{Kind: Release, Key: key, Owner: owner, Token: token}
	v := w.call(&op, "UNLOCK", key, strconv.FormatUint(token, 10))
	boolReply(&op, v)
	w.rec.add(op)
	return op
}

func boolReply(op *Op, v any) {
	if op.Outcome != OK {
		return
	}
	switch n, ok := asInt(v); {
	case ok && n == 1:
		op.Success = true
	case ok && n == 0:
	default:
		unexpected(op, v)
	}
}

func (w *worker) read(key string) Op {
	op := Op{Kind: Read, Key: key}
	v := w.call(&op, "LOCKINFO", key)
	if op.Outcome == OK {
		if err := parseLockInfo(&op, v); err != nil {
			unexpected(&op, v)
		}
	}
	w.rec.add(op)
	return op
}

// parseLockInfo reads LOCKINFO's RESP2 reply: nil, [owner token pttl], or the flat map
// [owner o token t pttl p].
func parseLockInfo(op *Op, v any) error {
	if v == nil {
		op.Free = true
		return nil
	}
	a, ok := v.([]any)
	if !ok {
		return fmt.Errorf("not an array")
	}
	var owner, tok, pttl any
	switch len(a) {
	case 3:
		owner, tok, pttl = a[0], a[1], a[2]
	case 6:
		for i := 0; i < 6; i += 2 {
			switch a[i] {
			case "owner":
				owner = a[i+1]
			case "token":
				tok = a[i+1]
			case "pttl":
				pttl = a[i+1]
			}
		}
	default:
		return fmt.Errorf("length %d", len(a))
	}
	s, ok1 := owner.(string)
	t, ok2 := asInt(tok)
	p, ok3 := asInt(pttl)
	if !ok1 || !ok2 || !ok3 {
		return fmt.Errorf("fields")
	}
	op.RdOwner, op.RdToken, op.RdPTTL = s, uint64(t), p
	return nil
}

// holding is what a holder knows of its lease: it began after from, and by its own reckoning
// lasts until validUntil (from the invocation of its last acknowledged grant or renewal).
type holding struct {
	key              string
	token            uint64
	from, validUntil int64
	ttl              int64
}

// work is the holder's read-modify-write of both protected resources. Sometimes the holder
// pauses between the read and the write for longer than its lease (a GC pause, a stopped VM):
// the unfenced resource then takes the stale write over a newer holder's, the fenced one
// rejects it. That is the overlap the unfenced variant counts.
func (w *worker) work(h holding) {
	a := Access{Client: w.id, Key: h.key, Token: h.token, LeaseFrom: h.from, ValidUntil: h.validUntil, Start: w.rec.now()}
	fv, ok := w.rec.fencedRead(h.key, h.token)
	uv := w.rec.unfencedRead(h.key)
	if a.Paused = w.rng.Float64() < 0.1; a.Paused {
		w.sleep(time.Duration(h.ttl)*time.Millisecond, time.Duration(h.ttl+1000)*time.Millisecond)
	} else {
		w.sleep(time.Millisecond, 30*time.Millisecond)
	}
	u := a
	u.Based = uv
	w.rec.unfencedWrite(u)
	if !ok {
		w.rec.fencedRejected(a)
		return
	}
	a.Based = fv
	w.rec.fencedWrite(a)
}

// run is the client loop: read a key, or acquire it (LOCK, alone or pipelined with LOCKs of
// the epoch's other keys, SET NX PX, or a hash lock; 1-2 s lease), work on the resources,
// renew a few times (some renewals deliberately late, racing the expiry), release, and read
// again.
//
// The client believes it holds the lock from the grant until a renewal or release is refused
// or certainly failed; an unknown renewal leaves it believing, as a naive client would. Its own
// reckoning of the lease (validUntil) only counts acknowledged grants and renewals, and is what
// the fenced-resource checker holds the server to.
func (w *worker) run() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for !w.stop.Load() {
		key := w.key()
		if w.rng.Float64() < 0.25 {
			w.read(key)
			w.sleep(20*time.Millisecond, 100*time.Millisecond)
			continue
		}
		ttl := int64(1000 + w.rng.IntN(1001))
		var g Op
		switch w.rng.IntN(4) {
		case 0:
			g = w.lock(key, ttl)
		case 3:
			g = w.lockPipelined(key, ttl)
		case 1:
			g = w.setNX(key, ttl)
		default:
			g = w.hashLock(key, ttl)
		}
		if g.Outcome != OK || !g.Granted || g.Token == 0 {
			// refused, failed, unknown, or SET NX granted without a token to work with: the
			// lease runs out on its own
			w.sleep(50*time.Millisecond, 150*time.Millisecond)
			continue
		}
		h := holding{key: key, token: g.Token, from: g.Invoke, validUntil: g.Invoke + ttl*int64(time.Millisecond), ttl: ttl}
		held := true
		for r := 1 + w.rng.IntN(3); r > 0 && held && !w.stop.Load(); r-- {
			w.work(h)
			if w.rng.Float64() < 0.2 {
				// deliberately late: the renewal races the expiry, and so does one more use of
				// the resource, at the end of the lease
				w.sleep(time.Duration(ttl-150)*time.Millisecond, time.Duration(ttl+150)*time.Millisecond)
				w.work(h)
			} else {
				w.sleep(50*time.Millisecond, time.Duration(ttl/2)*time.Millisecond)
			}
			var rn Op
			if g.Via == "hash" {
				rn = w.hashCall(Renew, key, g.Owner, g.Token, ttl)
			} else {
				rn = w.renew(key, g.Owner, g.Token, ttl)
			}
			switch {
			case rn.Outcome == OK && rn.Success:
				h.from, h.validUntil = rn.Invoke, rn.Invoke+ttl*int64(time.Millisecond)
			case rn.Outcome == OK || rn.Outcome == Fail:
				held = false
			}
		}
		if held && w.rng.Float64() < 0.75 {
			w.work(h)
			if g.Via == "hash" {
				w.hashCall(Release, key, g.Owner, g.Token, 0)
			} else {
				w.release(key, g.Owner, g.Token)
			}
		}
		if w.rng.Float64() < 0.3 {
			w.read(key)
		}
	}
}

// durableWorker takes locks with an hour-long lease on keys of their own ("d…") and releases
// some of them: at the end every acknowledged grant and release must still be in force on every
// node (checkDurable), whatever was killed or restarted in between.
func (w *worker) durable() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for n := 0; !w.stop.Load(); n++ {
		key := fmt.Sprintf("d%d.%d", w.id, n)
		g := w.lock(key, 3600*1000)
		if g.Outcome == OK && g.Granted && w.rng.IntN(2) == 0 {
			w.sleep(10*time.Millisecond, 200*time.Millisecond)
			w.release(key, g.Owner, g.Token)
		}
		w.sleep(100*time.Millisecond, 300*time.Millisecond)
	}
}
