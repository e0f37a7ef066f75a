package chaos

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	flagSeeds    = flag.String("chaos.seeds", "", "comma-separated seeds (default: one seed from the clock)")
	flagDuration = flag.Duration("chaos.duration", 40*time.Second, "workload time under faults per seed")
)

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "raftlock")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/raftlock/raftlock/cmd/raftlock")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build raftlock: %v\n%s", err, out)
	}
	return bin
}

// TestChaosShort runs a 3-node cluster under one fault at a time with six clients and checks
// the history. Seeds: -chaos.seeds=1,2 (default from the clock; the seed is printed).
func TestChaosShort(t *testing.T) {
	if raceEnabled {
		t.Skip("chaos runs without -race: go test ./tests/chaos/")
	}
	if testing.Short() {
		t.Skip("chaos: skipped in -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("chaos needs 127.0.0.2-5 on loopback (Linux)")
	}
	bin := buildBinary(t)
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
	for _, seed := range seeds {
		t.Logf("chaos: seed %d", seed)
		res, err := Run(Config{Bin: bin, Dir: dir, Seed: seed, Nodes: 3, Clients: 6, Duration: *flagDuration, Logf: t.Logf})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		t.Log(res.Summary())
		println(res.Summary() + " seed=" + strconv.FormatUint(seed, 10))
		if len(res.Inconclusive) > 0 {
			t.Logf("porcupine timed out on keys %v (not counted as violations)", res.Inconclusive)
		}
		if len(res.Violations) > 0 {
			for _, v := range res.Violations {
				t.Error(v)
			}
			t.Errorf("seed %d failed: history, visualizations and node logs in %s", seed, res.Folder)
		}
	}
}
