package chaos

// The data types lock recipes keep besides the lock itself, under the same faults: the counter
// of Redisson's semaphores and fenced locks (INCR, INCRBY, DECRBY, GET, and Redisson's
// permit-taking script), the sorted-set semaphore of Symfony's and redis-semaphore's stores
// (ZADD member score, ZREM, ZREMRANGEBYSCORE, ZCARD, ZSCORE, and redis-semaphore's acquire
// script), and python-redis-lock's signal list (LPUSH, RPOP, LLEN). Each type has its own small
// porcupine model, checked per key like the lock keys (datamodels.go). Keys rotate every
// keyEpoch, typeKeysPerEpoch of each type at a time, so every client of the workload contends
// on them and each key's history stays short.

import (
	"fmt"
	"strconv"
	"time"
)

// Data-type models: which one an op belongs to.
const (
	Counter = "counter"
	ZSet    = "zset"
	List    = "list"
)

// Data-type op kinds: the command sent, or the recipe's script.
const (
	Incr    = "incr"
	IncrBy  = "incrby"
	DecrBy  = "decrby"
	Get     = "get"
	SemTake = "sem-take" // counter: semTakeScript, DECRBY Delta if at least Delta are left

	ZAdd        = "zadd"
	ZRem        = "zrem"
	ZRemBelow   = "zremrangebyscore" // -inf to Cutoff
	ZCard       = "zcard"
	ZScore      = "zscore"
	ZSemAcquire = "zsem-acquire" // zsetAcquireScript

	LPush = "lpush"
	RPop  = "rpop"
	LLen  = "llen"
)

// The recipes' scripts, as the libraries send them (names shortened).
const (
	// semTakeScript is Redisson's RSemaphore.tryAcquire: take ARGV[1] permits if there are as many.
	semTakeScript = "local v = redis.call('get', KEYS[1]) if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then " +
		"redis.call('decrby', KEYS[1], ARGV[1]) return 1 end return 0"
	// zsetAcquireScript is redis-semaphore's acquire: drop the holders whose score is at most
	// ARGV[4] (timed out), then join as ARGV[2] with score ARGV[3] if fewer than ARGV[1] hold.
	zsetAcquireScript = "redis.call('zremrangebyscore', KEYS[1], '-inf', ARGV[4]) " +
		"if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then redis.call('zadd', KEYS[1], ARGV[3], ARGV[2]) return 1 end return 0"
)

// Workload shape: typeKeysPerEpoch keys of each type per keyEpoch; zMembers semaphore holders
// per sorted set (a bounded model state), zLimit of them admitted by the acquire script.
const (
	typeKeysPerEpoch = 1
	zMembers         = 3
	zLimit           = 2
)

// TypedOp is one operation on a counter, sorted set or list. Times as in Op: Complete is never
// for an unknown outcome.
type TypedOp struct {
	Client int    `json:"client"`
	Node   string `json:"node"`
	Model  string `json:"model"`
	Key    string `json:"key"`
	Kind   string `json:"kind"`
	// What was asked.
	Delta  int64  `json:"delta,omitempty"`  // incr/incrby/decrby: the change (negative for decrby); sem-take: the permits
	Member int    `json:"member,omitempty"` // zset ops: the member, "m<Member>"
	Score  int64  `json:"score,omitempty"`  // zadd, zsem-acquire: the member's score (ms since the run started, +1)
	Cutoff int64  `json:"cutoff,omitempty"` // zremrangebyscore, zsem-acquire: scores up to it are removed
	Value  string `json:"value,omitempty"`  // lpush: the element, unique in the run
	// What the reply said (Outcome OK): an integer (a counter's value, a count, a length, a
	// score, a script's 1 or 0), nil, or the element popped.
	Invoke   int64  `json:"invoke_ns"`
	Complete int64  `json:"complete_ns"`
	Outcome  string `json:"outcome"`
	Reply    int64  `json:"reply,omitempty"`
	Nil      bool   `json:"nil,omitempty"`
	Elem     string `json:"elem,omitempty"`
	Err      string `json:"err,omitempty"`
}

// reply is what an op's reply said, or what a model predicts it says.
type reply struct {
	N    int64
	Nil  bool
	Elem string
}

func (o TypedOp) reply() reply { return reply{N: o.Reply, Nil: o.Nil, Elem: o.Elem} }

// read reports whether the op changes nothing.
func (o TypedOp) read() bool {
	switch o.Kind {
	case Get, ZCard, ZScore, LLen:
		return true
	}
	return false
}

func zMember(i int) string { return "m" + strconv.Itoa(i) }

func (o TypedOp) String() string {
	res := o.Outcome
	switch {
	case o.Outcome != OK:
		if o.Err != "" {
			res += " (" + o.Err + ")"
		}
	case o.Nil:
		res = "nil"
	case o.Kind == RPop:
		res = o.Elem
	default:
		res = strconv.FormatInt(o.Reply, 10)
	}
	var args string
	switch o.Kind {
	case IncrBy, SemTake:
		args = fmt.Sprintf(" %d", o.Delta)
	case DecrBy:
		args = fmt.Sprintf(" %d", -o.Delta)
	case ZAdd:
		args = fmt.Sprintf(" %s %d", zMember(o.Member), o.Score)
	case ZRem, ZScore:
		args = " " + zMember(o.Member)
	case ZRemBelow:
		args = fmt.Sprintf(" -inf %d", o.Cutoff)
	case ZSemAcquire:
		args = fmt.Sprintf(" %s %d limit %d below %d", zMember(o.Member), o.Score, zLimit, o.Cutoff)
	case LPush:
		args = " " + o.Value
	}
	return fmt.Sprintf("c%d %s %s%s -> %s", o.Client, o.Kind, o.Key, args, res)
}

