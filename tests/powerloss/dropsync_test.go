package powerloss

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDroppedSyncIsCaught runs the harness on stores that skip one sync (syncfs_test.go) and
// requires it to fail: the WAL's fdatasync of appends and cuts (on the layout cmd/raftlock
// runs, one store for all three roles), and the pebble sync of the stable store and of the
// snapshot store (one store per role, so that the dropped sync is that role's alone: on one
// shared pebble, the next synced write of any role syncs the others' batches too). Each runs
// rounds until the first violation, within a bound.
//
// With the stores' own checks, the first cut after a dropped sync is reported; the
// cluster-level subtests leave them out and need what a client or a peer sees to go wrong.
func TestDroppedSyncIsCaught(t *testing.T) {
	for _, clusterOnly := range []bool{false, true} {
		for _, rule := range []dropRule{dropWAL, dropStable, dropSnapshots} {
			name := "store-checks/" + string(rule)
			if clusterOnly {
				name = "cluster-level/" + string(rule)
			}
			t.Run(name, func(t *testing.T) { caught(t, rule, clusterOnly) })
		}
	}
}

// caught runs rounds with rule until the first violation of safety (a lost write, a second
// vote, a token granted twice, a store that lost what it acknowledged), or fails: a round that
// failed only to form, answer or serve again (which a loaded machine can cause) goes on.
func caught(t *testing.T, rule dropRule, clusterOnly bool) {
	seed := runSeed(t)
	t.Logf("seed %d", seed)
	stats := &cutStats{}
	end := time.Now().Add(20 * time.Second)
	for r := 0; r < 50 && time.Now().Before(end); r++ {
		v := runRound(roundSeed(seed, r), runConfig{events: eventsPerRound, drop: rule, clusterOnly: clusterOnly}, stats)
		if len(v) > 0 && livenessOnly(v) {
			t.Logf("round %d failed on liveness alone, which does not count as caught: %q", r, v[1:])
			continue
		}
		if len(v) > 0 {
			t.Logf("caught in round %d (%v; %d syncs dropped):", r, stats, stats.droppedSyncs.Load())
			for _, s := range v[:min(len(v), 5)] {
				t.Logf("  %s", s)
			}
			return
		}
	}
	t.Errorf("the harness did not notice the dropped %s sync: %v; %d syncs dropped", rule, stats, stats.droppedSyncs.Load())
}

// livenessPrefixes start the violations that say the cluster stopped making progress rather
// than that it lost or invented anything (runRound's reports).
var livenessPrefixes = []string{
	"cluster of ",
	"a request or configuration change got no answer",
	"the configuration does not hold every node again",
	"the cluster does not serve a new write",
	"an incarnation's Close did not return",
}

// livenessOnly reports whether every violation of a round's list (after its heading) is one of
// liveness.
func livenessOnly(v []string) bool {
	for _, s := range v[1:] {
		if !slices.ContainsFunc(livenessPrefixes, func(p string) bool { return strings.HasPrefix(s, p) }) {
			return false
		}
	}
	return true
}
