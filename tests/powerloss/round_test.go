package powerloss

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// cutStats counts cuts, and where they landed, over a run.
type cutStats struct {
	mu                                                   sync.Mutex
	rounds, events, cuts, all                            int
	leader, election, appends, truncations, snapshotting int
	midChange, changes                                   int
	acked                                                int64
	droppedSyncs                                         atomic.Int64
}

// noteCut counts one node's cut: whether it led, whether the cluster was electing, and which
// store calls were running on it.
func (s *cutStats) noteCut(inc *incarnation, leader, electing, changing bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cuts++
	count := func(c *int, yes bool) {
		if yes {
			*c++
		}
	}
	count(&s.leader, leader)
	count(&s.election, electing)
	count(&s.appends, inc.busy.appends.Load() > 0)
	count(&s.truncations, inc.busy.truncations.Load() > 0)
	count(&s.snapshotting, inc.busy.snapshots.Load() > 0)
	count(&s.midChange, changing)
}

func (s *cutStats) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d rounds, %d cut events, %d node cuts (%d of all nodes at once; %d of the leader, "+
		"%d during an election, %d mid-append, %d mid-truncation, %d mid-snapshot, %d mid-membership change), "+
		"%d acknowledged requests, %d membership changes",
		s.rounds, s.events, s.cuts, s.all, s.leader, s.election, s.appends, s.truncations, s.snapshotting,
		s.midChange, s.acked, s.changes)
}

// roundPlan is what a round's seed decides: the cluster's shape, and every cut (whom, when,
// how long down, how much unsynced data survives).
const (
	clients       = 4
	keysPerClient = 4
	maxGap        = 15 * time.Millisecond
	maxDown       = 10 * time.Millisecond
	// answerWithin bounds the wait for any answer: a proposal's Exec waits for its outcome
	// whatever its context says.
	answerWithin = 15 * time.Second
)

// roundSeed is round r's seed: round 0's is the run's, so a failing round reruns alone with
// -seed set to its own seed and -rounds 1.
func roundSeed(seed uint64, r int) uint64 { return seed + uint64(r)*0x9e3779b97f4a7c15 }

// runConfig is what a run sets for all its rounds.
type runConfig struct {
	events int      // cut events per round
	drop   dropRule // the sync the stores drop
	// clusterOnly turns the stores' own checks after a restart off (watch_test.go), leaving
	// what a client or a peer could see: lost acknowledged requests, tokens, votes,
	// convergence, and a node that cannot restart.
	clusterOnly bool
	// membership: a third of the rounds remove a node and add it back again and again
	// (membership_test.go); POWERLOSS_MEMBERSHIP=0 leaves them out.
	membership bool
}

// runRound forms a cluster, runs the load and rc.events cut events, restarts the victims each
// time, and checks the outcome. It returns the violations found.
func runRound(seed uint64, rc runConfig, stats *cutStats) []string {
	events, drop := rc.events, rc.drop
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	var mu sync.Mutex
	var violations []string
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(violations) > 0
	}
	opts := options{nodes: 3, drop: drop, split: drop == dropStable || drop == dropSnapshots, storeChecks: !rc.clusterOnly}
	if rng.IntN(4) == 0 {
		opts.nodes = 5
	}
	if drop == dropNone && rng.IntN(4) == 0 {
		opts.split = true
	}
	opts.membership = rng.IntN(3) == 0 && rc.membership
	stats.mu.Lock()
	stats.rounds++
	stats.mu.Unlock()

	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) == 0 {
			violations = append(violations, fmt.Sprintf("round of %d nodes, split stores %v, membership changes %v:",
				opts.nodes, opts.split, opts.membership))
		}
		violations = append(violations, fmt.Sprintf(format, args...))
		if debug {
			fmt.Fprintf(os.Stderr, "powerloss debug: round %d: %s\n", seed, violations[len(violations)-1])
		}
	}
	c, err := newCluster(opts, report, stats)
	if err != nil {
		report("cluster of %d did not form: %v", opts.nodes, err)
		return violations
	}
	defer c.close()

	h := newHistory(report)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range clients {
		keys := make([]*keyLog, keysPerClient)
		for j := range keys {
			keys[j] = &keyLog{key: fmt.Sprintf("k%d-%d", i, j)}
			h.keys = append(h.keys, keys[j])
		}
		crng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runClient(ctx, h, i, keys, crng)
		}()
	}

	if opts.membership {
		mrng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runMembership(ctx, mrng)
		}()
	}

	for e := 0; e < events && !failed(); e++ {
		// A third of the cuts come once a leader serves again (under steady load: mid-append,
		// mid-snapshot), the others whenever the gap ends (often mid-election).
		if rng.IntN(3) == 0 {
			_, _ = c.leader(500 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.Int64N(int64(maxGap))))
		victims := c.pickVictims(rng)
		unsynced := make([]int, len(victims))
		for i := range unsynced {
			if rng.IntN(2) == 0 {
				unsynced[i] = 1 + rng.IntN(100)
			}
		}
		stats.mu.Lock()
		stats.events++
		if len(victims) == len(c.nodes) {
			stats.all++
		}
		stats.mu.Unlock()
		clones := c.cut(victims, unsynced, rng)
		time.Sleep(time.Duration(rng.Int64N(int64(maxDown))))
		for i, v := range victims {
			if err := c.start(v, clones[i], true); err != nil {
				report("restart after the cut: %v", err)
			}
		}
	}
	cancel()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(answerWithin):
		report("a request or configuration change got no answer within %v after the load stopped%s", answerWithin, c.describe())
		if debug {
			if f, err := os.CreateTemp("", "powerloss-goroutines-*.txt"); err == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 2)
				fmt.Fprintf(os.Stderr, "powerloss debug: goroutines in %s\n", f.Name())
				f.Close()
			}
		}
		return violations
	}
	stats.mu.Lock()
	stats.acked += h.acked.Load()
	stats.mu.Unlock()
	if failed() {
		return violations
	}
	c.finalChecks(h, report)
	return violations
}