// typedKey is the key of model m the worker works on now.
func (w *worker) typedKey(m string) string {
	prefix := map[string]string{Counter: "ctr", ZSet: "zs", List: "ls"}[m]
	return fmt.Sprintf("%s%d.%d", prefix, w.rec.now()/int64(keyEpoch), w.rng.IntN(typeKeysPerEpoch))
}

// dataTypes is the data-type client loop: one op at a time on a counter, a sorted set or a
// list, on the worker's node, moving to another node on any failure. Every read goes through
// the leader (no READONLY): it must see every write acknowledged before it was sent.
func (w *worker) dataTypes() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for n := 0; !w.stop.Load(); n++ {
		models := []string{Counter, ZSet, List}
		m := models[w.rng.IntN(len(models))]
		op := TypedOp{Model: m, Key: w.typedKey(m)}
		switch m {
		case Counter:
			w.counterOp(&op)
		case ZSet:
			w.zsetOp(&op)
		default:
			w.listOp(&op, n)
		}
		w.rec.typed(op)
		w.sleep(30*time.Millisecond, 120*time.Millisecond)
	}
}

func (w *worker) counterOp(op *TypedOp) {
	switch p := w.rng.Float64(); {
	case p < 0.2:
		op.Kind, op.Delta = Incr, 1
		w.typedCall(op, intReply, "INCR", op.Key)
	case p < 0.4:
		op.Kind, op.Delta = IncrBy, 1+w.rng.Int64N(5)
		w.typedCall(op, intReply, "INCRBY", op.Key, strconv.FormatInt(op.Delta, 10))
	case p < 0.55:
		op.Kind, op.Delta = DecrBy, -1-w.rng.Int64N(3)
		w.typedCall(op, intReply, "DECRBY", op.Key, strconv.FormatInt(-op.Delta, 10))
	case p < 0.75:
		op.Kind, op.Delta = SemTake, 1+w.rng.Int64N(2)
		w.typedCall(op, intReply, "EVAL", semTakeScript, "1", op.Key, strconv.FormatInt(op.Delta, 10))
	default:
		op.Kind = Get
		w.typedCall(op, intOrNil, "GET", op.Key)
	}
}

func (w *worker) zsetOp(op *TypedOp) {
	now := w.rec.now() / int64(time.Millisecond)
	op.Member = w.rng.IntN(zMembers)
	m := zMember(op.Member)
	switch p := w.rng.Float64(); {
	case p < 0.25:
		op.Kind, op.Score = ZAdd, now+1
		w.typedCall(op, intReply, "ZADD", op.Key, strconv.FormatInt(op.Score, 10), m)
	case p < 0.4:
		op.Kind = ZRem
		w.typedCall(op, intReply, "ZREM", op.Key, m)
	case p < 0.5:
		op.Kind, op.Cutoff = ZRemBelow, now+1-200-w.rng.Int64N(1300)
		w.typedCall(op, intReply, "ZREMRANGEBYSCORE", op.Key, "-inf", strconv.FormatInt(op.Cutoff, 10))
	case p < 0.7:
		op.Kind, op.Score, op.Cutoff = ZSemAcquire, now+1, now+1-200-w.rng.Int64N(1300)
		w.typedCall(op, intReply, "EVAL", zsetAcquireScript, "1", op.Key,
			strconv.Itoa(zLimit), m, strconv.FormatInt(op.Score, 10), strconv.FormatInt(op.Cutoff, 10))
	case p < 0.85:
		op.Kind = ZCard
		w.typedCall(op, intReply, "ZCARD", op.Key)
	default:
		op.Kind = ZScore
		w.typedCall(op, intOrNil, "ZSCORE", op.Key, m)
	}
}

// listOp pushes a little less often than it pops, so the lists (and the model's state) stay
// short.
func (w *worker) listOp(op *TypedOp, n int) {
	switch p := w.rng.Float64(); {
	case p < 0.35:
		op.Kind, op.Value = LPush, fmt.Sprintf("c%d.%d", w.id, n)
		w.typedCall(op, intReply, "LPUSH", op.Key, op.Value)
	case p < 0.75:
		op.Kind = RPop
		w.typedCall(op, elemOrNil, "RPOP", op.Key)
	default:
		op.Kind = LLen
		w.typedCall(op, intReply, "LLEN", op.Key)
	}
}

// typedCall runs one command against the current node, fills op's timing and outcome, and its
// reply through parse; a reply parse does not take makes the outcome unknown.
func (w *worker) typedCall(op *TypedOp, parse func(*TypedOp, any) bool, args ...string) {
	c := w.conn()
	op.Client, op.Node = w.id, c.addr
	op.Invoke = w.rec.now()
	v, err := c.do(opTimeout, args...)
	op.Complete = w.rec.now()
	if op.Outcome, op.Err = outcomeOf(err); op.Outcome != OK {
		w.failover()
		return
	}
	if !parse(op, v) {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %#v", v)
	}
}

func intReply(op *TypedOp, v any) bool {
	n, ok := v.(int64)
	op.Reply = n
	return ok
}

// intOrNil reads GET's and ZSCORE's reply: an integer as a string, or nil.
func intOrNil(op *TypedOp, v any) bool {
	if v == nil {
		op.Nil = true
		return true
	}
	s, ok := v.(string)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	op.Reply = n
	return err == nil
}

func elemOrNil(op *TypedOp, v any) bool {
	if v == nil {
		op.Nil = true
		return true
	}
	s, ok := v.(string)
	op.Elem = s
	return ok && s != ""
}
