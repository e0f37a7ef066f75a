package chaos

// The lock kinds beside the plain lock (docs/locks.md), under the same faults: shares (LOCK ...
// SHARED) and plain locks on the same keys, MLOCK over two or three of those keys, semaphore
// permits (SEMACQUIRE, always with the same count, so a count never clashes), and lock-delays
// (DELAY) on leases short enough that many expire. Each client takes more while it holds fewer
// than maxKindsHeld, under owners unique per attempt, and renews, releases (UNLOCK, SEMRELEASE), forgets
// (its lease then expires, starting its lock-delay), validates (VALIDATE) and reads (LOCKINFO)
// them, on whatever node it happens to be talking to. Keys rotate every keyEpoch like the other
// workloads', so each key's history, which kindsModel checks, stays short.

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Acquires of the lock kinds (Op.Via).
const (
	ViaShared = "shared" // LOCK key ttl SHARED
	ViaSem    = "sem"    // SEMACQUIRE key permits ttl (a release via SEMRELEASE)
	ViaMLock  = "mlock"  // one key's part of MLOCK ttl key...
)

// What LOCKINFO says a key holds (Op.RdKind), in its own words; a free key is Op.Free.
const (
	KindLock      = "lock" // a plain lock, granted by LOCK or MLOCK
	KindShared    = "shared"
	KindSemaphore = "semaphore"
	KindDelay     = "delay"
)

// Workload shape: kindsKeysPerEpoch keys where shares, plain locks and MLOCKs contend, and one
// semaphore of semPermits per epoch. Leases of 300 ms to 1 s, half of them with a lock-delay
// of kindsDelayMs: a client that forgets a holding sees its lease expire within a second.
const (
	kindsKeysPerEpoch = 3
	semPermits        = 2
	kindsDelayMs      = 300
	maxKindsHeld      = 3
)

// kindHold is a share, permit or plain lock a kinds client believes it holds.
type kindHold struct {
	key, owner, via string
	token           uint64
	validUntil      int64 // by the client's own reckoning: from its last acknowledged grant or renewal
}

// rwKey is the i-th shared/plain key of the epoch the run is in at now. An epoch's keys share a
// hash tag, so that an MLOCK over them is served by one raft group when the nodes run several
// (docs/groups.md: keys of one request share a slot).
func rwKey(now int64, i int) string { return fmt.Sprintf("rw{%d}.%d", now/int64(keyEpoch), i) }

// semKey is the epoch's semaphore.
func semKey(now int64) string { return fmt.Sprintf("sem%d", now/int64(keyEpoch)) }

// kinds is the lock kinds' client loop. A fifth of its requests go to a node picked at random
// (often a follower, which forwards writes to the leader); the rest stay on its node until a
// failure moves it.
func (w *worker) kinds() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	var held []kindHold
	var past []kindHold // released, refused a renewal, or let go: VALIDATE asks about them too
	for !w.stop.Load() {
		now := w.rec.now()
		held = slices.DeleteFunc(held, func(h kindHold) bool {
			if h.validUntil < now {
				past = append(past, h)
				return true
			}
			return false
		})
		if len(past) > 8 {
			past = past[len(past)-8:]
		}
		if w.rng.Float64() < 0.2 {
			w.node = w.rng.IntN(len(w.addrs))
		}
		i := w.rng.IntN(max(len(held), 1))
		switch p := w.rng.Float64(); {
		case p < 0.4 && len(held) < maxKindsHeld:
			held = append(held, w.kindsAcquire(now)...)
		case p < 0.55 && len(held) > 0:
			h := &held[i]
			ttl := int64(300 + w.rng.IntN(701))
			rn := w.kindsRenew(h.key, h.owner, h.token, ttl)
			switch {
			case rn.Outcome == OK && rn.Success:
				h.validUntil = rn.Invoke + ttl*int64(time.Millisecond)
			case rn.Outcome == OK || rn.Outcome == Fail:
				past = append(past, *h)
				held = slices.Delete(held, i, i+1)
			}
		case p < 0.75 && len(held) > 0:
			h := held[i]
			w.kindsRelease(h)
			past = append(past, h)
			held = slices.Delete(held, i, i+1)
		case p < 0.8 && len(held) > 0:
			// forgotten: its lease runs out, and its lock-delay, if any, starts then
			past = append(past, held[i])
			held = slices.Delete(held, i, i+1)
		case p < 0.9 && len(held)+len(past) > 0:
			all := append(slices.Clip(held), past...)
			h := all[w.rng.IntN(len(all))]
			w.kindsValidate(h.key, h.token)
		default:
			key := semKey(now)
			if w.rng.IntN(3) > 0 {
				key = rwKey(now, w.rng.IntN(kindsKeysPerEpoch))
			}
			w.kindsRead(key)
		}
		w.sleep(10*time.Millisecond, 60*time.Millisecond)
	}
}

