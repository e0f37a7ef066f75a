package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"
)

// ExpiryConfig describes an expiry run: Leases leases ending together while
// Conns probes keep taking locks on other keys.
type ExpiryConfig struct {
	// Addr is the server's host:port.
	Addr string
	// Leases is how many leases expire together.
	Leases int64
	// LeaseTTL is when they expire, from the start of their fill: every
	// lease is SET NX PXAT that instant. The fill must end before it.
	LeaseTTL time.Duration
	// FillConns and FillPipeline shape the fill of the leases.
	FillConns    int
	FillPipeline int
	// Conns is the number of probes, each a connection taking and releasing
	// locks on fresh keys one at a time.
	Conns int
	// Baseline is how long the probes run before the fill; After how long
	// they run once the leases are gone.
	Baseline time.Duration
	After    time.Duration
	// Window is the length over which the slowest stretch of each phase is
	// measured.
	Window time.Duration
	// DrainTimeout bounds the wait, from the deadline, for the leases to go.
	DrainTimeout time.Duration
	// KeysPrefix starts every key.
	KeysPrefix string
}

// DefaultExpiryConfig returns the defaults of the expiry flags.
func DefaultExpiryConfig() ExpiryConfig {
	return ExpiryConfig{
		Addr:         "127.0.0.1:6379",
		Leases:       10_000,
		LeaseTTL:     3 * time.Second,
		FillConns:    32,
		FillPipeline: 128,
		Conns:        8,
		Baseline:     2 * time.Second,
		After:        3 * time.Second,
		Window:       250 * time.Millisecond,
		DrainTimeout: time.Minute,
		KeysPrefix:   "expiry:",
	}
}

// Validate reports the first invalid field.
func (c ExpiryConfig) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr %q: want host:port: %w", c.Addr, err)
	}
	switch {
	case c.Leases < 1:
		return fmt.Errorf("leases must be positive, got %d", c.Leases)
	case c.LeaseTTL <= fillMargin:
		return fmt.Errorf("lease-ttl must be more than %v, got %v", fillMargin, c.LeaseTTL)
	case c.FillConns < 1 || c.FillConns > maxConns:
		return fmt.Errorf("fill-conns must be in [1, %d], got %d", maxConns, c.FillConns)
	case c.FillPipeline < 1 || c.FillPipeline > maxPipeline:
		return fmt.Errorf("fill-pipeline must be in [1, %d], got %d", maxPipeline, c.FillPipeline)
	case c.Conns < 1 || c.Conns > maxConns:
		return fmt.Errorf("conns must be in [1, %d], got %d", maxConns, c.Conns)
	case c.Baseline < 0 || c.After < 0:
		return fmt.Errorf("baseline and after must be >= 0, got %v and %v", c.Baseline, c.After)
	case c.Window <= 0:
		return fmt.Errorf("window must be positive, got %v", c.Window)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("drain-timeout must be positive, got %v", c.DrainTimeout)
	}
	return nil
}

// HardTimeout bounds the whole run: every phase at its longest, plus grace.
func (c ExpiryConfig) HardTimeout() time.Duration {
	return c.Baseline + c.LeaseTTL + c.DrainTimeout + c.After + hardTimeoutGrace
}

