// Command raftlock-bench is a load generator for raftlock and, with the same
// code, for a Redis server: it drives lock acquire+release cycles from many
// connections and reports throughput and latency percentiles.
//
// Modes: native (LOCK key ttl OWNER id / UNLOCK key token), setnx
// (SET key value NX PX ttl / DEL key) and setnx-eval (SET NX PX / EVAL of
// the compare-and-delete script). Workloads: distinct (a fresh key per
// cycle; -pipeline P sends P acquires as one pipeline, then P releases) and
// contended (every worker retries one key; a granted lock is released at
// once, a handoff) and hot-wait (native: every worker queues on one key with
// LOCK ... WAIT -wait ms, releases its grant at once and queues again; the
// server's hand-offs to waiters, with the wait's latency).
//
// The subcommands fill, expiry and ready are the scale scenarios (scale.go):
// hold a million locks, let many leases expire at once under load, time a
// restart. fsync measures the disk's floor: one small synced append, alone
// and with other writers syncing at once (fsynccmd.go).
//
// The exit status is 0 only if the run completed and no operation failed:
// 1 if any operation failed or the run was aborted, 2 for a bad command
// line, 3 if the workers ignored the hard timeout.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// exitHung is the status when the workers outlive the hard timeout.
	exitHung = 3
	// backstopGrace is how long past the hard timeout the workers may take to
	// notice it before the process is killed from under them.
	backstopGrace = 5 * time.Second
)

// errFailures reports that the run completed but some operations failed.
var errFailures = errors.New("operations failed")

func main() {
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// subcommands are the scenarios that do not fit the acquire+release loop,
// each with its own flags: see scale.go.
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"fill":   runFill,
	"expiry": runExpiry,
	"ready":  runReady,
	"fsync":  runFsync,
}

// bounded returns ctx cut off after hard, and arms the backstop that ends
// the process should the work ignore the deadline. stop disarms both.
func bounded(ctx context.Context, hard time.Duration, stderr io.Writer) (_ context.Context, stop func()) {
	ctx, cancel := context.WithTimeoutCause(ctx, hard, fmt.Errorf("hard timeout of %v exceeded", hard))
	// The workers stop at the deadline (it bounds every read and write too);
	// this is the backstop should one of them hang regardless. It is the one
	// exit outside main, because nothing else could end the process.
	backstop := time.AfterFunc(hard+backstopGrace, func() {
		fmt.Fprintf(stderr, "raftlock-bench: hard timeout of %v exceeded and workers did not stop; exiting\n", hard)
		os.Exit(exitHung)
	})
	return ctx, func() {
		backstop.Stop()
		cancel()
	}
}

// quietRedis drops go-redis's own log lines. go-redis logs every failed dial
// without limit; the benchmark counts every failure and logs the first few
// itself, so go-redis's lines would only repeat them.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// exitCode maps run's error to the exit status, printing it if it has not
// been printed already.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2 // parseArgs printed it with the usage
	default:
		fmt.Fprintf(stderr, "raftlock-bench: %v\n", err)
		return 1
	}
}

// run parses args, runs the benchmark under the hard timeout and prints the
// report: the human table on stdout, or with -json the JSON object on stdout
// and the table on stderr. It returns an error wrapping errFailures if any
// operation failed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, stderr)
		}
	}
	o, err := parseArgs(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	ctx, stop := bounded(ctx, o.HardTimeout(), stderr)
	defer stop()

	h := host{GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(), LoadAvgStart: loadAvg()}
	human := stdout
	if o.JSON {
		human = stderr
	}
	printSettings(human, o.Config, h)

	res, runErr := runBench(ctx, o.Config, log)
	if errors.Is(runErr, errNoConnection) {
		return runErr
	}
	h.LoadAvgEnd = loadAvg()
	printTable(human, o.Config, res, h)
	if o.JSON {
		if err := printJSON(stdout, o.Config, res, h, runErr); err != nil {
			return err
		}
	}
	switch {
	case runErr != nil:
		return runErr
	case res.Errors > 0:
		return fmt.Errorf("%d %w (server=%d io=%d unexpected=%d)", res.Errors, errFailures, res.ServerErrors, res.IOErrors, res.UnexpectedReplies)
	}
	return nil
}
