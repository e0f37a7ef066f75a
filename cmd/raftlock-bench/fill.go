package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/cmd/raftlock-bench/internal/latency"
)

// fillProgressEvery is how often a fill logs how far it got: a million
// locks take long enough that a silent run looks hung.
const fillProgressEvery = 5 * time.Second

// filler acquires n locks as fast as it can and keeps them: one goroutine
// per connection, each sending pipelines of acquires for the next unclaimed
// key indexes. Both the fill and the expiry scenarios use it.
type filler struct {
	addr     string
	conns    int
	pipeline int
	n        int64
	// key names lock i; every key must be distinct.
	key func(i int64) string
	// acquire is the command that takes key, sent on connection conn.
	acquire func(conn int, key string) []any
	// mode tells how to read acquire's reply (LOCK's token or SET's OK).
	mode Mode
	// stopAt, if set, ends the fill early: no batch starts after it.
	stopAt time.Time
	log    *slog.Logger
}

// fillResult is what a fill did. Every claimed key counts exactly once: as
// granted, refused (already held) or failed.
type fillResult struct {
	Granted           int64
	Refused           int64
	ServerErrors      int64
	IOErrors          int64
	UnexpectedReplies int64
	// Stopped is set when stopAt ended the fill before n keys were sent.
	Stopped bool
	// Elapsed runs from the first batch sent to the last reply read.
	Elapsed     time.Duration
	FirstErrors []string
	// Batch is the round trip of one pipeline.
	Batch latency.Histogram
}

// Rate is granted locks per second.
func (r *fillResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Granted) / r.Elapsed.Seconds()
}

// Errors is the number of acquires that failed.
func (r *fillResult) Errors() int64 { return r.ServerErrors + r.IOErrors + r.UnexpectedReplies }

// fillWorker is one connection's share of a fill and its own tally.
type fillWorker struct {
	id     int
	client *redis.Client
	res    fillResult
}

// run fills. It returns an error wrapping errNoConnection if the server
// cannot be reached, and the context's cause, with the partial result, if
// ctx ends first. Failed acquires are counted, not returned.
func (f *filler) run(ctx context.Context) (fillResult, error) {
	workers := make([]*fillWorker, f.conns)
	clients := make([]*redis.Client, f.conns)
	for i := range workers {
		workers[i] = &fillWorker{id: i, client: newClient(f.addr, Auth{}, nil)}
		clients[i] = workers[i].client
	}
	defer func() {
		for _, c := range clients {
			_ = c.Close() // nothing to do about a failed close
		}
	}()
	if err := connect(ctx, clients); err != nil {
		return fillResult{}, fmt.Errorf("%w to %s: %w", errNoConnection, f.addr, err)
	}

	var (
		next    atomic.Int64 // the first unclaimed key index
		granted atomic.Int64 // for progress lines only
		errs    = &errorLog{log: f.log}
		wg      sync.WaitGroup
	)
	start := time.Now()
	for _, w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if !f.stopAt.IsZero() && !time.Now().Before(f.stopAt) {
					return
				}
				lo := next.Add(int64(f.pipeline)) - int64(f.pipeline)
				if lo >= f.n {
					return
				}
				g := w.batch(ctx, f, lo, min(lo+int64(f.pipeline), f.n), errs)
				granted.Add(g)
			}
		})
	}
	done := make(chan struct{})
	var progress sync.WaitGroup
	progress.Go(func() { f.logProgress(done, start, &granted) })
	wg.Wait()
	elapsed := time.Since(start)
	close(done)
	progress.Wait()

	var res fillResult
	for _, w := range workers {
		res.Granted += w.res.Granted
		res.Refused += w.res.Refused
		res.ServerErrors += w.res.ServerErrors
		res.IOErrors += w.res.IOErrors
		res.UnexpectedReplies += w.res.UnexpectedReplies
		res.Batch.Merge(&w.res.Batch)
	}
	// Only stopAt (or ctx) leaves keys unclaimed.
	res.Elapsed, res.Stopped, res.FirstErrors = elapsed, next.Load() < f.n && ctx.Err() == nil, errs.first()
	if ctx.Err() != nil {
		return res, fmt.Errorf("fill aborted: %w", context.Cause(ctx))
	}
	return res, nil
}

// batch sends the acquires of keys [lo, hi) as one pipeline and tallies the
// replies. It returns how many were granted.
func (w *fillWorker) batch(ctx context.Context, f *filler, lo, hi int64, errs *errorLog) int64 {
	args := make([][]any, 0, hi-lo)
	for i := lo; i < hi; i++ {
		args = append(args, f.acquire(w.id, f.key(i)))
	}
	t0 := time.Now()
	cmds := execPipeline(ctx, w.client, args)
	w.res.Batch.Record(time.Since(t0))
	var granted int64
	ioFailed := false
	for i, cmd := range cmds {
		ok, _, err := parseGrant(f.mode, cmd)
		switch {
		case err != nil && ended(ctx):
			// The run was cut short; the abort is reported, not each reply.
		case err != nil:
			switch kindOf(err) {
			case failServer:
				w.res.ServerErrors++
			case failUnexpected:
				w.res.UnexpectedReplies++
			default:
				w.res.IOErrors++
				ioFailed = true
			}
			errs.note(w.id, "acquire", f.key(lo+int64(i)), err)
		case ok:
			granted++
		default:
			w.res.Refused++
		}
	}
	w.res.Granted += granted
	if ioFailed {
		pause(ctx, ioErrorPause) // go-redis redials on the next batch
	}
	return granted
}

// logProgress logs the fill rate every fillProgressEvery until done closes.
func (f *filler) logProgress(done <-chan struct{}, start time.Time, granted *atomic.Int64) {
	t := time.NewTicker(fillProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			g := granted.Load()
			f.log.Info("fill progress", "granted", g, "of", f.n,
				"per_sec", int64(float64(g)/time.Since(start).Seconds()))
		}
	}
}
