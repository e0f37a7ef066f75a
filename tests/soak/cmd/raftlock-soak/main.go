// Command raftlock-soak is the soak test (tests/soak; make soak): a 3-node cluster of the given
// raftlock binary under a steady mixed load at a fraction of its measured capacity, with a node
// restarted every few minutes, sampled every interval; it writes soak.csv, latency.csv,
// restarts.csv and the plot soak.svg into the output directory and judges them.
//
//	bin/raftlock-soak -bin bin/raftlock -duration 30m -restart-every 4m -load 0.7
//
// It exits 0 when every check passed, 1 when one failed (each check's figures are printed; a
// node that exited on its own during the run is such a failed check), 2 when the run could not
// be made or was interrupted. Every node it starts is stopped on every
// way out, Ctrl-C included.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/soak"
)

func main() {
	os.Exit(run())
}

func run() int {
	bin := flag.String("bin", "bin/raftlock", "the raftlock binary")
	duration := flag.Duration("duration", 30*time.Minute, "how long the paced load runs (SOAK_DURATION)")
	restartEvery := flag.Duration("restart-every", 4*time.Minute, "restart a node (n2 and n3 in turn) this often; 0: never (SOAK_RESTART_EVERY)")
	load := flag.Float64("load", 0.7, "the pace, as a fraction of the measured capacity (SOAK_LOAD)")
	out := flag.String("out", "", "output directory (default: a fresh one under the system's temporary directory) (SOAK_OUT)")
	interval := flag.Duration("interval", time.Minute, "one sample of every node and of the load each (SOAK_INTERVAL)")
	measureFor := flag.Duration("measure", 20*time.Second, "how long the unpaced mix runs to measure the capacity")
	flag.Parse()
	log.SetFlags(log.Ltime)
	// go-redis logs every failed dial; while a node restarts that is hundreds of lines. The
	// soak counts them (error kind "conn") instead.
	redis.SetLogger(quiet{})

	switch {
	case *load <= 0 || *load > 1:
		log.Printf("-load %v: a fraction in (0, 1]", *load)
		return 2
	case *duration < *interval || *interval <= 0:
		log.Printf("-duration %v and -interval %v: the run must hold at least one interval", *duration, *interval)
		return 2
	case *measureFor <= 0:
		log.Printf("-measure %v: must be positive", *measureFor)
		return 2
	}
	if _, err := os.Stat(*bin); err != nil {
		log.Printf("-bin: %v (make soak builds it)", err)
		return 2
	}
	dir, err := soak.MkdirOut(*out)
	if err != nil {
		log.Print(err)
		return 2
	}
	log.Printf("output in %s", dir)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, soak.Config{Bin: *bin, Dir: dir, Duration: *duration, RestartEvery: *restartEvery,
		Load: *load, Measure: *measureFor, Interval: *interval, Limits: soak.DefaultLimits(), Logf: log.Printf})
	if err != nil {
		log.Printf("soak: %v (node logs in %s)", err, dir)
		return 2
	}
	if rep.CSV != "" {
		log.Printf("figures: %s (and latency.csv, restarts.csv); plot: %s", rep.CSV, rep.Plot)
	}
	if rep.Interrupted {
		log.Print("interrupted: no verdict")
		return 2
	}
	fmt.Printf("capacity %.0f requests/s, paced at %.0f; %d restarts; pub/sub %d published, %d received\n",
		rep.Capacity, rep.Pace, len(rep.Restarts), rep.Figures.PubSub.Published, rep.Figures.PubSub.Received)
	for _, r := range rep.Results {
		fmt.Println(r)
	}
	if soak.Failed(rep.Results) {
		fmt.Println("soak: FAILED")
		return 1
	}
	fmt.Println("soak: passed")
	return 0
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
