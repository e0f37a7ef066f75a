package tests

import (
	"cmp"
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

// Rolling load parameters. No lease ends during a test: a lock ends only by its holder's UNLOCK,
// which is what lets the checks below tell a lock granted twice from one that expired.
const (
	rollWorkers      = 6 // two per node of a 3-node cluster
	rollOwnKeys      = 3 // keys of each worker's own: nobody else touches them
	rollSharedKeys   = 4 // keys every worker competes for
	rollLease        = 600000
	rollMaxOpsWorker = 20000
	rollMaxDuration  = 120 * time.Second // a safety bound; the tests stop their load long before
	rollPause        = 2 * time.Millisecond
	rollBackoff      = 50 * time.Millisecond
)

// rollLoad is a lock workload of rollWorkers clients, each connected to one node (worker i to
// node i mod len(addrs), so followers forward), each with its own owner, taking and releasing
// locks with fencing tokens on keys of its own and on keys shared by all. Every operation is
// recorded with what its client was told and the phase it was sent in.
type rollLoad struct {
	t        *testing.T
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	maxAcked atomic.Int64 // the highest token acknowledged to any worker
	phase    atomic.Int32 // index into phases of the phase operations are sent in now
	phases   []string     // written only before phase moves on, read after the workers stop
	workers  []*rollWorker
	shared   []string
}

// rollWorker is one client: one node, one owner.
type rollWorker struct {
	id       int
	owner    string
	addr     string
	keys     []string // its own keys, then the shared ones
	rdb      *redis.Client
	rng      *rand.Rand
	acked    atomic.Int64 // operations answered (grants, refusals, releases, renewals)
	ops      []rollOp
	state    map[string]keyState
	problems []rollProblem // what the worker saw go wrong while it ran
}

// rollOp is one operation as its client saw it.
type rollOp struct {
	key     string
	kind    opKind
	out     outcome
	refused bool  // a LOCK answered nil: held by someone else
	token   int64 // LOCK: the token granted (acked); RENEW, UNLOCK: the token sent
	before  int64 // LOCK: the highest token acknowledged to anyone before it was sent
	newHold bool  // LOCK acked: the worker did not hold the key before (not the same owner again)
	sent    time.Time
	done    time.Time
	phase   int
	errText string // unknown, notSent: the error
}

// rollProblem is a broken invariant: a lost acknowledged operation or a lock granted twice.
type rollProblem struct {
	phase int
	lost  bool // else: a duplicate grant
	text  string
}

// startRollLoad starts the workers on addrs under the first phase's name.
func startRollLoad(t *testing.T, prefix string, addrs []string, firstPhase string) *rollLoad {
	t.Helper()
	seed := time.Now().UnixNano()
	t.Logf("rolling load %s: seed %d, %d workers over %v", prefix, seed, rollWorkers, addrs)
	ctx, cancel := context.WithTimeout(context.Background(), rollMaxDuration)
	l := &rollLoad{t: t, cancel: cancel, phases: []string{firstPhase}}
	for k := range rollSharedKeys {
		l.shared = append(l.shared, fmt.Sprintf("%s/shared/k%d", prefix, k))
	}
	for w := range rollWorkers {
		rw := &rollWorker{
			id:    w,
			owner: fmt.Sprintf("%s-owner-%d", prefix, w),
			addr:  addrs[w%len(addrs)],
			rng:   rand.New(rand.NewPCG(uint64(seed), uint64(w))),
			state: map[string]keyState{},
		}
		for k := range rollOwnKeys {
			rw.keys = append(rw.keys, fmt.Sprintf("%s/w%d/k%d", prefix, w, k))
		}
		rw.keys = append(rw.keys, l.shared...)
		for _, k := range rw.keys {
			rw.state[k] = keyState{known: true, floor: -1}
		}
		rw.rdb = newClient(t, rw.addr, 2+w%2)
		l.workers = append(l.workers, rw)
	}
	for _, rw := range l.workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.run(ctx, rw)
		}()
	}
	t.Cleanup(l.stop)
	return l
}

