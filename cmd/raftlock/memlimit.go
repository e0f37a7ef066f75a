package main

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"
)

// defaultMemoryLimit is the floor of the soft memory limit of a node given neither
// --memory-limit, --maxmemory nor GOMEMLIMIT: a million small locks live in about 230 MB of
// heap, and without a limit the Go runtime lets the heap grow to twice its live data between
// collections (GOGC=100), so RSS would be twice what the table needs.
const defaultMemoryLimit = 256 << 20

// memoryHeadroom is the share of the live heap that the automatic limit leaves above it: a
// limit at or under the live heap would have the collector run without pause (the fill of a
// million locks stalled for seconds so), one a quarter above it costs a collection per quarter
// of the live heap allocated, as GOGC=25 would.
const memoryHeadroom = 4 // live/4

// memoryGovernEvery is how often the automatic limit follows the live heap.
const memoryGovernEvery = 500 * time.Millisecond

// goMemoryLimit says how to set the Go runtime's soft memory limit: an explicit --memory-limit
// is set once (limit; 0: none, the runtime's default); auto leaves an explicit GOMEMLIMIT (env)
// alone (set and govern false), else governs it (govern true): the limit follows the live heap
// with a quarter of headroom, never under floor: maxmemory + 25% when --maxmemory is set (the
// heap the server lets grow before it refuses new keys, plus room to collect), else
// defaultMemoryLimit.
func (o options) goMemoryLimit(envGOMEMLIMIT string) (limit int64, set, govern bool) {
	switch {
	case !o.memoryLimitAuto && o.memoryLimit == 0:
		return math.MaxInt64, true, false // none: the runtime's own default
	case !o.memoryLimitAuto:
		return int64(min(o.memoryLimit, math.MaxInt64)), true, false
	case envGOMEMLIMIT != "":
		return 0, false, false
	case o.maxMemory > 0:
		return int64(min(o.maxMemory+o.maxMemory/4, math.MaxInt64/2)), true, true
	}
	return defaultMemoryLimit, true, true
}

// autoLimit is the automatic soft memory limit for a live heap of live bytes.
func autoLimit(floor int64, live uint64) int64 {
	live = min(live, math.MaxInt64/2) // no overflow below
	return max(floor, min(int64(live+live/memoryHeadroom), math.MaxInt64/2))
}

// liveHeap is the heap the last collection found live (runtime/metrics).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// memoryGovernor keeps the soft memory limit at autoLimit(floor, live heap), every interval,
// until Close.
type memoryGovernor struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// governMemory starts a memoryGovernor: set is debug.SetMemoryLimit, live liveHeap (tests pass
// their own).
func governMemory(floor int64, every time.Duration, set func(int64) int64, live func() uint64) *memoryGovernor {
	g := &memoryGovernor{stop: make(chan struct{})}
	set(autoLimit(floor, live()))
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				set(autoLimit(floor, live()))
			}
		}
	}()
	return g
}

// Close stops the governor and waits for it; the limit stays where it was. Idempotent.
func (g *memoryGovernor) Close() {
	g.once.Do(func() { close(g.stop) })
	g.wg.Wait()
}

// setMemoryLimit applies o's memory limit (goMemoryLimit) and returns what stops its governor
// (a no-op when none runs).
func setMemoryLimit(o options, envGOMEMLIMIT string) (stop func()) {
	limit, set, govern := o.goMemoryLimit(envGOMEMLIMIT)
	switch {
	case govern:
		return governMemory(limit, memoryGovernEvery, debug.SetMemoryLimit, liveHeap).Close
	case set:
		debug.SetMemoryLimit(limit)
	}
	return func() {}
}

// memoryLimitFlag is --memory-limit as given, for the start-up log.
func (o options) memoryLimitFlag() string {
	if o.memoryLimitAuto {
		return "auto"
	}
	return strconv.FormatUint(o.memoryLimit, 10)
}
