package tests

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability test parameters. Each key belongs to one worker, so the worker's own record of what
// it was told is the whole history of the key.
const (
	durRounds       = 4
	durWorkers      = 8
	durKeysEach     = 3
	durLockTTL      = 60000  // ms: no lease ends during the test
	durRenewTTL     = 120000 // ms: an acknowledged renew shows as PTTL > durLockTTL after restart
	durRoundBudget  = 6 * time.Second
	durKillDeadline = 4 * time.Second // kill by then even if the node is too slow to reach the target
	durMaxOpsWorker = 5000
	// The kill comes once the clients have been acknowledged a random number of operations in
	// [durMinOps, durMaxOps): a moment at random, and a log of bounded length to replay at restart
	// however fast the machine is.
	durMinOps = 200
	durMaxOps = 3000
)

type opKind int

const (
	opLock opKind = iota
	opRenew
	opUnlock
)

func (k opKind) String() string { return [...]string{"LOCK", "RENEW", "UNLOCK"}[k] }

// outcome is what a client learned about one operation.
type outcome int

const (
	acked   outcome = iota // the server said it happened (:token, :1)
	unknown                // the connection died or the server said UNCERTAIN: it may have happened
	notSent                // the dial failed: it certainly did not happen
)

// durOp is one operation on a key, as its client saw it.
type durOp struct {
	kind    opKind
	out     outcome
	token   int64  // LOCK: the token granted (acked); RENEW, UNLOCK: the token sent
	before  int64  // LOCK: the highest token acknowledged to anyone before this one was sent
	round   int    // the round it ran in
	errText string // for unknown outcomes
}

func (o durOp) String() string {
	s := fmt.Sprintf("r%d %s", o.round, o.kind)
	if o.token != 0 {
		s += fmt.Sprintf(" token=%d", o.token)
	}
	switch o.out {
	case acked:
		s += " acked"
	case unknown:
		s += " unknown (" + o.errText + ")"
	case notSent:
		s += " not sent"
	}
	return s
}

// TestKill9Durability kills a single node with SIGKILL at a random moment under a load of LOCK,
// RENEW and UNLOCK from 8 clients, restarts it on the same directory and checks that nothing
// acknowledged was lost (DESIGN.md §8.3): an acknowledged grant is held with its token unless a
// release may have followed; an acknowledged release stays released unless a grant may have
// followed; an acknowledged renew's lease is re-armed in full at restart; a new grant's token
// exceeds every token seen before. Four rounds in one test, so later rounds restart on a log
// that has been through earlier crashes.
func TestKill9Durability(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))

	n := startNode(t, t.TempDir())
	history := map[string][]durOp{} // every key of every round
	ownerOf := map[string]string{}
	var maxSeen int64 // the highest token any client has been shown

	for round := 1; round <= durRounds; round++ {
		killAt := durMinOps + rng.Int64N(durMaxOps-durMinOps)
		ops := runDurabilityRound(t, n, round, killAt, rng.Uint64())
		if t.Failed() {
			t.FailNow()
		}
		total, unknowns := 0, 0
		for key, list := range ops.byKey {
			history[key] = append(history[key], list...)
			ownerOf[key] = ops.owner[key]
			for _, o := range list {
				total++
				if o.out == unknown {
					unknowns++
				}
			}
		}
		maxSeen = max(maxSeen, ops.maxAcked)
		t.Logf("round %d: killed after %d acknowledged operations (%v); %d operations, %d with unknown outcome; highest token %d",
			round, killAt, ops.took.Round(time.Millisecond), total, unknowns, ops.maxAcked)

		restartAt := time.Now()
		n = n.restart(t)
		t.Logf("round %d: restarted and ready in %v", round, time.Since(restartAt).Round(time.Millisecond))
		ctx := testContext(t, 20*time.Second)
		rdb := newClient(t, n.addr, 3)
		keys := make([]string, 0, len(history))
		for k := range history {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		heldKeys := int64(0)
		for _, key := range keys {
			st, held, err := lockInfo(ctx, rdb, key)
			if err != nil {
				t.Fatalf("after restart %d: %v", round, err)
			}
			if held {
				heldKeys++
				maxSeen = max(maxSeen, st.token)
			}
			for _, p := range keyProblems(ownerOf[key], history[key], st, held) {
				t.Errorf("after restart %d, key %s: %s\n  history: %v", round, key, p, history[key])
			}
		}

		if got, err := rdb.DBSize(ctx).Result(); err != nil || got != heldKeys {
			t.Errorf("DBSIZE after restart %d: %d, %v; want %d (the keys LOCKINFO shows held)", round, got, err, heldKeys)
		}

		// A fresh grant after the restart outnumbers everything granted before it.
		fresh := fmt.Sprintf("fresh/r%d", round)
		tok, err := rdb.Do(ctx, "LOCK", fresh, durLockTTL, "OWNER", "fresh").Int64()
		if err != nil {
			t.Fatalf("LOCK %s after restart: %v", fresh, err)
		}
		if tok <= maxSeen {
			t.Errorf("LOCK %s after restart %d: token %d, want > %d (the highest token seen before)", fresh, round, tok, maxSeen)
		}
		maxSeen = max(maxSeen, tok)
		history[fresh] = []durOp{{kind: opLock, out: acked, token: tok, round: round}}
		ownerOf[fresh] = "fresh"
		if t.Failed() {
			t.FailNow()
		}
	}
}

