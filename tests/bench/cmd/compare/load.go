package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/tests/bench/internal/stats"
)

// The load generator: the same loop drives every system through a locker.

// locker is one worker's handle on a lock service.
type locker interface {
	// acquire tries once to take each key, as one batch (a pipeline) when
	// there are several. A key that someone else holds is refused, which is
	// not an error; systems whose lock waits in a queue (etcd) wait instead.
	// It returns how many keys it got; the locker remembers them.
	acquire(ctx context.Context, keys []string) (granted int, err error)
	// release gives back every lock the last acquire took, as one batch.
	release(ctx context.Context) error
}

// workers are the lockers of one cell, opened by a client.
type workers struct {
	lockers []locker
	batch   int    // keys per acquire: the pipeline depth, or 1
	close   func() // closes the connections
}

// setting is the shape of the load of one cell.
type setting struct {
	name  string
	conns int
	// depth is the operations in flight per connection: Redis-protocol
	// clients pipeline that many cycles, etcd multiplexes that many
	// concurrent mutexes (each with its own session) over one gRPC
	// connection. 1 is request/response.
	depth int
	// hot has every worker contend for one key, retrying at once when
	// refused (etcd: waiting in its queue); each grant is released at once.
	hot bool
	// handoff has every worker queue for one key (raftlock: LOCK ... WAIT;
	// etcd: Mutex.Lock), conns of them, each grant released at once: it
	// measures the server's hand-offs to the next waiter (handoff.go).
	handoff bool
}

// timing is how long each cell runs.
type timing struct {
	warmup, duration time.Duration
}

const (
	// opGrace bounds how long an operation started before the end of a
	// cell may take to finish.
	opGrace = 10 * time.Second
	// errorPause keeps a worker whose operation failed from spinning.
	errorPause = 10 * time.Millisecond
	// maxIterations bounds each worker's loop by count as well as by time.
	maxIterations = 50_000_000
)

// errRefused marks a fresh key that was not granted: nobody else holds it,
// so that is a failure of the system under test.
var errRefused = errors.New("lock on a fresh key refused")

// cellResult is what one cell measured.
type cellResult struct {
	// measured says the cell's window ran and rate is a figure: above 0,
	// or (a hand-off cell whose queue did not move within it) 0.
	measured bool
	rate     float64 // acquire+release cycles per second (hot: handoffs)
	p50, p99 time.Duration
	p999     time.Duration
	errs     int64 // failed operations, warmup included
	firstErr error
	load1    float64 // 1-minute load average when the cell started
	// cpuUS is the servers' CPU (user+system, every process of the
	// system) per acquire+release pair over the measured window, in
	// microseconds; 0 if it could not be read.
	cpuUS  float64
	cpuErr error // why cpuUS is 0
}

// tally is one worker's count; merged after the workers stop.
type tally struct {
	acq      stats.Samples // acquire latency, from asking to the grant
	cycles   int64
	errs     int64
	firstErr error
	lastDone time.Time // completion of the last measured cycle
}

func (t *tally) fail(err error) {
	t.errs++
	if t.firstErr == nil {
		t.firstErr = err
	}
}

// cellRun is one cell in progress. Read-only once the workers start.
type cellRun struct {
	s         setting
	batch     int
	prefix    string // of every key this cell touches
	warmupEnd time.Time
	end       time.Time
}

// measure drives w with the load s describes for t.warmup+t.duration and
// returns what it measured after the warmup; cpu reads the servers' CPU at
// the start and the end of the measured window.
func measure(ctx context.Context, w *workers, s setting, t timing, cpu cpuMeter) cellResult {
	load := loadAvg()
	start := time.Now()
	r := &cellRun{
		s:         s,
		batch:     w.batch,
		prefix:    "compare:" + strconv.FormatUint(rand.Uint64(), 36),
		warmupEnd: start.Add(t.warmup),
		end:       start.Add(t.warmup + t.duration),
	}
	// Operations in flight at the end get opGrace to finish; no operation
	// of any system outlives that.
	ctx, cancel := context.WithDeadline(ctx, r.end.Add(opGrace))
	defer cancel()

	tallies := make([]tally, len(w.lockers))
	var wg sync.WaitGroup
	for i, l := range w.lockers {
		wg.Go(func() { r.work(ctx, i, l, &tallies[i]) })
	}
	used := sampleCPU(ctx, cpu, r.warmupEnd, r.end)
	wg.Wait()

	var (
		acq  stats.Samples
		res  = cellResult{load1: load}
		last time.Time
		n    int64
	)
	for i := range tallies {
		t := &tallies[i]
		acq.Merge(&t.acq)
		n += t.cycles
		res.errs += t.errs
		if res.firstErr == nil {
			res.firstErr = t.firstErr
		}
		if t.lastDone.After(last) {
			last = t.lastDone
		}
	}
	if elapsed := last.Sub(r.warmupEnd); elapsed > 0 {
		res.rate = float64(n) / elapsed.Seconds()
	}
	res.measured = res.rate > 0
	res.p50, res.p99, res.p999 = acq.Quantile(0.50), acq.Quantile(0.99), acq.Quantile(0.999)
	res.cpuUS, res.cpuErr = used.perPair(res.rate), used.err
	return res
}

// work is one worker's loop, bounded by the end of the cell, by ctx and by
// maxIterations.
func (r *cellRun) work(ctx context.Context, id int, l locker, t *tally) {
	var (
		keys      []string
		seq       int
		waitStart time.Time // hot: when this worker began wanting the lock
	)
	hot := []string{r.prefix + ":hot"}
	for range maxIterations {
		now := time.Now()
		if !now.Before(r.end) || ctx.Err() != nil {
			return
		}
		if r.s.hot {
			if waitStart.IsZero() {
				waitStart = now
			}
			granted, done, err := r.attempt(ctx, l, hot)
			switch {
			case err != nil:
				t.fail(err)
				waitStart = time.Time{}
				pause(ctx, errorPause)
			case granted:
				if !waitStart.Before(r.warmupEnd) {
					t.acq.Add(done.Sub(waitStart), 1)
					t.cycles++
					t.lastDone = time.Now()
				}
				waitStart = time.Time{}
			}
			continue
		}

		keys = keys[:0]
		for range r.batch {
			seq++
			keys = append(keys, r.prefix+":"+strconv.Itoa(id)+":"+strconv.Itoa(seq))
		}
		acquired, err := r.cycle(ctx, l, keys)
		if err != nil {
			t.fail(err)
			pause(ctx, errorPause)
			continue
		}
		if !now.Before(r.warmupEnd) {
			t.acq.Add(acquired.Sub(now), len(keys))
			t.cycles += int64(len(keys))
			t.lastDone = time.Now()
		}
	}
}

// cycle acquires and releases keys, all fresh. It returns when the acquire
// completed.
func (r *cellRun) cycle(ctx context.Context, l locker, keys []string) (acquired time.Time, err error) {
	n, err := l.acquire(ctx, keys)
	acquired = time.Now()
	if err == nil && n != len(keys) {
		err = fmt.Errorf("%w (%d of %d granted)", errRefused, n, len(keys))
	}
	if n > 0 {
		err = errors.Join(err, l.release(ctx))
	}
	return acquired, err
}

// attempt makes one try for the hot key and, if granted, releases it at
// once. done is when the grant arrived.
func (r *cellRun) attempt(ctx context.Context, l locker, key []string) (granted bool, done time.Time, err error) {
	n, err := l.acquire(ctx, key)
	done = time.Now()
	if err != nil || n == 0 {
		return false, done, err
	}
	return true, done, l.release(ctx)
}

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
