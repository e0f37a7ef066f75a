package chaos

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"
)

const opTimeout = 4 * time.Second

// worker is one client of the workload: it acquires, renews (some deliberately late), writes to
// the fenced resource, releases and reads, talking to one node at a time.
type worker struct {
	id      int
	rng     *rand.Rand
	rec     *recorder
	addrs   func() []string // client addresses of the nodes, in node order
	node    int
	c       *client
	stop    *atomic.Bool
	keyOf   func(rng *rand.Rand) string
	attempt int
}

func (w *worker) sleep(lo, hi time.Duration) {
	time.Sleep(lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1)))
}

// call runs one command against the current node and fills op's outcome and timing. On any
// failure the worker moves to another node.
func (w *worker) call(op *Op, args ...string) any {
	addrs := w.addrs()
	addr := addrs[w.node%len(addrs)]
	if w.c == nil || w.c.addr != addr {
		if w.c != nil {
			w.c.close()
		}
		w.c = &client{addr: addr}
	}
	op.Client, op.Node = w.id, addr
	op.Invoke = w.rec.now()
	v, err := w.c.do(opTimeout, args...)
	op.Complete = w.rec.now()
	switch {
	case err == nil:
		op.Outcome = OK
	case certainFailure(err):
		op.Outcome = Fail
		op.Err = err.Error()
	default:
		op.Outcome = Unknown
		op.Err = err.Error()
	}
	if op.Outcome != OK {
		w.c.close()
		w.node = (w.node + 1 + w.rng.IntN(len(addrs))) % len(addrs)
	}
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

func (w *worker) acquire(key string, ttl int64) Op {
	w.attempt++
	op := Op{Kind: Acquire, Key: key, TTL: ttl, Owner: fmt.Sprintf("c%d-%d", w.id, w.attempt)}
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

func (w *worker) renew(key, owner string, token uint64, ttl int64) Op {
	op := Op{Kind: Renew, Key: key, TTL: ttl, Owner: owner, Token: token}
	v := w.call(&op, "RENEW", key, strconv.FormatUint(token, 10), strconv.FormatInt(ttl, 10))
	w.boolReply(&op, v)
	w.rec.add(op)
	return op
}

func (w *worker) release(key, owner string, token uint64) Op {
	op := Op{Kind: Release, Key: key, Owner: owner, Token: token}
	v := w.call(&op, "UNLOCK", key, strconv.FormatUint(token, 10))
	w.boolReply(&op, v)
	w.rec.add(op)
	return op
}

func (w *worker) boolReply(op *Op, v any) {
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

func (w *worker) run() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for !w.stop.Load() {
		key := w.keyOf(w.rng)
		if w.rng.Float64() < 0.3 {
			w.read(key)
			w.sleep(20*time.Millisecond, 100*time.Millisecond)
			continue
		}
		ttl := int64(1000 + w.rng.IntN(1001))
		g := w.acquire(key, ttl)
		if g.Outcome != OK || !g.Granted {
			w.sleep(50*time.Millisecond, 150*time.Millisecond)
			continue
		}
		validUntil := g.Invoke + ttl*int64(time.Millisecond)
		held := true
		for r := 1 + w.rng.IntN(3); r > 0 && held && !w.stop.Load(); r-- {
			if w.rec.now() < validUntil {
				w.rec.write(w.id, key, g.Token, validUntil)
			}
			if w.rng.Float64() < 0.15 { // deliberately late: the lease may be gone
				w.sleep(time.Duration(ttl)*time.Millisecond, time.Duration(ttl+500)*time.Millisecond)
			} else {
				w.sleep(100*time.Millisecond, time.Duration(ttl/2)*time.Millisecond)
			}
			rn := w.renew(key, g.Owner, g.Token, ttl)
			if rn.Outcome == OK && rn.Success {
				validUntil = rn.Invoke + ttl*int64(time.Millisecond)
			} else {
				held = false
			}
		}
		if held && w.rng.Float64() < 0.75 {
			if w.rec.now() < validUntil {
				w.rec.write(w.id, key, g.Token, validUntil)
			}
			w.release(key, g.Owner, g.Token)
		}
		if w.rng.Float64() < 0.3 {
			w.read(key)
		}
	}
}