// keyProblems checks one key's state after a restart against the operations its client saw,
// and describes what is wrong. It replays the operations into the set of states the key may be
// in: an acked LOCK leaves "held with that token", an acked UNLOCK leaves "absent", and an
// unknown one adds its effect as a possibility to what was possible before.
func keyProblems(owner string, ops []durOp, st lockState, held bool) []string {
	var (
		mayBeAbsent = true
		heldTokens  []int64 // the exact tokens it may be held with
		newAbove    []int64 // it may be held with a new token above each of these (unknown LOCKs)
	)
	for _, o := range ops {
		switch {
		case o.out == notSent || o.kind == opRenew:
		case o.kind == opLock && o.out == acked:
			mayBeAbsent, heldTokens, newAbove = false, []int64{o.token}, nil
		case o.kind == opLock: // unknown: granted or not; if it was held, the same owner renewed
			if mayBeAbsent {
				newAbove = append(newAbove, o.before)
			}
		case o.kind == opUnlock && o.out == acked:
			mayBeAbsent, heldTokens, newAbove = true, nil, nil
		case o.kind == opUnlock: // unknown
			mayBeAbsent = true
		}
	}
	var problems []string
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if !held {
		if !mayBeAbsent {
			fail("absent, but its grant (token %v) was acknowledged and no release may have followed", heldTokens)
		}
		return problems
	}
	if st.owner != owner {
		fail("held by %q, want %q", st.owner, owner)
	}
	ok := slices.Contains(heldTokens, st.token)
	for _, b := range newAbove {
		ok = ok || st.token > b
	}
	switch {
	case ok:
	case len(heldTokens) == 0 && len(newAbove) == 0:
		fail("held with token %d, but its release was acknowledged and no grant was attempted since", st.token)
	default:
		fail("held with token %d, want one of %v or a new token above one of %v", st.token, heldTokens, newAbove)
	}
	// The last operation that happened or may have happened was an acknowledged 120 s renew: the
	// restarted node arms the full lease again (late, never early), so more than 60 s remain.
	for _, o := range slices.Backward(ops) {
		if o.out == notSent {
			continue
		}
		if o.kind == opRenew && o.out == acked && st.pttl <= durLockTTL {
			fail("PTTL %d after an acknowledged RENEW to %d ms, want > %d", st.pttl, durRenewTTL, durLockTTL)
		}
		break
	}
	return problems
}

// roundOps is what one round's workers saw.
type roundOps struct {
	byKey    map[string][]durOp
	owner    map[string]string
	maxAcked int64
	took     time.Duration // from the workers' start to the kill
}