// pickVictims chooses whom a cut event takes: one node (the leader half the time), a minority,
// or every node at once.
func (c *cluster) pickVictims(rng *rand.Rand) []*pnode {
	perm := rng.Perm(len(c.nodes))
	r, wantLeader := rng.IntN(10), rng.IntN(2) == 0 // drawn whatever happens: the plan stays the seed's
	switch {
	case r < 5:
		if l := c.readyLeader(); l != nil && wantLeader {
			for _, n := range c.nodes {
				if n.current() == l {
					return []*pnode{n}
				}
			}
		}
		return []*pnode{c.nodes[perm[0]]}
	case r < 8:
		size := 1 + rng.IntN((len(c.nodes)-1)/2)
		var out []*pnode
		for _, i := range perm[:size] {
			out = append(out, c.nodes[i])
		}
		return out
	}
	return c.nodes
}

// finalChecks: the cluster elects a leader and takes a new write, whose token is above every
// acknowledged one; every node converges to one table; that table holds every acknowledged
// request.
func (c *cluster) finalChecks(h *history, report func(format string, args ...any)) {
	if err := c.addMissing(context.Background(), waitReady); err != nil {
		report("the configuration does not hold every node again: %v%s", err, c.describe())
		return
	}
	var tok fsm.Token
	var l *incarnation
	var err error
	deadline := time.Now().Add(waitReady)
	for time.Now().Before(deadline) {
		if l, err = c.leader(time.Until(deadline)); err != nil {
			break
		}
		var res []fsm.Result
		res, err = execWithin(l, answerWithin, [][]byte{[]byte("probe")}, func(node.View) []fsm.Command {
			return []fsm.Command{{Kind: fsm.KindGrant, Key: []byte("probe"), Owner: []byte("probe"), Match: fsm.Match{Kind: fsm.MatchAny}}}
		})
		if err == nil && len(res) == 1 && res[0].Status == fsm.StatusGranted {
			tok = res[0].Token
			break
		}
		if err == nil {
			err = fmt.Errorf("results %+v", res)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tok == 0 {
		report("the cluster does not serve a new write after the cuts: %v%s", err, c.describe())
		return
	}
	if max := h.floor(); tok <= max {
		report("the first write after the cuts got token %d, %d was acknowledged before", tok, max)
	}
	digest, err := c.converged(waitReady)
	if err != nil {
		report("the nodes do not converge: %v%s", err, c.describe())
		return
	}
	_ = digest
	h.check(func(key string) (fsm.Lock, bool) {
		lk, _, held := l.rep.LocalLookup([]byte(key))
		return lk, held
	})
}

// execWithin runs eval through l's Exec, and gives up waiting after d (the request goes on).
func execWithin(l *incarnation, d time.Duration, keys [][]byte, eval node.Eval) ([]fsm.Result, error) {
	type answer struct {
		res []fsm.Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := l.rep.Exec(context.Background(), keys, eval, nil)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-time.After(d):
		return nil, fmt.Errorf("no answer within %v", d)
	}
}