func parseExpiryArgs(args []string, stderr io.Writer) (ExpiryConfig, bool, error) {
	c := DefaultExpiryConfig()
	var (
		js bool
		fs = flag.NewFlagSet("raftlock-bench expiry", flag.ContinueOnError)
	)
	fs.Usage = usage(fs, stderr, "usage: raftlock-bench expiry [flags]\n\n"+
		"Hold -leases leases that all end -lease-ttl after their fill starts, while\n"+
		"-conns probes take and release locks on other keys; report the probes'\n"+
		"grants before the fill, during it, while the leases are held, during the\n"+
		"expiry wave and after it.")
	fs.StringVar(&c.Addr, "addr", c.Addr, "server `host:port`")
	fs.Int64Var(&c.Leases, "leases", c.Leases, "leases that expire together")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "the leases end this long after their fill starts (SET NX PXAT)")
	fs.IntVar(&c.FillConns, "fill-conns", c.FillConns, "connections filling the leases")
	fs.IntVar(&c.FillPipeline, "fill-pipeline", c.FillPipeline, "acquires per pipeline while filling")
	fs.IntVar(&c.Conns, "conns", c.Conns, "probes taking and releasing locks on other keys")
	fs.DurationVar(&c.Baseline, "baseline", c.Baseline, "probes alone before the fill")
	fs.DurationVar(&c.After, "after", c.After, "probes alone after the leases are gone")
	fs.DurationVar(&c.Window, "window", c.Window, "window of the slowest-stretch rate")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "longest wait, from the deadline, for the leases to be gone")
	fs.StringVar(&c.KeysPrefix, "keys-prefix", c.KeysPrefix, "prefix of every key")
	fs.BoolVar(&js, "json", false, "print one JSON object on stdout (the table goes to stderr)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return c, false, err
	}
	if err := c.Validate(); err != nil {
		return c, false, invalid(err, stderr)
	}
	return c, js, nil
}

// runExpiry is the expiry subcommand.
func runExpiry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, js, err := parseExpiryArgs(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, stop := bounded(ctx, c.HardTimeout(), stderr)
	defer stop()

	res, runErr := runExpiryScenario(ctx, c, log)
	if errors.Is(runErr, errNoConnection) {
		return runErr
	}
	human := stdout
	if js {
		human = stderr
	}
	printExpiry(human, c, &res)
	if js {
		if err := json.NewEncoder(stdout).Encode(expiryJSON(c, &res, runErr)); err != nil {
			return fmt.Errorf("write json report: %w", err)
		}
	}
	f := &res.Fill
	switch {
	case runErr != nil:
		return runErr
	case f.Stopped || f.Granted != c.Leases:
		return fmt.Errorf("%w: %d of %d leases granted before their deadline (fill stopped: %v); raise -lease-ttl",
			errFailures, f.Granted, c.Leases, f.Stopped)
	case !res.Drained:
		return fmt.Errorf("%w: the leases were not all gone %v after their deadline", errFailures, c.DrainTimeout)
	case res.Errors() > 0 || f.Errors() > 0:
		return fmt.Errorf("%d probe and %d fill %w", res.Errors(), f.Errors(), errFailures)
	}
	return nil
}

