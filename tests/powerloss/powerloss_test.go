package powerloss

import (
	"flag"
	"os"
	"strconv"
	"testing"
	"time"
)

// Reproducing a run: every decision of a round (cluster size and layout, each cut's victims,
// moment, downtime and the part of unsynced data the crash keeps) comes from its seed, which a
// failure prints. Thread interleavings do not: a rerun replays the same plan, not the same
// schedule.
var (
	seedFlag   = flag.Uint64("seed", 0, "powerloss: the run's seed (0: from POWERLOSS_SEED, else the clock)")
	roundsFlag = flag.Int("rounds", 0, "powerloss: the most rounds to run (0: until the budget ends)")
	budgetFlag = flag.Duration("budget", 0, "powerloss: how long TestPowerLoss runs (0: POWERLOSS_BUDGET, else 60s, 10s with -short)")
)

// eventsPerRound is how many cut events a round makes before it checks.
const eventsPerRound = 20

func runSeed(t *testing.T) uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if s := os.Getenv("POWERLOSS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("POWERLOSS_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}

func budget(t *testing.T) time.Duration {
	if *budgetFlag != 0 {
		return *budgetFlag
	}
	if s := os.Getenv("POWERLOSS_BUDGET"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("POWERLOSS_BUDGET=%q: %v", s, err)
		}
		return d
	}
	if testing.Short() {
		return 10 * time.Second
	}
	return 90 * time.Second
}

// TestPowerLoss cuts the power of one node, a minority or every node at random points under
// load, round after round until its budget ends, and checks after every restart and every
// round (watch_test.go, history_test.go). POWERLOSS_DROP_SYNC=wal|stable|snapshots runs it on
// stores with that sync dropped: it must fail then; POWERLOSS_CLUSTER_ONLY=1 leaves out the
// stores' own checks, to see what the cluster-level ones catch alone.
func TestPowerLoss(t *testing.T) {
	seed := runSeed(t)
	rc := runConfig{events: eventsPerRound, drop: dropRule(os.Getenv("POWERLOSS_DROP_SYNC")),
		clusterOnly: os.Getenv("POWERLOSS_CLUSTER_ONLY") != "", membership: os.Getenv("POWERLOSS_MEMBERSHIP") != "0"}
	t.Logf("seed %d (rerun: go test ./tests/powerloss -run TestPowerLoss -seed %d); dropped sync: %q, cluster-level checks only: %v, membership changes: %v",
		seed, seed, rc.drop, rc.clusterOnly, rc.membership)
	stats := &cutStats{}
	start := time.Now()
	end := start.Add(budget(t))
	for r := 0; time.Now().Before(end) && (*roundsFlag == 0 || r < *roundsFlag); r++ {
		rs := roundSeed(seed, r)
		if v := runRound(rs, rc, stats); len(v) > 0 {
			t.Errorf("round %d failed (rerun it alone: go test ./tests/powerloss -run TestPowerLoss -seed %d -rounds 1):", r, rs)
			for _, s := range v[:min(len(v), 10)] {
				t.Errorf("  %s", s)
			}
			break
		}
	}
	el := time.Since(start)
	t.Logf("%v in %v: %.1f node cuts/s; %d syncs dropped", stats, el.Round(time.Millisecond),
		float64(stats.cuts)/el.Seconds(), stats.droppedSyncs.Load())
}
