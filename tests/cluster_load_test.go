package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// Cluster load parameters. Leases are the durability test's: none ends during a test, and an
// acknowledged renew shows as PTTL > durLockTTL, so keyProblems judges both tests' histories.
const (
	loadMaxOpsWorker = 4000             // per worker, whatever the time
	loadMaxDuration  = 60 * time.Second // a safety bound; tests stop their load long before
	loadBackoff      = 20 * time.Millisecond
)

// clusterLoad is a set of workers that LOCK, RENEW and UNLOCK keys of their own through nodes
// picked at random, and record what each operation's client was told. Each key belongs to one
// worker (one owner), so the worker's record is the key's whole history.
type clusterLoad struct {
	t        *testing.T
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	maxAcked atomic.Int64 // the highest token acknowledged to any worker
	acked    atomic.Int64 // operations acknowledged
	failed   atomic.Int64 // operations that got an error (of any kind)
	workers  []*loadWorker
}

// loadWorker is one client of the load: one go-redis client per node address, one owner.
type loadWorker struct {
	id      int
	owner   string
	keys    []string
	clients []*redis.Client
	rng     *rand.Rand
	ops     map[string][]durOp
	state   map[string]keyState
	grants  []grantRec
}

// keyState is what a worker knows about one of its keys.
type keyState struct {
	known bool  // the state below is certain (false after an operation of unknown outcome)
	held  bool  // known: held by this worker
	token int64 // held: its token; not known: the token it may still be held with (0: none)
	floor int64 // not known: a grant of unknown outcome may have given a token above this (-1: none)
}

// grantRec is one acknowledged LOCK: when it was sent and answered, and the token it was told.
type grantRec struct {
	sent     time.Time
	acked    time.Time
	token    int64
	newGrant bool // a new holder (not the same owner locking again)
}

// startLoad starts workers clients, each on keysEach keys of its own named after prefix, sending
// each operation to one of addrs at random. Each client speaks RESP2 or RESP3 in turn.
func startLoad(t *testing.T, prefix string, workers, keysEach int, addrs []string) *clusterLoad {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("load %s: seed %d, %d workers on %v", prefix, seed, workers, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), loadMaxDuration)
	l := &clusterLoad{t: t, cancel: cancel}
	for w := range workers {
		lw := &loadWorker{
			id:    w,
			owner: fmt.Sprintf("%s-owner-%d", prefix, w),
			rng:   rand.New(rand.NewPCG(uint64(seed), uint64(w))),
			ops:   map[string][]durOp{},
			state: map[string]keyState{},
		}
		for k := range keysEach {
			key := fmt.Sprintf("%s/w%d/k%d", prefix, w, k)
			lw.keys = append(lw.keys, key)
			lw.state[key] = keyState{known: true, floor: -1}
		}
		for _, a := range addrs {
			lw.clients = append(lw.clients, newClient(t, a, 2+w%2))
		}
		l.workers = append(l.workers, lw)
	}
	for _, lw := range l.workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(ctx, lw)
		}()
	}
	t.Cleanup(l.stop)
	return l
}

// waitProgress waits until n more operations have been acknowledged.
func (l *clusterLoad) waitProgress(n int64, timeout time.Duration) {
	l.t.Helper()
	target := l.acked.Load() + n
	testutil.WaitFor(l.t, timeout, func() error {
		if got := l.acked.Load(); got < target {
			return fmt.Errorf("load: %d operations acknowledged, waiting for %d (%d errors)", got, target, l.failed.Load())
		}
		return nil
	})
}

