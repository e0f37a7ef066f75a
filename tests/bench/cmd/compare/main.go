// Command compare measures raftlock side by side with the systems it
// replaces or competes with, in one run on one machine: raftlock (1 and 3
// nodes), redis-server (appendfsync always, and no persistence), Redlock over
// three redis-servers through redsync (appendfsync always, and no
// persistence), etcd (1 and 3 members) through client/v3/concurrency's
// Mutex, and the Go floor (tests/bench/cmd/floor: the least a Go server with a
// goroutine per connection does per request, durable or not, and the same
// over hashicorp/raft on 1 and 3 nodes). Every system gets the same load shapes (distinct keys at 1, 16 and
// 64 connections, pipelined where the protocol allows, SET NX PX at 50
// connections, one hot key; and where the server queues waiters, raftlock
// and etcd, N clients queued on one key) and the machine to itself: one
// system runs at a time, the systems take turns round by round, and each
// figure is the median over the rounds. It prints one Markdown table with
// raftlock's ratio to each peer, and the servers' CPU per acquire+release
// pair.
//
// It starts every server itself, each on free loopback ports with a fresh
// temporary data directory, and stops them by PID when done, on error, and
// on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

func main() {
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintf(os.Stderr, "compare: %v\n", err)
		os.Exit(1)
	}
}

// run parses args, measures every selected system round by round, and
// prints the table on stdout (progress goes to stderr). Interrupted, it
// stops what it started and still prints what it measured.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	systems, err := selectSystems(cfg.systems)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, fmt.Errorf("time limit of %v reached", cfg.timeout))
	defer cancel()
	root, err := os.MkdirTemp("", "raftlock-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)

	ncells := 0
	for _, sys := range systems {
		ncells += len(sys.cells(cfg))
	}
	fmt.Fprintf(stderr, "compare: %d systems, %d cells × %d runs of %v + %v warmup: about %v of load, plus starting and stopping; load1 now %.2f\n",
		len(systems), ncells, cfg.runs, cfg.duration, cfg.warmup, time.Duration(ncells*cfg.runs)*(cfg.duration+cfg.warmup), loadAvg())
	if cfg.runs < 3 {
		fmt.Fprintf(stderr, "compare: only %d run(s): the figures are not medians of 3\n", cfg.runs)
	}

	started, load := time.Now(), loadAvg()
	res := results{}
	for round := range cfg.runs {
		for i := range systems {
			if ctx.Err() != nil {
				break
			}
			// Rotated by one per round, so that no system always runs
			// first (or right after the same neighbour).
			sys := systems[(i+round)%len(systems)]
			measureSystem(ctx, cfg, sys, sys.dataDir(root, round), round, res, stderr)
		}
	}
	printReport(stdout, cfg, systems, res, load, time.Since(started))
	if ctx.Err() != nil {
		return fmt.Errorf("stopped early: %w", context.Cause(ctx))
	}
	return nil
}

// measureSystem starts sys in dir, runs each of its cells once, and stops it.
func measureSystem(ctx context.Context, cfg config, sys *system, dir string, round int, res results, log io.Writer) {
	c, err := sys.start(ctx, cfg, dir)
	if err != nil {
		fmt.Fprintf(log, "run %d  %s: cannot start: %v\n", round+1, sys.name, err)
		return
	}
	defer func() {
		c.stop()
		_ = os.RemoveAll(dir) // the root is removed at the end anyway
	}()
	for _, cl := range sys.cells(cfg) {
		if ctx.Err() != nil {
			return
		}
		row := rowLabel(sys, cl.client)
		if err := c.checkAlive(); err != nil {
			fmt.Fprintf(log, "run %d  %s: %v\n", round+1, sys.name, err)
			return
		}
		w, err := cl.client.open(ctx, c, cl.setting, cfg)
		if err != nil {
			fmt.Fprintf(log, "run %d  %-48s %-20s cannot connect: %v\n", round+1, row, cl.setting.name, err)
			res.add(cl.setting, row, cellResult{errs: 1, firstErr: err})
			continue
		}
		var r cellResult
		if cl.setting.handoff {
			r = measureHandoff(ctx, w, cl.setting, cfg.timing, c.cpuTime)
		} else {
			r = measure(ctx, w, cl.setting, cfg.timing, c.cpuTime)
		}
		w.close()
		if ctx.Err() != nil {
			return // cut short: not a measurement
		}
		res.add(cl.setting, row, r)
		msg := ""
		if r.errs > 0 {
			msg = fmt.Sprintf("  %d errors, first: %v", r.errs, r.firstErr)
		}
		if r.cpuErr != nil {
			msg += fmt.Sprintf("  cpu unknown: %v", r.cpuErr)
		}
		fmt.Fprintf(log, "run %d  %-48s %-20s %9.0f/s  p50 %s  p99 %s  p999 %s  cpu %s µs/pair  load %.2f%s\n",
			round+1, row, cl.setting.name, r.rate, ms(r.p50), ms(r.p99), ms(r.p999), num(r.cpuUS), r.load1, msg)
	}
}