// setPhase names the phase the operations sent from now on belong to.
func (l *rollLoad) setPhase(name string) {
	l.phases = append(l.phases, name)
	l.phase.Store(int32(len(l.phases) - 1))
}

// stop stops the workers and waits for them. It is idempotent.
func (l *rollLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// waitProgress waits until every worker connected to addr (all workers, for "") has had n more
// operations answered: the load runs, through that node.
func (l *rollLoad) waitProgress(addr string, n int64, timeout time.Duration) {
	l.t.Helper()
	target := map[*rollWorker]int64{}
	for _, w := range l.workers {
		if addr == "" || w.addr == addr {
			target[w] = w.acked.Load() + n
		}
	}
	testutil.WaitFor(l.t, timeout, func() error {
		for w, want := range target {
			if got := w.acked.Load(); got < want {
				return fmt.Errorf("worker %d (via %s): %d operations answered, waiting for %d", w.id, w.addr, got, want)
			}
		}
		return nil
	})
}

// run is one worker's loop: one operation at a time until ctx ends or rollMaxOpsWorker.
func (l *rollLoad) run(ctx context.Context, w *rollWorker) {
	own := func(key string) bool { return !slices.Contains(l.shared, key) }
	for range rollMaxOpsWorker {
		if ctx.Err() != nil {
			return
		}
		key := w.keys[w.rng.IntN(len(w.keys))]
		st := w.state[key]
		kind := opLock
		if st.known && st.held {
			switch r := w.rng.IntN(10); {
			case r < 3:
				kind = opRenew
			case r < 8:
				kind = opUnlock
			}
		}
		o := rollOp{key: key, kind: kind, token: st.token, sent: time.Now(), phase: int(l.phase.Load())}
		var (
			res int64
			err error
		)
		switch kind {
		case opLock:
			o.before = l.maxAcked.Load()
			res, err = w.rdb.Do(ctx, "LOCK", key, rollLease, "OWNER", w.owner).Int64()
		case opRenew:
			res, err = w.rdb.Do(ctx, "RENEW", key, st.token, rollLease).Int64()
		case opUnlock:
			res, err = w.rdb.Do(ctx, "UNLOCK", key, st.token).Int64()
		}
		o.done = time.Now()
		if err != nil && !errors.Is(err, redis.Nil) {
			// A node restarting, an election, a leader handing over: never acknowledged.
			o.out, o.errText = classify(ctx, err)
			if o.out == unknown {
				w.state[key] = st.afterUnknown(durOp{kind: kind, token: st.token, before: o.before})
			}
			w.ops = append(w.ops, o)
			select {
			case <-ctx.Done():
			case <-time.After(rollBackoff):
			}
			continue
		}
		o.out = acked
		w.acked.Add(1)
		switch {
		case kind == opLock && errors.Is(err, redis.Nil):
			// Held by someone else. Had this worker held it (after an operation of unknown
			// outcome), the same owner would have been given its token: it does not.
			o.refused = true
			if own(key) {
				w.problem(o.phase, false, "LOCK %s (its own key, state %+v) refused: someone else holds it", key, st)
			}
			w.state[key] = keyState{known: true, floor: -1}
		case kind == opLock:
			if prob := st.checkGrant(res, o.before); prob != "" {
				w.problem(o.phase, false, "LOCK %s: token %d: %s", key, res, prob)
			}
			o.token, o.newHold = res, !(st.known && st.held)
			w.state[key] = keyState{known: true, held: true, token: res, floor: -1}
			for cur := l.maxAcked.Load(); res > cur && !l.maxAcked.CompareAndSwap(cur, res); cur = l.maxAcked.Load() {
			}
		case res != 1:
			// The worker holds it, with a lease no test outlives: its acknowledged grant (or
			// renewal) was lost.
			w.problem(o.phase, true, "%s %s %d: %d, but the worker's grant of it was acknowledged", kind, key, st.token, res)
			w.state[key] = keyState{known: true, floor: -1}
		case kind == opUnlock:
			w.state[key] = keyState{known: true, floor: -1}
		}
		w.ops = append(w.ops, o)
		select {
		case <-ctx.Done():
		case <-time.After(rollPause):
		}
	}
}

func (w *rollWorker) problem(phase int, lost bool, format string, args ...any) {
	w.problems = append(w.problems, rollProblem{phase: phase, lost: lost, text: fmt.Sprintf("worker %d (%s): ", w.id, w.owner) + fmt.Sprintf(format, args...)})
}

// rollGrant is one token acknowledged to a client.
type rollGrant struct {
	key, owner string
	worker     *rollWorker
	token      int64
	acked      time.Time // the first acknowledgement of this token
	phase      int
}

// checkGrants checks the acknowledged grants of the whole run against each other: no token was
// handed out for two keys or to two owners, and a key was granted with a new token only after the
// holder of the previous one had sent its UNLOCK (no lease ends during the test, so nothing else
// ends a hold). Grants of unknown outcome are not in the list; each one in between would have
// needed a release too, so leaving them out only makes the check weaker, never wrong.
func (l *rollLoad) checkGrants() []rollProblem {
	var problems []rollProblem
	byToken := map[int64]*rollGrant{}
	for _, w := range l.workers {
		for _, o := range w.ops {
			if o.kind != opLock || o.out != acked || o.refused {
				continue
			}
			g := byToken[o.token]
			if g == nil {
				byToken[o.token] = &rollGrant{key: o.key, owner: w.owner, worker: w, token: o.token, acked: o.done, phase: o.phase}
				continue
			}
			if g.key != o.key || g.owner != w.owner {
				problems = append(problems, rollProblem{phase: o.phase, text: fmt.Sprintf(
					"token %d granted twice: %s to %s, and %s to %s", o.token, g.key, g.owner, o.key, w.owner)})
			}
			if o.done.Before(g.acked) {
				g.acked, g.phase = o.done, o.phase
			}
		}
	}
	perKey := map[string][]*rollGrant{}
	for _, g := range byToken {
		perKey[g.key] = append(perKey[g.key], g)
	}
	for key, gs := range perKey {
		slices.SortFunc(gs, func(a, b *rollGrant) int { return cmp.Compare(a.token, b.token) })
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			// The earliest UNLOCK of prev's token its holder sent (acknowledged or not).
			var released time.Time
			for _, o := range prev.worker.ops {
				if o.kind == opUnlock && o.key == key && o.token == prev.token && o.out != notSent {
					released = o.sent
					break
				}
			}
			switch {
			case released.IsZero():
				problems = append(problems, rollProblem{phase: next.phase, text: fmt.Sprintf(
					"%s granted twice: token %d to %s, never released, then token %d to %s",
					key, prev.token, prev.owner, next.token, next.owner)})
			case !released.Before(next.acked):
				problems = append(problems, rollProblem{phase: next.phase, text: fmt.Sprintf(
					"%s granted twice: token %d to %s was acknowledged %v before %s sent its UNLOCK of token %d",
					key, next.token, next.owner, released.Sub(next.acked), prev.owner, prev.token)})
			}
		}
	}
	return problems
}