// stop stops the workers and waits for them. It is idempotent.
func (l *clusterLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// run is one worker's loop: an operation at a time until ctx ends or loadMaxOpsWorker.
func (l *clusterLoad) run(ctx context.Context, w *loadWorker) {
	for range loadMaxOpsWorker {
		if ctx.Err() != nil {
			return
		}
		key := w.keys[w.rng.IntN(len(w.keys))]
		st := w.state[key]
		kind := opLock
		if st.known && st.held {
			switch r := w.rng.IntN(10); {
			case r < 4:
				kind = opRenew
			case r < 8:
				kind = opUnlock
			}
		}
		o := durOp{kind: kind, token: st.token}
		rdb := w.clients[w.rng.IntN(len(w.clients))]
		var (
			res int64
			err error
		)
		sent := time.Now()
		switch kind {
		case opLock:
			o.before = l.maxAcked.Load()
			res, err = rdb.Do(ctx, "LOCK", key, durLockTTL, "OWNER", w.owner).Int64()
		case opRenew:
			res, err = rdb.Do(ctx, "RENEW", key, st.token, durRenewTTL).Int64()
		case opUnlock:
			res, err = rdb.Do(ctx, "UNLOCK", key, st.token).Int64()
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			l.failed.Add(1)
			o.out, o.errText = classify(ctx, err)
			if o.out == unknown {
				w.state[key] = st.afterUnknown(o)
				w.ops[key] = append(w.ops[key], o)
			}
			// A node is down or an election is on: give it a moment rather than spin.
			select {
			case <-ctx.Done():
			case <-time.After(loadBackoff):
			}
			continue
		}
		if errors.Is(err, redis.Nil) || kind != opLock && res != 1 {
			// The server says it did nothing; but nobody else touches this key, and no lease
			// ends during the test: it should have.
			l.t.Errorf("worker %d: %s %s (state %+v): refused (%d, %v)", w.id, kind, key, st, res, err)
			continue
		}
		switch kind {
		case opLock:
			// After an operation of unknown outcome, the token may be a new grant's or that of
			// the grant of unknown outcome, sent earlier: checkGrant judges it, not the
			// after-the-fault check.
			newGrant := st.known && !st.held
			if prob := st.checkGrant(res, o.before); prob != "" {
				l.t.Errorf("worker %d: LOCK %s: token %d: %s\n  history: %v", w.id, key, res, prob, w.ops[key])
			}
			o.token = res
			w.state[key] = keyState{known: true, held: true, token: res, floor: -1}
			w.grants = append(w.grants, grantRec{sent: sent, acked: time.Now(), token: res, newGrant: newGrant})
			for cur := l.maxAcked.Load(); res > cur && !l.maxAcked.CompareAndSwap(cur, res); cur = l.maxAcked.Load() {
			}
		case opUnlock:
			w.state[key] = keyState{known: true, floor: -1}
		}
		o.out = acked
		w.ops[key] = append(w.ops[key], o)
		l.acked.Add(1)
	}
}

// checkGrant judges the token an acknowledged LOCK returned, given what the worker knew before
// sending it and the highest token acknowledged to anyone by then.
func (st keyState) checkGrant(token, before int64) string {
	switch {
	case st.known && st.held:
		if token != st.token {
			return fmt.Sprintf("the same owner locking again, want its token %d", st.token)
		}
	case st.known:
		if token <= before {
			return fmt.Sprintf("a new grant, want a token above %d (acknowledged before it was sent)", before)
		}
	default:
		floor := before
		if st.floor >= 0 {
			floor = min(floor, st.floor)
		}
		if token != st.token && token <= floor {
			return fmt.Sprintf("want the token it may still hold (%d) or one above %d", st.token, floor)
		}
	}
	return ""
}

// afterUnknown is the key's state after an operation whose outcome is unknown.
func (st keyState) afterUnknown(o durOp) keyState {
	switch {
	case o.kind == opRenew:
		return st // held either way, with the same token
	case o.kind == opLock && st.known && st.held:
		return st // the same owner again: held either way, with the same token
	case o.kind == opLock:
		floor := o.before
		if !st.known && st.floor >= 0 {
			floor = min(floor, st.floor)
		}
		return keyState{token: st.token, floor: floor}
	default: // UNLOCK: released, or still held with its token
		return keyState{token: st.token, floor: st.floor}
	}
}

// classify tells what an error reply means for an operation's outcome: a failed dial, or
// CLUSTERDOWN and TRYAGAIN (the server's word that nothing was proposed), mean it did not
// happen; anything else (UNCERTAIN, a broken connection, a timeout) means it may have.
func classify(ctx context.Context, err error) (outcome, string) {
	var re redis.Error
	switch {
	case ctx.Err() != nil:
		return unknown, err.Error()
	case isDialError(err):
		return notSent, err.Error()
	case errors.As(err, &re) && (strings.HasPrefix(re.Error(), "CLUSTERDOWN ") || strings.HasPrefix(re.Error(), "TRYAGAIN ")):
		return notSent, err.Error()
	}
	return unknown, err.Error()
}

// loadReport is what the workers did, once stopped.
type loadReport struct {
	history  map[string][]durOp
	owner    map[string]string
	grants   []grantRec
	maxAcked int64
	acked    int64
	failed   int64
	unknowns int
}

// report stops the load and gathers its records.
func (l *clusterLoad) report() loadReport {
	l.stop()
	r := loadReport{
		history: map[string][]durOp{}, owner: map[string]string{},
		maxAcked: l.maxAcked.Load(), acked: l.acked.Load(), failed: l.failed.Load(),
	}
	for _, w := range l.workers {
		for _, key := range w.keys {
			r.history[key] = w.ops[key]
			r.owner[key] = w.owner
			for _, o := range w.ops[key] {
				if o.out == unknown {
					r.unknowns++
				}
			}
		}
		r.grants = append(r.grants, w.grants...)
	}
	return r
}

// checkLoad checks, through the leader, every key of the load against its history (no
// acknowledged grant, release or renew lost), and that a fresh grant's token exceeds every
// token acknowledged before. It returns the fresh token.
func (c *cluster) checkLoad(r loadReport) int64 {
	c.t.Helper()
	l := c.leader()
	ctx := testContext(c.t, 30*time.Second)
	rdb := newClient(c.t, l.addr, 3)
	keys := make([]string, 0, len(r.history))
	for k := range r.history {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	maxSeen := r.maxAcked
	for _, key := range keys {
		st, held, err := lockInfo(ctx, rdb, key)
		if err != nil {
			c.t.Fatalf("LOCKINFO %s on the leader %s: %v", key, l.id, err)
		}
		if held {
			maxSeen = max(maxSeen, st.token)
		}
		for _, p := range keyProblems(r.owner[key], r.history[key], st, held) {
			c.t.Errorf("key %s: %s\n  history: %v", key, p, r.history[key])
		}
	}
	fresh := fmt.Sprintf("fresh/%d", time.Now().UnixNano())
	tok, err := rdb.Do(ctx, "LOCK", fresh, durLockTTL).Int64()
	if err != nil {
		c.t.Fatalf("LOCK %s: %v", fresh, err)
	}
	if tok <= maxSeen {
		c.t.Errorf("LOCK %s: token %d, want > %d (the highest token seen before)", fresh, tok, maxSeen)
	}
	if _, err := rdb.Do(ctx, "UNLOCK", fresh, tok).Int64(); err != nil {
		c.t.Errorf("UNLOCK %s: %v", fresh, err)
	}
	return tok
}

// checkGrantsAfter checks that every new grant sent after at got a token above every token
// acknowledged before at, and returns how many there were.
func (r loadReport) checkGrantsAfter(t *testing.T, at time.Time) int {
	t.Helper()
	var before int64
	for _, g := range r.grants {
		if g.acked.Before(at) {
			before = max(before, g.token)
		}
	}
	n := 0
	for _, g := range r.grants {
		if !g.newGrant || !g.sent.After(at) {
			continue
		}
		n++
		if g.token <= before {
			t.Errorf("a grant sent %v after the fault got token %d, not above %d (granted before it)",
				g.sent.Sub(at).Round(time.Millisecond), g.token, before)
		}
	}
	return n
}