// parseFlags reads the command line; defaults suit `make bench-compare`.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: compare [flags]\n\nMeasures raftlock, redis-server, Redlock (redsync) and etcd with the same load, interleaved,\nand prints one Markdown table.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "measured time of each cell")
	fs.DurationVar(&cfg.warmup, "warmup", 500*time.Millisecond, "unmeasured load before each cell")
	fs.IntVar(&cfg.runs, "runs", 3, "rounds over all systems; each figure is the median over them")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "lease of every lock")
	fs.DurationVar(&cfg.timeout, "timeout", 21*time.Minute, "stop everything after this long (what was measured is still printed)")
	fs.StringVar(&cfg.raftlock, "raftlock", "bin/raftlock", "raftlock binary")
	fs.StringVar(&cfg.etcd, "etcd", "bin/etcd", "etcd binary (tests/bench/cmd/etcd)")
	fs.StringVar(&cfg.redisServer, "redis-server", "/usr/bin/redis-server", "redis-server binary")
	fs.StringVar(&cfg.floor, "floor", "bin/raftlock-floor", "the Go floor server's binary (tests/bench/cmd/floor)")
	only := fs.String("systems", "", "comma-separated systems to run (default all): "+strings.Join(systemKeys(), ","))
	waiters := fs.String("waiters", "16", "comma-separated sizes of the hand-off cells: that many clients queue on one key (raftlock LOCK ... WAIT, etcd Mutex); \"\" for none")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch {
	case fs.NArg() > 0:
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.duration <= 0 || cfg.warmup < 0:
		return config{}, errors.New("-duration must be positive and -warmup not negative")
	case cfg.runs < 1 || cfg.runs > 100:
		return config{}, fmt.Errorf("-runs must be in [1, 100], got %d", cfg.runs)
	case cfg.ttl < time.Second:
		return config{}, fmt.Errorf("-ttl must be at least 1s (a lock must outlive its cycle), got %v", cfg.ttl)
	case cfg.timeout <= 0:
		return config{}, errors.New("-timeout must be positive")
	}
	if *only != "" {
		cfg.systems = strings.Split(*only, ",")
	}
	w, err := parseWaiters(*waiters)
	if err != nil {
		return config{}, err
	}
	cfg.waiters = w
	return cfg, nil
}

// maxWaiters bounds a hand-off cell: raftlock needs a connection per waiter,
// and its default bound on waiters per key is 10,000.
const maxWaiters = 5000

// parseWaiters reads -waiters: distinct counts in [1, maxWaiters].
func parseWaiters(list string) ([]int, error) {
	var ns []int
	for f := range strings.SplitSeq(list, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > maxWaiters {
			return nil, fmt.Errorf("-waiters: each count must be in [1, %d], got %q", maxWaiters, f)
		}
		if slices.Contains(ns, n) {
			return nil, fmt.Errorf("-waiters: %d twice", n)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

func systemKeys() []string {
	var keys []string
	for _, s := range allSystems() {
		keys = append(keys, s.key)
	}
	return keys
}

// selectSystems returns the systems named by keys, in table order; all of
// them for none.
func selectSystems(keys []string) ([]*system, error) {
	all := allSystems()
	if len(keys) == 0 {
		return all, nil
	}
	for _, k := range keys {
		if !slices.Contains(systemKeys(), k) {
			return nil, fmt.Errorf("unknown system %q (have %s)", k, strings.Join(systemKeys(), ","))
		}
	}
	var sel []*system
	for _, s := range all {
		if slices.Contains(keys, s.key) {
			sel = append(sel, s)
		}
	}
	return sel, nil
}