// expectedHolder is what the workers' records say one key must look like at the end: held by
// claim (an acknowledged grant not released since), or else free or held by one of maybe (a
// worker whose last operation on it had an unknown outcome).
type expectedHolder struct {
	claims []*rollWorker
	maybe  []*rollWorker
}

func (l *rollLoad) expected(key string) expectedHolder {
	var e expectedHolder
	for _, w := range l.workers {
		st, ok := w.state[key]
		switch {
		case !ok:
		case st.known && st.held:
			e.claims = append(e.claims, w)
		case !st.known:
			e.maybe = append(e.maybe, w)
		}
	}
	return e
}

// lastAckPhase is the phase of w's last acknowledged operation on key.
func (w *rollWorker) lastAckPhase(key string) int {
	for _, o := range slices.Backward(w.ops) {
		if o.key == key && o.out == acked {
			return o.phase
		}
	}
	return 0
}

// checkClaims checks that no key ends held, by the workers' records, by two of them.
func (l *rollLoad) checkClaims() []rollProblem {
	var problems []rollProblem
	for _, key := range l.keys() {
		e := l.expected(key)
		if len(e.claims) < 2 {
			continue
		}
		var who []string
		for _, w := range e.claims {
			who = append(who, fmt.Sprintf("%s token %d", w.owner, w.state[key].token))
		}
		problems = append(problems, rollProblem{phase: len(l.phases) - 1, text: fmt.Sprintf(
			"%s granted twice: acknowledged to several clients and released by none: %s", key, strings.Join(who, ", "))})
	}
	return problems
}