// kindsAcquire takes a share, a plain lock, an MLOCK of two or three keys, or a permit, and
// returns what it was granted.
func (w *worker) kindsAcquire(now int64) []kindHold {
	ttl := int64(300 + w.rng.IntN(701))
	var delay int64
	if w.rng.IntN(2) == 0 {
		delay = kindsDelayMs
	}
	base := Op{Kind: Acquire, TTL: ttl, DelayMs: delay, Owner: w.newOwner()}
	opts := []string{"OWNER", base.Owner}
	if delay > 0 {
		opts = append(opts, "DELAY", strconv.FormatInt(delay, 10))
	}
	ttlArg := strconv.FormatInt(ttl, 10)
	var ops []Op
	switch p := w.rng.Float64(); {
	case p < 0.3:
		op := base
		op.Via, op.Key = ViaShared, rwKey(now, w.rng.IntN(kindsKeysPerEpoch))
		w.tokenCall(&op, append([]string{"LOCK", op.Key, ttlArg, "SHARED"}, opts...))
		ops = []Op{op}
	case p < 0.5:
		op := base
		op.Via, op.Key = "lock", rwKey(now, w.rng.IntN(kindsKeysPerEpoch))
		w.tokenCall(&op, append([]string{"LOCK", op.Key, ttlArg}, opts...))
		ops = []Op{op}
	case p < 0.65:
		ops = w.mlock(base, now, ttlArg, opts)
	default:
		op := base
		op.Via, op.Key, op.Permits = ViaSem, semKey(now), semPermits
		w.tokenCall(&op, append([]string{"SEMACQUIRE", op.Key, strconv.Itoa(semPermits), ttlArg}, opts...))
		ops = []Op{op}
	}
	var got []kindHold
	for _, op := range ops {
		w.rec.kind(op)
		if op.Outcome == OK && op.Granted {
			got = append(got, kindHold{key: op.Key, owner: op.Owner, via: op.Via, token: op.Token,
				validUntil: op.Invoke + ttl*int64(time.Millisecond)})
		}
	}
	return got
}

// tokenCall runs an acquire whose reply is a token or nil.
func (w *worker) tokenCall(op *Op, args []string) {
	v := w.call(op, args...)
	if op.Outcome != OK || v == nil {
		return
	}
	if n, ok := asInt(v); ok && n > 0 {
		op.Granted, op.Token = true, uint64(n)
		return
	}
	unexpected(op, v)
}

// mlock takes two or three of the epoch's keys, in a random order, with one MLOCK, and returns
// one op per key: the same outcome, each with its own token.
func (w *worker) mlock(base Op, now int64, ttlArg string, opts []string) []Op {
	idx := w.rng.Perm(kindsKeysPerEpoch)[:2+w.rng.IntN(kindsKeysPerEpoch-1)]
	keys := make([]string, len(idx))
	for i, k := range idx {
		keys[i] = rwKey(now, k)
	}
	base.Via, base.Keys, base.Key = ViaMLock, keys, keys[0]
	args := append(append([]string{"MLOCK", ttlArg}, keys...), opts...)
	v := w.call(&base, args...)
	ops := perKey(base)
	grantEach(ops, v)
	return ops
}

// perKey is an MLOCK's op as one op per key: the same request, each its own Key.
func perKey(base Op) []Op {
	ops := make([]Op, len(base.Keys))
	for i, k := range base.Keys {
		ops[i] = base
		ops[i].Key = k
	}
	return ops
}

// grantEach reads an MLOCK's reply into its per-key ops: nil (refused, or its WAIT passed), or
// one token per key in the order of its keys; anything else makes every op's outcome unknown.
func grantEach(ops []Op, v any) {
	if ops[0].Outcome != OK || v == nil {
		return
	}
	a, ok := v.([]any)
	if !ok || len(a) != len(ops) {
		for i := range ops {
			unexpected(&ops[i], v)
		}
		return
	}
	for i := range ops {
		n, ok := asInt(a[i])
		if !ok || n <= 0 {
			for j := range ops {
				unexpected(&ops[j], v)
			}
			return
		}
		ops[i].Granted, ops[i].Token = true, uint64(n)
	}
}

