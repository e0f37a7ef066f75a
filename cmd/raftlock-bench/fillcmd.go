package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"time"
)

// FillConfig describes a fill: Locks locks taken and kept.
type FillConfig struct {
	// Addr is the server's host:port.
	Addr string
	// Locks is how many locks to take, on keys KeysPrefix+"0" up to
	// KeysPrefix+strconv(Locks-1).
	Locks int64
	// Conns is the number of connections sending at once.
	Conns int
	// Pipeline is the number of acquires per pipeline. The server reads a
	// connection only so far ahead, so more than that only waits in buffers.
	Pipeline int
	// Mode is native (LOCK key ttl OWNER id) or setnx (SET key id NX PX ttl).
	Mode Mode
	// TTL is every lock's lease: long enough to outlive the measurements.
	TTL time.Duration
	// KeysPrefix starts every key.
	KeysPrefix string
	// Timeout bounds the whole fill.
	Timeout time.Duration
}

// DefaultFillConfig returns the defaults of the fill flags.
func DefaultFillConfig() FillConfig {
	return FillConfig{
		Addr:       "127.0.0.1:6379",
		Locks:      1_000_000,
		Conns:      32,
		Pipeline:   128,
		Mode:       ModeNative,
		TTL:        time.Hour,
		KeysPrefix: "scale:",
		Timeout:    10 * time.Minute,
	}
}

// Validate reports the first invalid field.
func (c FillConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr %q: want host:port: %w", c.Addr, err)
	}
	switch {
	case c.Locks < 1:
		return fmt.Errorf("locks must be positive, got %d", c.Locks)
	case c.Conns < 1 || c.Conns > maxConns:
		return fmt.Errorf("conns must be in [1, %d], got %d", maxConns, c.Conns)
	case c.Pipeline < 1 || c.Pipeline > maxPipeline:
		return fmt.Errorf("pipeline must be in [1, %d], got %d", maxPipeline, c.Pipeline)
	case c.Mode != ModeNative && c.Mode != ModeSetNX:
		return fmt.Errorf("mode must be %s or %s, got %q", ModeNative, ModeSetNX, c.Mode)
	case c.TTL < time.Millisecond || c.TTL%time.Millisecond != 0:
		return fmt.Errorf("ttl must be whole milliseconds, at least 1, got %v", c.TTL)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	}
	return nil
}

func parseFillArgs(args []string, stderr io.Writer) (FillConfig, bool, error) {
	c := DefaultFillConfig()
	var (
		mode  string
		ttlMS int64
		js    bool
		fs    = flag.NewFlagSet("raftlock-bench fill", flag.ContinueOnError)
	)
	fs.Usage = usage(fs, stderr, "usage: raftlock-bench fill [flags]\n\n"+
		"Take -locks locks with a long lease as fast as pipelining allows, keep them,\n"+
		"and report the fill rate.")
	fs.StringVar(&c.Addr, "addr", c.Addr, "server `host:port`")
	fs.Int64Var(&c.Locks, "locks", c.Locks, "locks to take")
	fs.IntVar(&c.Conns, "conns", c.Conns, "connections")
	fs.IntVar(&c.Pipeline, "pipeline", c.Pipeline, "acquires per pipeline")
	fs.StringVar(&mode, "mode", string(c.Mode), "native (LOCK key ttl OWNER id) or setnx (SET key id NX PX ttl)")
	fs.Int64Var(&ttlMS, "ttl", c.TTL.Milliseconds(), "lease of every lock in milliseconds")
	fs.StringVar(&c.KeysPrefix, "keys-prefix", c.KeysPrefix, "prefix of every key (keys are prefix0, prefix1, ...)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up after this long")
	fs.BoolVar(&js, "json", false, "print one JSON object on stdout (the table goes to stderr)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return c, false, err
	}
	if ttlMS < 1 || ttlMS > maxLeaseMS {
		return c, false, invalid(fmt.Errorf("ttl must be in [1, %d] ms, got %d", maxLeaseMS, ttlMS), stderr)
	}
	c.Mode, c.TTL = Mode(mode), time.Duration(ttlMS)*time.Millisecond
	if err := c.Validate(); err != nil {
		return c, false, invalid(err, stderr)
	}
	return c, js, nil
}

// maxLeaseMS is raftlock's longest lease, ten years; it also keeps the flag
// far from time.Duration's overflow.
const maxLeaseMS = int64(10 * 365 * 24 * time.Hour / time.Millisecond)

