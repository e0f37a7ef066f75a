package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/tests/bench/internal/stats"
)

// The hand-off cells: every worker queues for one key and releases each
// grant at once, so the lock goes from the releaser to the next waiter
// (raftlock: the entry of the UNLOCK grants it to the head of the leader's
// queue; etcd: the delete wakes the Mutex with the next revision). What is
// counted is the hand-offs the server makes, not retries.

// handoffRampLimit bounds how much longer than the warmup a hand-off cell
// waits for every waiter to be granted once. A system slower than
// waiters/handoffRampLimit hand-offs per second is measured anyway, its
// waits after a whole turn of the queue unknown.
const handoffRampLimit = 10 * time.Second

// errWaitRanOut marks a LOCK ... WAIT answered nil: the queue did not come
// round within handoffWait.
var errWaitRanOut = errors.New("LOCK ... WAIT ran out before the grant")

// handoffRun is a hand-off cell in progress.
type handoffRun struct {
	key     []string // the one key, as locker.acquire takes it
	waiters int
	// once counts the waiters granted at least once; the one that makes
	// it waiters closes allOnce.
	once    atomic.Int64
	allOnce chan struct{}
}

// handoffTally is one waiter's count; merged after the waiters stop.
type handoffTally struct {
	grants   []grant
	errs     int64
	firstErr error
}

// grant is one hand-off to a waiter: when it arrived and how long the
// waiter had queued for it.
type grant struct {
	at   time.Time
	wait time.Duration
	// first is the waiter's first grant: its wait began with the cell,
	// not at the tail of a full queue.
	first bool
}

func (t *handoffTally) fail(err error) {
	t.errs++
	if t.firstErr == nil {
		t.firstErr = err
	}
}

// measureHandoff drives w's lockers as waiters on one key and returns the
// hand-offs per second and the waits over the measured window. The warmup
// lasts t.warmup and until every waiter has been granted once (at most
// handoffRampLimit more); the window then lasts t.duration, and cpu is read
// at its start and end. Then the waiters still queued are stopped. Every
// grant in the window counts as a hand-off (the queue holds every other
// waiter throughout), but only the waits that began after the waiter's
// first grant, at the tail of the full queue, are measured.
func measureHandoff(ctx context.Context, w *workers, s setting, t timing, cpu cpuMeter) cellResult {
	load := loadAvg()
	start := time.Now()
	// Every wait ends with waitCtx, by the end of the window at the
	// latest; a release started before then gets opGrace more.
	ctx, cancel := context.WithDeadline(ctx, start.Add(t.warmup+handoffRampLimit+t.duration+opGrace))
	defer cancel()
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()

	r := &handoffRun{
		key:     []string{"compare:" + strconv.FormatUint(rand.Uint64(), 36) + ":handoff"},
		waiters: len(w.lockers),
		allOnce: make(chan struct{}),
	}
	tallies := make([]handoffTally, len(w.lockers))
	var wg sync.WaitGroup
	for i, l := range w.lockers {
		wg.Go(func() { r.work(ctx, waitCtx, l, &tallies[i]) })
	}

	pause(ctx, t.warmup)
	ramp := time.NewTimer(handoffRampLimit)
	select {
	case <-r.allOnce:
	case <-ramp.C:
	case <-ctx.Done():
	}
	ramp.Stop()
	from := time.Now()
	used := sampleCPU(ctx, cpu, from, from.Add(t.duration))
	to := time.Now()
	windowRan := ctx.Err() == nil
	stopWaiting()
	wg.Wait()

	res := cellResult{load1: load, measured: windowRan}
	var (
		waits    stats.Samples
		handoffs int
	)
	for i := range tallies {
		tl := &tallies[i]
		res.errs += tl.errs
		if res.firstErr == nil {
			res.firstErr = tl.firstErr
		}
		for _, g := range tl.grants {
			if g.at.Before(from) || g.at.After(to) {
				continue
			}
			handoffs++
			if !g.first {
				waits.Add(g.wait, 1)
			}
		}
	}
	if n := r.once.Load(); n < int64(r.waiters) && ctx.Err() == nil {
		// The queue did not come round within the bound: the rate stands,
		// the waits of a whole turn are not measured (or are few).
		res.errs++
		if res.firstErr == nil {
			res.firstErr = fmt.Errorf("only %d of %d waiters granted once in %v: waits of a full turn not measured", n, r.waiters, from.Sub(start).Round(100*time.Millisecond))
		}
	}
	if to.After(from) {
		res.rate = float64(handoffs) / to.Sub(from).Seconds()
	}
	res.p50, res.p99, res.p999 = waits.Quantile(0.50), waits.Quantile(0.99), waits.Quantile(0.999)
	res.cpuUS, res.cpuErr = used.perPair(res.rate), used.err
	return res
}

// work is one waiter's loop: queue for the key, release the grant, queue
// again. It ends when waitCtx does, or after maxIterations; its releases
// use ctx, so that one that raced the stop still completes.
func (r *handoffRun) work(ctx, waitCtx context.Context, l locker, t *handoffTally) {
	for range maxIterations {
		if waitCtx.Err() != nil {
			return
		}
		asked := time.Now()
		n, err := l.acquire(waitCtx, r.key)
		at := time.Now()
		switch {
		case err != nil && waitCtx.Err() != nil:
			return // stopped while queued: not a failure
		case err != nil:
			t.fail(err)
			pause(waitCtx, errorPause)
			continue
		case n == 0:
			t.fail(errWaitRanOut)
			continue
		}
		if err := l.release(ctx); err != nil {
			if waitCtx.Err() == nil {
				t.fail(err)
				pause(waitCtx, errorPause)
			}
			continue
		}
		first := len(t.grants) == 0
		t.grants = append(t.grants, grant{at: at, wait: at.Sub(asked), first: first})
		if first && r.once.Add(1) == int64(r.waiters) {
			close(r.allOnce)
		}
	}
}