// judge compares what one node shows for key with what the workers were told.
func (l *rollLoad) judge(nodeID, key string, st lockState, held bool) []rollProblem {
	e := l.expected(key)
	end := len(l.phases) - 1
	var problems []rollProblem
	if len(e.claims) >= 1 {
		w := e.claims[0]
		want := w.state[key].token
		if !held || st.owner != w.owner || st.token != want {
			problems = append(problems, rollProblem{phase: w.lastAckPhase(key), lost: true, text: fmt.Sprintf(
				"%s on %s: %s, want held by %s with token %d (acknowledged, not released)", key, nodeID, showLock(st, held), w.owner, want)})
		}
		return problems
	}
	if !held {
		return nil
	}
	for _, w := range e.maybe {
		ws := w.state[key]
		if st.owner == w.owner && (st.token == ws.token || ws.floor >= 0 && st.token > ws.floor) {
			return nil
		}
	}
	phase := end
	for _, w := range l.workers {
		if st.owner == w.owner {
			phase = w.lastAckPhase(key)
		}
	}
	return append(problems, rollProblem{phase: phase, lost: true, text: fmt.Sprintf(
		"%s on %s: %s, but its release was acknowledged (or it was never granted) and no client may hold it", key, nodeID, showLock(st, held))})
}

func showLock(st lockState, held bool) string {
	if !held {
		return "free"
	}
	return fmt.Sprintf("held by %s with token %d", st.owner, st.token)
}