// runFill is the fill subcommand.
func runFill(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, js, err := parseFillArgs(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := bounded(ctx, c.Timeout, stderr)
	defer stop()

	runID := fmt.Sprintf("%08x", rand.Uint32())
	owner := func(conn int) string { return "raftlock-bench-" + runID + "-" + strconv.Itoa(conn) }
	ttl := c.TTL.Milliseconds()
	f := &filler{
		addr: c.Addr, conns: c.Conns, pipeline: c.Pipeline, n: c.Locks, mode: c.Mode, log: log,
		key: func(i int64) string { return c.KeysPrefix + strconv.FormatInt(i, 10) },
		acquire: func(conn int, key string) []any {
			if c.Mode == ModeNative {
				return []any{"LOCK", key, ttl, "OWNER", owner(conn)}
			}
			return []any{"SET", key, owner(conn), "NX", "PX", ttl}
		},
	}
	res, runErr := f.run(ctx)
	if errors.Is(runErr, errNoConnection) {
		return runErr
	}
	human := stdout
	if js {
		human = stderr
	}
	printFill(human, c, &res, len(f.key(c.Locks-1)), len(owner(c.Conns-1)))
	if js {
		if err := json.NewEncoder(stdout).Encode(fillJSON(c, &res, runErr)); err != nil {
			return fmt.Errorf("write json report: %w", err)
		}
	}
	switch {
	case runErr != nil:
		return runErr
	case res.Errors() > 0 || res.Refused > 0:
		return fmt.Errorf("%d %w, %d refused (server=%d io=%d unexpected=%d)",
			res.Errors(), errFailures, res.Refused, res.ServerErrors, res.IOErrors, res.UnexpectedReplies)
	}
	return nil
}

func printFill(w io.Writer, c FillConfig, r *fillResult, keyBytes, ownerBytes int) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Fprintf(w, "raftlock-bench fill addr=%s locks=%d conns=%d pipeline=%d mode=%s ttl=%v keys-prefix=%q key_bytes<=%d owner_bytes=%d\n",
		c.Addr, c.Locks, c.Conns, c.Pipeline, c.Mode, c.TTL, c.KeysPrefix, keyBytes, ownerBytes)
	fmt.Fprintf(w, "granted=%d refused=%d errors=%d (server=%d io=%d unexpected=%d) elapsed=%v locks/s=%.0f batch_p50(us)=%.0f batch_p99(us)=%.0f batch_max(us)=%.0f\n",
		r.Granted, r.Refused, r.Errors(), r.ServerErrors, r.IOErrors, r.UnexpectedReplies, r.Elapsed.Round(time.Millisecond),
		r.Rate(), us(r.Batch.Quantile(0.5)), us(r.Batch.Quantile(0.99)), us(r.Batch.Max()))
}

// fillReport is the JSON form of a fill; durations in nanoseconds.
type fillReport struct {
	Schema            string   `json:"schema"`
	Addr              string   `json:"addr"`
	Locks             int64    `json:"locks"`
	Conns             int      `json:"conns"`
	Pipeline          int      `json:"pipeline"`
	Mode              string   `json:"mode"`
	TTLMS             int64    `json:"ttl_ms"`
	Granted           int64    `json:"granted"`
	Refused           int64    `json:"refused"`
	Errors            int64    `json:"errors"`
	ServerErrors      int64    `json:"server_errors"`
	IOErrors          int64    `json:"io_errors"`
	UnexpectedReplies int64    `json:"unexpected_replies"`
	ElapsedNS         int64    `json:"elapsed_ns"`
	LocksPerSec       float64  `json:"locks_per_sec"`
	BatchP50NS        int64    `json:"batch_p50_ns"`
	BatchP99NS        int64    `json:"batch_p99_ns"`
	BatchMaxNS        int64    `json:"batch_max_ns"`
	FirstErrors       []string `json:"first_errors"`
	Aborted           string   `json:"aborted,omitempty"`
}

func fillJSON(c FillConfig, r *fillResult, runErr error) fillReport {
	rep := fillReport{
		Schema: "raftlock-bench-fill/1", Addr: c.Addr, Locks: c.Locks, Conns: c.Conns, Pipeline: c.Pipeline,
		Mode: string(c.Mode), TTLMS: c.TTL.Milliseconds(),
		Granted: r.Granted, Refused: r.Refused, Errors: r.Errors(),
		ServerErrors: r.ServerErrors, IOErrors: r.IOErrors, UnexpectedReplies: r.UnexpectedReplies,
		ElapsedNS: int64(r.Elapsed), LocksPerSec: r.Rate(),
		BatchP50NS: int64(r.Batch.Quantile(0.5)), BatchP99NS: int64(r.Batch.Quantile(0.99)), BatchMaxNS: int64(r.Batch.Max()),
		FirstErrors: append([]string{}, r.FirstErrors...),
	}
	if runErr != nil {
		rep.Aborted = runErr.Error()
	}
	return rep
}