func printExpiry(w io.Writer, c ExpiryConfig, r *expiryResult) {
	f := &r.Fill
	fmt.Fprintf(w, "raftlock-bench expiry addr=%s leases=%d lease-ttl=%v fill-conns=%d fill-pipeline=%d conns=%d window=%v\n",
		c.Addr, c.Leases, c.LeaseTTL, c.FillConns, c.FillPipeline, c.Conns, c.Window)
	fmt.Fprintf(w, "leases: %d granted in %v (%.0f/s, %d refused, %d errors); held after fill %d (base %d); ",
		f.Granted, f.Elapsed.Round(time.Millisecond), f.Rate(), f.Refused, f.Errors(), r.HeldAfterFill, r.Base)
	if r.Drained {
		fmt.Fprintf(w, "all gone %v after their deadline (%.0f expiries/s)\n", r.DrainLag.Round(time.Millisecond), r.ExpiryRate())
	} else {
		fmt.Fprintf(w, "NOT all gone %v after their deadline\n", r.DrainLag.Round(time.Millisecond))
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Fprintf(w, "%-7s %8s %8s %8s %9s %13s %9s %9s %9s %9s\n",
		"phase", "from(s)", "to(s)", "grants", "grants/s", "min-window/s", "p50(us)", "p99(us)", "p999(us)", "max(us)")
	for _, p := range r.Phases {
		minWin := "-"
		if p.MinWindowPerSec >= 0 {
			minWin = fmt.Sprintf("%.0f", p.MinWindowPerSec)
		}
		fmt.Fprintf(w, "%-7s %8.2f %8.2f %8d %9.0f %13s %9.0f %9.0f %9.0f %9.0f\n",
			p.Name, p.Start.Seconds(), p.End.Seconds(), p.Grants, p.PerSec, minWin, us(p.P50), us(p.P99), us(p.P999), us(p.Max))
	}
	fmt.Fprintf(w, "probe errors=%d (server=%d io=%d unexpected=%d) unrecorded=%d\n",
		r.Errors(), r.ServerErrors, r.IOErrors, r.UnexpectedReplies, r.Dropped)
}

// expiryReport is the JSON form of an expiry run; durations in nanoseconds.
type expiryReport struct {
	Schema          string            `json:"schema"`
	Addr            string            `json:"addr"`
	Leases          int64             `json:"leases"`
	LeaseTTLNS      int64             `json:"lease_ttl_ns"`
	Conns           int               `json:"conns"`
	WindowNS        int64             `json:"window_ns"`
	Fill            fillReport        `json:"fill"`
	Base            int64             `json:"base"`
	HeldAfterFill   int64             `json:"held_after_fill"`
	Drained         bool              `json:"drained"`
	DrainLagNS      int64             `json:"drain_lag_ns"`
	ExpiriesPerSec  float64           `json:"expiries_per_sec"`
	Phases          []expiryPhaseJSON `json:"phases"`
	ProbeErrors     int64             `json:"probe_errors"`
	ProbeUnrecorded int64             `json:"probe_unrecorded"`
	FirstErrors     []string          `json:"first_errors"`
	Aborted         string            `json:"aborted,omitempty"`
}

type expiryPhaseJSON struct {
	Name            string  `json:"name"`
	StartNS         int64   `json:"start_ns"`
	EndNS           int64   `json:"end_ns"`
	Grants          uint64  `json:"grants"`
	PerSec          float64 `json:"per_sec"`
	MinWindowPerSec float64 `json:"min_window_per_sec"`
	P50NS           int64   `json:"p50_ns"`
	P99NS           int64   `json:"p99_ns"`
	P999NS          int64   `json:"p999_ns"`
	MaxNS           int64   `json:"max_ns"`
}

func expiryJSON(c ExpiryConfig, r *expiryResult, runErr error) expiryReport {
	fc := FillConfig{Addr: c.Addr, Locks: c.Leases, Conns: c.FillConns, Pipeline: c.FillPipeline, Mode: ModeSetNX, TTL: c.LeaseTTL}
	rep := expiryReport{
		Schema: "raftlock-bench-expiry/1", Addr: c.Addr, Leases: c.Leases, LeaseTTLNS: int64(c.LeaseTTL),
		Conns: c.Conns, WindowNS: int64(c.Window), Fill: fillJSON(fc, &r.Fill, nil),
		Base: r.Base, HeldAfterFill: r.HeldAfterFill, Drained: r.Drained, DrainLagNS: int64(r.DrainLag),
		ExpiriesPerSec: r.ExpiryRate(), Phases: []expiryPhaseJSON{},
		ProbeErrors: r.Errors(), ProbeUnrecorded: r.Dropped, FirstErrors: append([]string{}, r.FirstErrors...),
	}
	for _, p := range r.Phases {
		rep.Phases = append(rep.Phases, expiryPhaseJSON{
			Name: p.Name, StartNS: int64(p.Start), EndNS: int64(p.End), Grants: p.Grants, PerSec: p.PerSec,
			MinWindowPerSec: p.MinWindowPerSec, P50NS: int64(p.P50), P99NS: int64(p.P99), P999NS: int64(p.P999), MaxNS: int64(p.Max),
		})
	}
	if runErr != nil {
		rep.Aborted = runErr.Error()
	}
	return rep
}