func (w *worker) kindsRenew(key, owner string, token uint64, ttl int64) Op {
	op := Op{Kind: Renew, Key: key, TTL: ttl, Owner: owner, Token: token}
	v := w.call(&op, "RENEW", key, strconv.FormatUint(token, 10), strconv.FormatInt(ttl, 10))
	boolReply(&op, v)
	w.rec.kind(op)
	return op
}

// kindsRelease gives a permit back with SEMRELEASE, anything else with UNLOCK.
func (w *worker) kindsRelease(h kindHold) Op {
	op := Op{Kind: Release, Key: h.key, Owner: h.owner, Token: h.token}
	cmd := "UNLOCK"
	if h.via == ViaSem {
		op.Via, cmd = ViaSem, "SEMRELEASE"
	}
	v := w.call(&op, cmd, h.key, strconv.FormatUint(h.token, 10))
	boolReply(&op, v)
	w.rec.kind(op)
	return op
}

func (w *worker) kindsValidate(key string, token uint64) Op {
	op := Op{Kind: Validate, Key: key, Token: token}
	v := w.call(&op, "VALIDATE", key, strconv.FormatUint(token, 10))
	boolReply(&op, v)
	w.rec.kind(op)
	return op
}

func (w *worker) kindsRead(key string) Op {
	op := Op{Kind: Read, Key: key}
	v := w.call(&op, "LOCKINFO", key)
	if op.Outcome == OK {
		if err := parseKindsInfo(&op, v); err != nil {
			unexpected(&op, v)
		}
	}
	w.rec.kind(op)
	return op
}

// parseKindsInfo reads LOCKINFO's RESP2 reply on a key of any kind: nil; a plain lock's
// [owner o token t pttl p]; a shared lock's or a semaphore's [kind k (permits n) holders
// [[owner o token t pttl p] ...]]; a lock-delay's [kind delay token t pttl p].
func parseKindsInfo(op *Op, v any) error {
	if v == nil {
		op.Free = true
		return nil
	}
	f, err := fields(v)
	if err != nil {
		return err
	}
	switch kind, _ := f["kind"].(string); kind {
	case "":
		h, err := holderOf(f)
		if err != nil {
			return err
		}
		op.RdKind, op.RdOwner, op.RdToken, op.RdPTTL = KindLock, h.Owner, h.Token, h.PTTL
	case KindDelay:
		t, ok1 := asInt(f["token"])
		p, ok2 := asInt(f["pttl"])
		if !ok1 || !ok2 {
			return fmt.Errorf("delay fields")
		}
		op.RdKind, op.RdToken, op.RdPTTL = KindDelay, uint64(t), p
	case KindShared, KindSemaphore:
		op.RdKind = kind
		if kind == KindSemaphore {
			n, ok := asInt(f["permits"])
			if !ok {
				return fmt.Errorf("permits")
			}
			op.RdPermits = n
		}
		hs, ok := f["holders"].([]any)
		if !ok || len(hs) == 0 {
			return fmt.Errorf("holders")
		}
		for _, x := range hs {
			hf, err := fields(x)
			if err != nil {
				return err
			}
			h, err := holderOf(hf)
			if err != nil {
				return err
			}
			op.RdHolders = append(op.RdHolders, h)
		}
	default:
		return fmt.Errorf("kind %q", kind)
	}
	return nil
}

// fields reads a RESP2 flat map: names and values alternating.
func fields(v any) (map[string]any, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("not a flat map")
	}
	f := make(map[string]any, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		name, ok := a[i].(string)
		if !ok {
			return nil, fmt.Errorf("field name %#v", a[i])
		}
		f[name] = a[i+1]
	}
	return f, nil
}

// holderOf reads one holder's {owner, token, pttl}.
func holderOf(f map[string]any) (Holder, error) {
	o, ok1 := f["owner"].(string)
	t, ok2 := asInt(f["token"])
	p, ok3 := asInt(f["pttl"])
	if !ok1 || !ok2 || !ok3 || t <= 0 {
		return Holder{}, fmt.Errorf("holder fields")
	}
	return Holder{Owner: o, Token: uint64(t), PTTL: p}, nil
}
