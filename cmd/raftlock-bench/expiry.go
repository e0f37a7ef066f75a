package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// fillMargin is how long before the leases' deadline the fill stops
	// starting batches: a lease sent later would be granted already expired.
	fillMargin = 100 * time.Millisecond
	// drainPoll is how often DBSIZE is read while the leases expire: it is
	// the resolution of the drain time.
	drainPoll = 20 * time.Millisecond
	// maxProbeSamples caps one probe's recorded grants (16 bytes each).
	maxProbeSamples = 1 << 20
	// probeTTL is the lease of a probe's lock; it is released at once.
	probeTTL = 10_000
)

// expiryResult is what an expiry run measured.
type expiryResult struct {
	// Base is DBSIZE before the run: locks that are not ours.
	Base int64
	// Fill took the leases.
	Fill fillResult
	// HeldAfterFill is DBSIZE once the fill ended (leases, base and at most
	// one probe lock per probe).
	HeldAfterFill int64
	// Drained tells whether DBSIZE came back to Base (plus probes) within
	// the drain timeout; DrainLag is when, from the leases' deadline.
	Drained  bool
	DrainLag time.Duration
	Phases   []PhaseStats
	// Probe failures, and grants not recorded because a probe's sample
	// buffer was full.
	ServerErrors, IOErrors, UnexpectedReplies, Dropped int64
	FirstErrors                                        []string
}

// ExpiryRate is leases expired per second of DrainLag.
func (r *expiryResult) ExpiryRate() float64 {
	if !r.Drained || r.DrainLag <= 0 {
		return 0
	}
	return float64(r.Fill.Granted) / r.DrainLag.Seconds()
}

// Errors counts the failed probe operations.
func (r *expiryResult) Errors() int64 { return r.ServerErrors + r.IOErrors + r.UnexpectedReplies }

// runExpiryScenario holds c.Leases leases that all end at one deadline while
// probes take and release locks on other keys the whole time, then
// summarizes the probes' grants before, during and after the wave.
func runExpiryScenario(ctx context.Context, c ExpiryConfig, log *slog.Logger) (expiryResult, error) {
	var res expiryResult
	mon := newClient(c.Addr, Auth{}, nil)
	defer mon.Close()
	base, err := mon.DBSize(ctx).Result()
	if err != nil {
		return res, fmt.Errorf("%w to %s: DBSIZE: %w", errNoConnection, c.Addr, err)
	}
	res.Base = base
	runID := fmt.Sprintf("%08x", rand.Uint32())

	t0 := time.Now()
	stopProbes := make(chan struct{})
	probes := make([]*probe, c.Conns)
	var wg sync.WaitGroup
	errs := &errorLog{log: log}
	for i := range probes {
		probes[i] = &probe{
			id: i, client: newClient(c.Addr, Auth{}, nil), t0: t0, errs: errs,
			prefix: c.KeysPrefix + runID + ":probe:" + strconv.Itoa(i) + ":",
			owner:  "raftlock-bench-" + runID + "-probe-" + strconv.Itoa(i),
		}
		wg.Go(func() { probes[i].loop(ctx, stopProbes) })
	}
	defer func() {
		for _, p := range probes {
			_ = p.client.Close() // nothing to do about a failed close
		}
	}()

	pause(ctx, c.Baseline)
	fillStart := time.Now()
	deadline := fillStart.Add(c.LeaseTTL)
	at := deadline.UnixMilli()
	owner := "raftlock-bench-" + runID + "-lease"
	f := &filler{
		addr: c.Addr, conns: c.FillConns, pipeline: c.FillPipeline, n: c.Leases, mode: ModeSetNX, log: log,
		stopAt: deadline.Add(-fillMargin),
		key:    func(i int64) string { return c.KeysPrefix + runID + ":lease:" + strconv.FormatInt(i, 10) },
		// PXAT, not PX: every lease ends at the same instant however long the fill takes.
		acquire: func(_ int, key string) []any { return []any{"SET", key, owner, "NX", "PXAT", at} },
	}
	res.Fill, err = f.run(ctx)
	fillEnd := time.Now()
	if err == nil {
		res.HeldAfterFill, err = mon.DBSize(ctx).Result()
	}
	drainedAt := deadline.Add(c.DrainTimeout)
	if err == nil {
		// Probes hold at most one lock each at any moment.
		drainedAt, res.Drained, err = waitDrained(ctx, mon, base+int64(c.Conns), deadline, c.DrainTimeout)
	}
	res.DrainLag = drainedAt.Sub(deadline)
	if err == nil {
		pause(ctx, c.After)
	}
	end := time.Now()
	close(stopProbes)
	wg.Wait()

	var samples []sample
	for _, p := range probes {
		samples = append(samples, p.samples...)
		res.ServerErrors += p.serverErrs
		res.IOErrors += p.ioErrs
		res.UnexpectedReplies += p.unexpected
		res.Dropped += p.dropped
	}
	res.FirstErrors = errs.first()
	off := func(t time.Time) time.Duration { return t.Sub(t0) }
	waveStart := max(off(deadline), off(fillEnd)) // an overrunning fill leaves no hold phase
	res.Phases = summarize(samples, []phase{
		{"before", 0, off(fillStart)},
		{"fill", off(fillStart), off(fillEnd)},
		{"hold", off(fillEnd), waveStart},
		{"wave", waveStart, max(off(drainedAt), waveStart)},
		{"after", max(off(drainedAt), waveStart), off(end)},
	}, c.Window)
	if err != nil {
		return res, fmt.Errorf("expiry run: %w", err)
	}
	return res, nil
}