// keys returns every key of the load, sorted.
func (l *rollLoad) keys() []string {
	var out []string
	for _, w := range l.workers {
		for _, k := range w.keys {
			if !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// phaseCounts is what one phase's operations came to.
type phaseCounts struct {
	grants, refusals, releases, renewals int // acknowledged
	unknown, notSent                     int
	lost, duplicates                     int
	errors                               map[string]int // the errors of unknown outcomes, by text
}

func (p phaseCounts) acked() int { return p.grants + p.refusals + p.releases + p.renewals }

// counts tallies the operations and problems per phase.
func (l *rollLoad) counts(problems []rollProblem) []phaseCounts {
	out := make([]phaseCounts, len(l.phases))
	for _, w := range l.workers {
		for _, o := range w.ops {
			c := &out[o.phase]
			switch {
			case o.out == unknown:
				c.unknown++
				if c.errors == nil {
					c.errors = map[string]int{}
				}
				c.errors[o.errText]++
			case o.out == notSent:
				c.notSent++
			case o.refused:
				c.refusals++
			case o.kind == opLock:
				c.grants++
			case o.kind == opUnlock:
				c.releases++
			default:
				c.renewals++
			}
		}
	}
	for _, p := range problems {
		if p.lost {
			out[p.phase].lost++
		} else {
			out[p.phase].duplicates++
		}
	}
	return out
}

// verify stops the load and checks it against the cluster, which must have converged (equal
// digests on every live node): the grants against each other (checkGrants), then every key on
// every node, read from that node's own table (READONLY), against the workers' records, then a
// fresh grant's token against every token seen. It logs the counts per phase and fails the test
// on any problem.
func (l *rollLoad) verify(c *cluster) {
	t := l.t
	t.Helper()
	l.stop()
	var problems []rollProblem
	for _, w := range l.workers {
		problems = append(problems, w.problems...)
	}
	problems = append(problems, l.checkGrants()...)
	problems = append(problems, l.checkClaims()...)
	c.digests()
	ctx := testContext(t, 30*time.Second)
	maxSeen := l.maxAcked.Load()
	held := 0
	for _, n := range c.live() {
		rdb := readonlyClient(t, n.addr)
		for _, key := range l.keys() {
			st, ok, err := lockInfo(ctx, rdb, key)
			if err != nil {
				t.Fatalf("LOCKINFO %s on %s: %v", key, n.id, err)
			}
			if ok {
				held++
				maxSeen = max(maxSeen, st.token)
			}
			problems = append(problems, l.judge(n.id, key, st, ok)...)
		}
	}
	lead := c.leader()
	rdb := newClient(t, lead.addr, 3)
	fresh := fmt.Sprintf("fresh/%d", time.Now().UnixNano())
	tok, err := rdb.Do(ctx, "LOCK", fresh, durLockTTL).Int64()
	if err != nil {
		t.Fatalf("LOCK %s: %v", fresh, err)
	}
	if tok <= maxSeen {
		problems = append(problems, rollProblem{phase: len(l.phases) - 1, text: fmt.Sprintf("LOCK %s: token %d, want > %d (the highest token seen before)", fresh, tok, maxSeen)})
	}
	if _, err := rdb.Do(ctx, "UNLOCK", fresh, tok).Int64(); err != nil {
		t.Errorf("UNLOCK %s: %v", fresh, err)
	}

	var total phaseCounts
	for i, pc := range l.counts(problems) {
		t.Logf("phase %-28q %5d acknowledged (%d grants, %d refusals, %d releases, %d renewals), %d unknown, %d not sent; lost %d, duplicate grants %d",
			l.phases[i], pc.acked(), pc.grants, pc.refusals, pc.releases, pc.renewals, pc.unknown, pc.notSent, pc.lost, pc.duplicates)
		if len(pc.errors) > 0 {
			t.Logf("    unknown outcomes: %v", pc.errors)
		}
		total.grants += pc.grants
		total.refusals += pc.refusals
		total.releases += pc.releases
		total.renewals += pc.renewals
		total.unknown += pc.unknown
		total.notSent += pc.notSent
		total.lost += pc.lost
		total.duplicates += pc.duplicates
	}
	t.Logf("total: %d acknowledged, %d unknown, %d not sent; lost %d, duplicate grants %d; %d keys held on %d nodes at the end; highest token %d",
		total.acked(), total.unknown, total.notSent, total.lost, total.duplicates, held, len(c.live()), maxSeen)
	for _, p := range problems {
		kind := "duplicate grant"
		if p.lost {
			kind = "lost"
		}
		t.Errorf("phase %q: %s: %s", l.phases[p.phase], kind, p.text)
	}
	if total.grants == 0 || total.releases == 0 {
		t.Errorf("the load did nothing: %+v", total)
	}
}

// readonlyClient is newClient for a connection that reads the node's own table (READONLY).
func readonlyClient(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:        addr,
		Protocol:    3,
		MaxRetries:  -1,
		DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second,
		TLSConfig:   testutil.TLSFor(addr),
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			return cn.Do(ctx, "READONLY").Err()
		},
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestRollChecks checks the rolling load's own judges on made-up histories.
func TestRollChecks(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	grant := func(key string, token int64, sent, done int) rollOp {
		return rollOp{key: key, kind: opLock, out: acked, token: token, sent: at(sent), done: at(done)}
	}
	unlock := func(key string, token int64, out outcome, sent, done int) rollOp {
		return rollOp{key: key, kind: opUnlock, out: out, token: token, sent: at(sent), done: at(done)}
	}
	tests := []struct {
		name   string
		a, b   []rollOp
		nGrant int // problems checkGrants must find
	}{
		{"handed over", []rollOp{grant("k", 5, 0, 1), unlock("k", 5, acked, 2, 3)}, []rollOp{grant("k", 7, 1, 4)}, 0},
		{"handed over, release unknown", []rollOp{grant("k", 5, 0, 1), unlock("k", 5, unknown, 2, 3)}, []rollOp{grant("k", 7, 1, 4)}, 0},
		{"never released", []rollOp{grant("k", 5, 0, 1)}, []rollOp{grant("k", 7, 1, 4)}, 1},
		{"release not sent", []rollOp{grant("k", 5, 0, 1), unlock("k", 5, notSent, 2, 3)}, []rollOp{grant("k", 7, 1, 4)}, 1},
		{"granted before the release was sent", []rollOp{grant("k", 5, 0, 1), unlock("k", 5, acked, 5, 6)}, []rollOp{grant("k", 7, 1, 4)}, 1},
		{"one token, two owners", []rollOp{grant("k", 5, 0, 1)}, []rollOp{grant("k", 5, 0, 2)}, 1},
		{"one token, two keys", []rollOp{grant("k", 5, 0, 1), grant("j", 5, 2, 3)}, nil, 1},
		{"same owner again", []rollOp{grant("k", 5, 0, 1), grant("k", 5, 2, 3)}, nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &rollLoad{phases: []string{"p"}, workers: []*rollWorker{
				{id: 0, owner: "a", ops: tt.a}, {id: 1, owner: "b", ops: tt.b},
			}}
			if got := l.checkGrants(); len(got) != tt.nGrant {
				t.Errorf("checkGrants = %v, want %d problems", got, tt.nGrant)
			}
		})
	}

	free := keyState{known: true, floor: -1}
	heldBy := func(tok int64) keyState { return keyState{known: true, held: true, token: tok, floor: -1} }
	judges := []struct {
		name   string
		sa, sb keyState
		st     lockState
		held   bool
		bad    bool
	}{
		{"held as acknowledged", heldBy(5), free, lockState{owner: "a", token: 5}, true, false},
		{"acknowledged grant lost", heldBy(5), free, lockState{}, false, true},
		{"acknowledged grant, other token", heldBy(5), free, lockState{owner: "a", token: 6}, true, true},
		{"acknowledged grant, other owner", heldBy(5), free, lockState{owner: "b", token: 5}, true, true},
		{"free as acknowledged", free, free, lockState{}, false, false},
		{"acknowledged release lost", free, free, lockState{owner: "a", token: 5}, true, true},
		{"unknown grant held", keyState{token: 0, floor: 9}, free, lockState{owner: "a", token: 10}, true, false},
		{"unknown grant, old token", keyState{token: 0, floor: 9}, free, lockState{owner: "a", token: 8}, true, true},
		{"unknown release, still held", keyState{token: 5, floor: -1}, free, lockState{owner: "a", token: 5}, true, false},
	}
	for _, tt := range judges {
		t.Run(tt.name, func(t *testing.T) {
			l := &rollLoad{phases: []string{"p"}, workers: []*rollWorker{
				{id: 0, owner: "a", keys: []string{"k"}, state: map[string]keyState{"k": tt.sa}},
				{id: 1, owner: "b", keys: []string{"k"}, state: map[string]keyState{"k": tt.sb}},
			}}
			if got := l.judge("n1", "k", tt.st, tt.held); (len(got) > 0) != tt.bad {
				t.Errorf("judge = %v, want problems: %v", got, tt.bad)
			}
		})
	}
	l := &rollLoad{phases: []string{"p"}, workers: []*rollWorker{
		{id: 0, owner: "a", keys: []string{"k"}, state: map[string]keyState{"k": heldBy(5)}},
		{id: 1, owner: "b", keys: []string{"k"}, state: map[string]keyState{"k": heldBy(7)}},
	}}
	if got := l.checkClaims(); len(got) != 1 {
		t.Errorf("checkClaims with two holders = %v, want 1 problem", got)
	}
}
