// Command raftlock-chaos is the long mode of the fault harness in tests/chaos (it lives there,
// so no command under cmd/ depends on tests/): a cluster of real raftlock processes behind
// per-link proxies, every fault kind from a seeded RNG, one at a time and mixed (partitions,
// bridges, pauses, kill -9, kill -9 of every node, slow links, clock skew and jumps, membership
// changes, snapshot installs; nodes run with tiny snapshot thresholds), a lock workload, and
// every checker. Each seed prints one summary line.
//
//	go run ./tests/chaos/cmd/raftlock-chaos -duration 10m -seeds 1,2,3 -nodes 5
//
// It exits 1 if any seed found a violation; each failing seed's folder (history, porcupine
// visualizations, node logs) is printed.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/tests/chaos"
	"github.com/raftlock/raftlock/tests/testutil"
)

func main() {
	os.Exit(run())
}

func run() int {
	duration := flag.Duration("duration", 10*time.Minute, "workload time under faults per seed")
	seeds := flag.String("seeds", "1,2,3", "comma-separated seeds")
	nodes := flag.Int("nodes", 5, "cluster size (3 or 5)")
	clients := flag.Int("clients", 0, "workload clients (default twice the nodes)")
	faults := flag.String("faults", "", "comma-separated fault kinds (default all: "+strings.Join(chaos.AllFaults, ",")+")")
	single := flag.Bool("single", false, "one fault at a time instead of mixed")
	bin := flag.String("bin", "", "raftlock binary (default: go build github.com/raftlock/raftlock/cmd/raftlock)")
	race := flag.Bool("race", true, "build the nodes with -race (their logs are checked for data races)")
	dir := flag.String("dir", os.TempDir(), "where run folders go")
	keep := flag.Bool("keep", false, "keep every run's folder, not only failing ones")
	verbose := flag.Bool("v", false, "log every fault")
	nodeArgs := flag.String("node-args", "", "more flags for every node, space-separated (e.g. \"--group-commit no\")")
	flag.Parse()

	if *nodes < 3 || *nodes > 8 {
		log.Printf("-nodes %d: 3 to 8 (loopback 127.0.0.2-9)", *nodes)
		return 2
	}
	var kinds []string
	if *faults != "" {
		kinds = strings.Split(*faults, ",")
	}
	if *bin == "" {
		tmp, err := os.MkdirTemp("", "raftlock-chaos-bin")
		if err != nil {
			log.Print(err)
			return 2
		}
		defer os.RemoveAll(tmp)
		*bin = filepath.Join(tmp, "raftlock")
		if err := testutil.GoBuild(*bin, "github.com/raftlock/raftlock/cmd/raftlock", *race); err != nil {
			log.Printf("build: %v", err)
			return 2
		}
	}
	logf := func(string, ...any) {}
	if *verbose {
		logf = log.Printf
	}
	failed := false
	for _, s := range strings.Split(*seeds, ",") {
		seed, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			log.Printf("-seeds: %v", err)
			return 2
		}
		start := time.Now()
		res, err := chaos.Run(chaos.Config{Bin: *bin, Dir: *dir, Seed: seed, Nodes: *nodes, Clients: *clients,
			Duration: *duration, Faults: kinds, Mixed: !*single, Snapshots: true, LinTimeout: time.Minute,
			Keep: *keep, Logf: logf, NodeArgs: strings.Fields(*nodeArgs)})
		if err != nil {
			log.Printf("seed %d: %v", seed, err)
			failed = true
			continue
		}
		fmt.Printf("%s nodes=%d duration=%v wall=%v\n", res.Summary(), *nodes, *duration, time.Since(start).Round(time.Second))
		if len(res.Inconclusive) > 0 {
			fmt.Printf("  porcupine could not decide keys %v in time (inconclusive, not passed)\n", res.Inconclusive)
		}
		for _, v := range res.Violations {
			fmt.Println("  " + v)
		}
		if res.Folder != "" {
			fmt.Println("  history, visualizations and node logs:", res.Folder)
			failed = failed || len(res.Violations) > 0
		}
	}
	if failed {
		return 1
	}
	return 0
}