// runDurabilityRound runs the workers against n and kills n with SIGKILL once killAt operations
// have been acknowledged. It returns once every worker has stopped (each stops at its first
// error, at the round's budget or after durMaxOpsWorker operations).
func runDurabilityRound(t *testing.T, n *node, round int, killAt int64, seed uint64) roundOps {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), durRoundBudget)
	defer cancel()
	var (
		maxAcked atomic.Int64
		progress = &killSwitch{at: killAt, reached: make(chan struct{})}
		wg       sync.WaitGroup
		results  = make([]map[string][]durOp, durWorkers)
		owners   = make([]string, durWorkers)
	)
	clients := make([]*redis.Client, durWorkers)
	for w := range clients {
		clients[w] = newClient(t, n.addr, 2+w%2)
		if err := clients[w].Ping(ctx).Err(); err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
		owners[w] = fmt.Sprintf("owner-r%d-w%d", round, w)
	}
	start := time.Now()
	for w, rdb := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[w] = durabilityWorker(ctx, t, rdb, round, w, owners[w], &maxAcked, progress, rand.New(rand.NewPCG(seed, uint64(w))))
		}()
	}
	timer := time.NewTimer(durKillDeadline)
	defer timer.Stop()
	select {
	case <-progress.reached:
	case <-timer.C:
		t.Logf("round %d: only %d operations acknowledged after %v; killing now", round, progress.n.Load(), durKillDeadline)
	}
	n.kill9()
	took := time.Since(start)
	wg.Wait()
	out := roundOps{byKey: map[string][]durOp{}, owner: map[string]string{}, maxAcked: maxAcked.Load(), took: took}
	for w, m := range results {
		for k, ops := range m {
			out.byKey[k] = ops
			out.owner[k] = owners[w]
		}
	}
	return out
}

// durabilityWorker runs operations on its own keys until its first error (the node died: that
// operation's outcome is unknown), the round's budget, or durMaxOpsWorker operations.
func durabilityWorker(ctx context.Context, t *testing.T, rdb *redis.Client, round, w int, owner string,
	maxAcked *atomic.Int64, progress *killSwitch, rng *rand.Rand) map[string][]durOp {
	ops := map[string][]durOp{}
	held := map[string]int64{} // key -> token, for the keys this worker holds
	keys := make([]string, durKeysEach)
	for i := range keys {
		keys[i] = fmt.Sprintf("dur/r%d/w%d/k%d", round, w, i)
	}
	record := func(key string, o durOp) { ops[key] = append(ops[key], o) }
	for range durMaxOpsWorker {
		if ctx.Err() != nil {
			return ops
		}
		key := keys[rng.IntN(len(keys))]
		tok, isHeld := held[key]
		kind := opLock
		if isHeld {
			switch r := rng.IntN(10); {
			case r < 4:
				kind = opRenew
			case r < 8:
				kind = opUnlock
			}
		}
		o := durOp{kind: kind, round: round, token: tok}
		var (
			res int64
			err error
		)
		switch kind {
		case opLock:
			o.before = maxAcked.Load()
			res, err = rdb.Do(ctx, "LOCK", key, durLockTTL, "OWNER", owner).Int64()
		case opRenew:
			res, err = rdb.Do(ctx, "RENEW", key, tok, durRenewTTL).Int64()
		case opUnlock:
			res, err = rdb.Do(ctx, "UNLOCK", key, tok).Int64()
		}
		if err != nil {
			switch {
			case ctx.Err() != nil:
				// The budget ran out mid-request: the request may or may not have been applied.
				o.out, o.errText = unknown, err.Error()
			case errors.Is(err, redis.Nil):
				t.Errorf("worker %d: %s %s: nil, but nobody else uses this key", w, kind, key)
				return ops
			case isDialError(err):
				o.out = notSent
			default:
				o.out, o.errText = unknown, err.Error()
			}
			record(key, o)
			return ops
		}
		switch kind {
		case opLock:
			if isHeld && res != tok {
				t.Errorf("worker %d: LOCK %s again with the same owner: token %d, want %d", w, key, res, tok)
			}
			if !isHeld && res <= o.before {
				t.Errorf("worker %d: LOCK %s: token %d, want > %d (acknowledged to someone before it was sent)", w, key, res, o.before)
			}
			o.token = res
			held[key] = res
			for cur := maxAcked.Load(); res > cur && !maxAcked.CompareAndSwap(cur, res); cur = maxAcked.Load() {
			}
		case opRenew, opUnlock:
			if res != 1 {
				t.Errorf("worker %d: %s %s %d: %d, want 1 (the worker holds it)", w, kind, key, tok, res)
				return ops
			}
			if kind == opUnlock {
				delete(held, key)
			}
		}
		o.out = acked
		record(key, o)
		progress.ack()
	}
	return ops
}

