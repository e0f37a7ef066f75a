package chaos

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

var (
	flagSeeds    = flag.String("chaos.seeds", "", "comma-separated seeds (default: one seed from the clock, printed)")
	flagDuration = flag.Duration("chaos.duration", 35*time.Second, "workload time under faults per scenario and seed")
)

// buildBinary builds the node binary with the race detector, so the log checker finds data
// races in the nodes (CHAOS_RACE=0 builds without it). broken names the tag of a deliberately
// broken build, or is empty: chaos_nonatomic (raftnode proposes a request's commands one entry
// each), chaos_nofloor (a slot move drops the fence floor).
func buildBinary(t *testing.T, broken string) string {
	t.Helper()
	if broken != "" {
		t.Setenv("GOFLAGS", strings.TrimSpace(os.Getenv("GOFLAGS")+" -tags="+broken))
	}
	bin := filepath.Join(t.TempDir(), "raftlock")
	if err := testutil.GoBuild(bin, "github.com/raftlock/raftlock/cmd/raftlock", os.Getenv("CHAOS_RACE") != "0"); err != nil {
		t.Fatalf("build raftlock: %v", err)
	}
	return bin
}

// shortScenarios are the short mode's runs: 3 nodes, each fault kind in at least one of them,
// the third one mixed (up to two faults at once); the last runs four raft groups (docs/groups.md)
// through every fault kind, membership changes and slot moves included.
var shortScenarios = []struct {
	name      string
	faults    []string
	mixed     bool
	snapshots bool
	nodeArgs  []string
}{
	{"partitions", []string{PartitionLeader, PartitionMinority, Bridge, Pause, Kill, KillAll}, false, false, nil},
	{"clocks-membership-snapshots", []string{ClockSkew, ClockJump, Membership, SnapshotInstall, Pause}, false, true, nil},
	{"mixed", AllFaults, true, true, nil},
	// slot-move four times over: a quarter of the faults, so a 35-second run moves slots
	{"groups", append(slices.Clone(AllFaults), SlotMove, SlotMove, SlotMove, SlotMove), true, true, []string{"--groups", "4"}},
}

// TestChaosShort is the short mode (make chaos-short, part of make test): a 3-node cluster
// through each scenario for -chaos.duration. Seeds: -chaos.seeds=1,2 (default from the clock;
// every run prints its summary line with its seed).
//
// CHAOS_NONATOMIC=1 make chaos-short runs the same scenarios against nodes built with the tag
// chaos_nonatomic, whose requests apply one command at a time: the test then passes only if the
// atomicity checker finds partly applied requests, and logs what every checker reported.
// CHAOS_NOFLOOR=1 runs the groups scenario against nodes built with the tag chaos_nofloor, whose
// slot moves carry no fence floor: it passes only if the fencing check finds a key's tokens out
// of order.
func TestChaosShort(t *testing.T) {
	if raceEnabled {
		t.Skip("chaos runs without -race: make chaos-short")
	}
	if testing.Short() {
		t.Skip("chaos: skipped in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("chaos needs 127.0.0.2-6 on loopback and /proc (Linux)")
	}
	nonAtomic, noFloor := os.Getenv("CHAOS_NONATOMIC") == "1", os.Getenv("CHAOS_NOFLOOR") == "1"
	broken := map[bool]string{true: "chaos_nonatomic"}[nonAtomic]
	if noFloor {
		broken = "chaos_nofloor"
	}
	bin := buildBinary(t, broken)
	fencing := 0 // the no-floor build's fencing violations
	seeds := []uint64{uint64(time.Now().UnixNano() % 1000000)}
	if *flagSeeds != "" {
		seeds = nil
		for _, s := range strings.Split(*flagSeeds, ",") {
			n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("-chaos.seeds: %v", err)
			}
			seeds = append(seeds, n)
		}
	}
	dir := os.Getenv("CHAOS_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	partial := 0
	for _, seed := range seeds {
		for i, sc := range shortScenarios {
			if noFloor && sc.name != "groups" {
				continue
			}
			t.Run(fmt.Sprintf("%s/seed=%d", sc.name, seed), func(t *testing.T) {
				res, err := Run(Config{Bin: bin, Dir: dir, Seed: seed + uint64(i), Nodes: 3, Clients: 6,
					Duration: *flagDuration, Faults: sc.faults, Mixed: sc.mixed, Snapshots: sc.snapshots, NodeArgs: sc.nodeArgs,
					LinTimeout: 20 * time.Second, Keep: os.Getenv("CHAOS_KEEP") != "", Logf: t.Logf})
				if err != nil {
					t.Fatalf("seed %d: %v", seed+uint64(i), err)
				}
				fmt.Printf("%s scenario=%s\n", res.Summary(), sc.name)
				if len(res.Inconclusive) > 0 {
					t.Logf("porcupine could not decide keys %v in time (inconclusive, not passed)", res.Inconclusive)
				}
				partial += res.Multi.Partial
				if noFloor {
					for _, v := range res.Violations {
						if strings.HasPrefix(v, "fencing:") {
							fencing++
							if fencing <= 3 {
								fmt.Printf("chaos: no-floor build: %s\n", v)
							}
						}
					}
					if res.Folder != "" {
						t.Logf("no-floor build: history and node logs in %s", res.Folder)
					}
					return
				}
				if nonAtomic {
					// the summary lines and these are what make chaos-short shows of a passing run
					for i, v := range res.Multi.Violations {
						if i < 3 {
							fmt.Printf("chaos: non-atomic build: %s\n", v)
						}
					}
					for _, v := range res.Violations {
						t.Log("non-atomic build: " + v)
					}
					if res.Folder != "" {
						t.Logf("non-atomic build: history and node logs in %s", res.Folder)
					}
					return
				}
				for _, v := range res.Violations {
					t.Error(v)
				}
				switch {
				case len(res.Violations) > 0:
					t.Errorf("seed %d failed: history, visualizations and node logs in %s", res.Seed, res.Folder)
				case res.Folder != "": // CHAOS_KEEP keeps a passing run's folder too
					t.Logf("seed %d passed: history and node logs kept in %s", res.Seed, res.Folder)
				}
			})
		}
	}
	if noFloor {
		fmt.Printf("chaos: no-floor build: %d fencing violations found\n", fencing)
		if fencing == 0 {
			t.Error("the no-floor build (tag chaos_nofloor) ran without the fencing check finding a key's tokens out of order")
		}
	}
	if nonAtomic {
		fmt.Printf("chaos: non-atomic build: %d partly applied requests found\n", partial)
		if partial == 0 {
			t.Error("the non-atomic build (tag chaos_nonatomic) ran without the atomicity checker finding a partly applied request")
		}
	}
}