// waitDrained polls DBSIZE from the deadline on until it is at most want, or
// timeout passes. It returns when that happened and whether it did.
func waitDrained(ctx context.Context, c *redis.Client, want int64, deadline time.Time, timeout time.Duration) (time.Time, bool, error) {
	pause(ctx, time.Until(deadline))
	giveUp := deadline.Add(timeout)
	for ctx.Err() == nil && time.Now().Before(giveUp) {
		n, err := c.DBSize(ctx).Result()
		now := time.Now()
		var rerr redis.Error
		switch {
		case err == nil && n <= want:
			return now, true, nil
		case err != nil && !errors.As(err, &rerr) && !ended(ctx):
			return now, false, fmt.Errorf("DBSIZE: %w", err)
		}
		pause(ctx, drainPoll)
	}
	if ctx.Err() != nil {
		return time.Now(), false, context.Cause(ctx)
	}
	return giveUp, false, nil
}

// probe takes and releases locks on fresh keys, one at a time, recording
// every grant.
type probe struct {
	id      int
	client  *redis.Client
	t0      time.Time
	prefix  string
	owner   string
	errs    *errorLog
	seq     uint64
	samples []sample
	// Failure counts and grants left unrecorded.
	serverErrs, ioErrs, unexpected, dropped int64
}

func (p *probe) loop(ctx context.Context, stop <-chan struct{}) {
	for ctx.Err() == nil {
		select {
		case <-stop:
			return
		default:
		}
		if err := p.cycle(ctx); err != nil && !ended(ctx) {
			p.count(err)
			pause(ctx, ioErrorPause) // a node answering only errors must not be hammered
		}
	}
}

// cycle takes one lock, records the grant and releases the lock.
func (p *probe) cycle(ctx context.Context) error {
	p.seq++
	key := p.prefix + strconv.FormatUint(p.seq, 10)
	t := time.Now()
	granted, token, err := parseGrant(ModeNative, p.client.Do(ctx, "LOCK", key, probeTTL, "OWNER", p.owner))
	done := time.Now()
	switch {
	case err != nil:
		return err
	case !granted:
		return &unexpectedReplyError{cmd: "LOCK", reply: "nil (refused) on a fresh key"}
	}
	if len(p.samples) < maxProbeSamples {
		p.samples = append(p.samples, sample{done: done.Sub(p.t0), lat: done.Sub(t)})
	} else {
		p.dropped++
	}
	n, err := p.client.Do(ctx, "UNLOCK", key, token).Int64()
	if err == nil && n != 1 {
		err = &unexpectedReplyError{cmd: "UNLOCK", reply: strconv.FormatInt(n, 10) + ", want 1"}
	}
	return err
}

func (p *probe) count(err error) {
	switch kindOf(err) {
	case failServer:
		p.serverErrs++
	case failUnexpected:
		p.unexpected++
	default:
		p.ioErrs++
	}
	p.errs.note(p.id, "probe", p.prefix, err)
}