// killSwitch closes reached when the at-th operation is acknowledged.
type killSwitch struct {
	at      int64
	n       atomic.Int64
	reached chan struct{}
}

func (k *killSwitch) ack() {
	if k.n.Add(1) == k.at {
		close(k.reached)
	}
}

// isDialError reports whether err is a failure to connect: the request was never sent.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// TestKeyProblems checks the durability test's own judge on made-up histories.
func TestKeyProblems(t *testing.T) {
	lock := func(out outcome, token, before int64) durOp {
		return durOp{kind: opLock, out: out, token: token, before: before}
	}
	renew := func(out outcome) durOp { return durOp{kind: opRenew, out: out} }
	unlock := func(out outcome) durOp { return durOp{kind: opUnlock, out: out} }
	heldBy := func(token, pttl int64) lockState { return lockState{owner: "o", token: token, pttl: pttl} }
	tests := []struct {
		name string
		ops  []durOp
		st   lockState
		held bool
		bad  bool
	}{
		{"acked grant held", []durOp{lock(acked, 5, 0)}, heldBy(5, 60000), true, false},
		{"acked grant lost", []durOp{lock(acked, 5, 0)}, lockState{}, false, true},
		{"acked grant, other token", []durOp{lock(acked, 5, 0)}, heldBy(6, 60000), true, true},
		{"acked grant, other owner", []durOp{lock(acked, 5, 0)}, lockState{owner: "x", token: 5, pttl: 1}, true, true},
		{"acked grant then unknown release: held", []durOp{lock(acked, 5, 0), unlock(unknown)}, heldBy(5, 60000), true, false},
		{"acked grant then unknown release: absent", []durOp{lock(acked, 5, 0), unlock(unknown)}, lockState{}, false, false},
		{"acked grant then unsent release: absent", []durOp{lock(acked, 5, 0), unlock(notSent)}, lockState{}, false, true},
		{"acked release: absent", []durOp{lock(acked, 5, 0), unlock(acked)}, lockState{}, false, false},
		{"acked release resurrected", []durOp{lock(acked, 5, 0), unlock(acked)}, heldBy(5, 60000), true, true},
		{"acked release then unknown grant: new token", []durOp{lock(acked, 5, 0), unlock(acked), lock(unknown, 0, 9)}, heldBy(10, 60000), true, false},
		{"acked release then unknown grant: old token", []durOp{lock(acked, 5, 0), unlock(acked), lock(unknown, 0, 9)}, heldBy(5, 60000), true, true},
		{"acked release then unsent grant: held", []durOp{lock(acked, 5, 0), unlock(acked), lock(notSent, 0, 9)}, heldBy(10, 60000), true, true},
		{"acked renew: full lease", []durOp{lock(acked, 5, 0), renew(acked)}, heldBy(5, 119000), true, false},
		{"acked renew: short lease", []durOp{lock(acked, 5, 0), renew(acked)}, heldBy(5, 59000), true, true},
		{"acked renew then unknown renew", []durOp{lock(acked, 5, 0), renew(acked), renew(unknown)}, heldBy(5, 59000), true, false},
		{"acked renew then unsent release", []durOp{lock(acked, 5, 0), renew(acked), unlock(notSent)}, heldBy(5, 59000), true, true},
		{"regrant after renew", []durOp{lock(acked, 5, 0), renew(acked), lock(acked, 5, 0)}, heldBy(5, 59000), true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := keyProblems("o", tt.ops, tt.st, tt.held)
			if (len(got) > 0) != tt.bad {
				t.Errorf("keyProblems = %q, want problems: %v", got, tt.bad)
			}
		})
	}
}
