// Command raftlock-chaos runs the chaos harness of tests/chaos for a long time: a cluster of real
// raftlock processes behind link proxies, faults from a seeded RNG (partitions, pauses, kill -9,
// slow links, and with -snapshots tiny snapshot thresholds), a lock workload, and the checks.
//
//	go run ./cmd/raftlock-chaos -duration 30m -seeds 1,2,3 -nodes 5
//
// It exits 1 if any seed found a violation; each failing seed's folder is printed.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/tests/chaos"
)

func main() {
	duration := flag.Duration("duration", 5*time.Minute, "workload time under faults per seed")
	seeds := flag.String("seeds", "1", "comma-separated seeds")
	nodes := flag.Int("nodes", 3, "cluster size (3 or 5)")
	clients := flag.Int("clients", 6, "workload clients")
	bin := flag.String("bin", "", "raftlock binary (default: go build ./cmd/raftlock)")
	dir := flag.String("dir", os.TempDir(), "where run folders go")
	slow := flag.Bool("slow-links", true, "add slow-link faults")
	snaps := flag.Bool("snapshots", true, "run nodes with --snapshot-threshold 64 --trailing-logs 32 --snapshot-interval 1s")
	flag.Parse()
	if *bin == "" {
		*bin = filepath.Join(os.TempDir(), fmt.Sprintf("raftlock-chaos-bin-%d", os.Getpid()))
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/raftlock").CombinedOutput(); err != nil {
			log.Fatalf("build: %v\n%s", err, out)
		}
		defer os.Remove(*bin)
	}
	failed := false
	for _, s := range strings.Split(*seeds, ",") {
		seed, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			log.Fatalf("-seeds: %v", err)
		}
		res, err := chaos.Run(chaos.Config{Bin: *bin, Dir: *dir, Seed: seed, Nodes: *nodes, Clients: *clients,
			Duration: *duration, SlowLinks: *slow, Snapshots: *snaps, Logf: log.Printf})
		if err != nil {
			log.Printf("seed %d: %v", seed, err)
			failed = true
			continue
		}
		fmt.Printf("%s seed=%d\n", res.Summary(), seed)
		if len(res.Inconclusive) > 0 {
			fmt.Printf("  porcupine timed out on keys %v\n", res.Inconclusive)
		}
		for _, v := range res.Violations {
			fmt.Println("  " + v)
		}
		if res.Folder != "" {
			fmt.Println("  history, visualizations and node logs:", res.Folder)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
