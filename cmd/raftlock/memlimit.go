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
// heap (make bench-scale fills a node with them), and without a limit the Go runtime lets the heap grow to twice its live data between
// collections (GOGC=100), so RSS would be twice what the table needs.
const defaultMemoryLimit = 256 << 20

// memoryHeadroom is the share of the live heap that the automatic limit leaves above it: a
// limit at or under the live heap would have the collector run without pause, stalling the
// node for seconds, one a quarter above it costs a collection per quarter
// of the live heap allocated, as GOGC=25 would.
const memoryHeadroom = 4 // live/4

// memoryGovernEvery is how often the automatic limit follows the live heap.
const memoryGovernEvery = 500 * time.Millisecond

// goMemoryLimit says how to set the Go runtime's soft memory limit: an explicit --memory-limit
// is set once (limit; 0: none, the runtime's default); auto leaves an explicit GOMEMLIMIT (env)
// alone (set and govern false), else governs it (govern true): the limit follows the live heap
// with a quarter of headroom above it and the runtime's overhead (autoLimit), never under
// floor: maxmemory + 25% when --maxmemory is set (the heap the server lets grow before it
// refuses new keys, plus room to collect), else defaultMemoryLimit.
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

// autoLimit is the automatic soft memory limit for a live heap of live bytes and overhead
// bytes of the runtime's other memory that counts against the limit (stacks, GC metadata, the
// unused parts of heap spans): the collector gets a quarter of the live heap to allocate into
// between collections. The overhead counts: with a million locks it is as large as that
// quarter, so a limit without it would leave the collector next to nothing, and it would run
// on every megabyte allocated.
func autoLimit(floor int64, live, overhead uint64) int64 {
	live, overhead = min(live, math.MaxInt64/2), min(overhead, math.MaxInt64/2) // no overflow below
	return max(floor, int64(min(live+live/memoryHeadroom+overhead, math.MaxInt64/2)))
}

// The governor collects once when the node goes idle after a burst of allocation: the
// collector runs only when the heap grows past its goal, so after a burst (the fill of a
// million locks) nothing allocates, no collection comes, and the limit stays where the burst's
// last collection put it: a live heap counted with the burst's requests in flight, above what
// the table alone holds, and RSS stays at its peak until Go's periodic collection (every 2
// minutes). A collection once idle finds the table's
// size, lowers the limit to it and gives the free memory back to the OS.
const (
	// idleAllocs is what a tick may allocate and still count as idle (2 MiB/s at 500 ms).
	idleAllocs = 1 << 20
	// idleBurstMin is the least allocated since the last idle collection that is worth another:
	// and at least a quarter of the live heap, what the limit's headroom lets the collector
	// take by itself, so that a load that comes and goes collects at most twice as often.
	idleBurstMin = 64 << 20
)

// heapState is what the governor reads of the Go heap on each tick.
type heapState struct {
	live     uint64 // bytes the last collection found live
	allocs   uint64 // bytes allocated since the process started
	overhead uint64 // bytes of the runtime's memory counted against the limit, heap objects and free pages aside
}

// readHeap reads heapState from runtime/metrics.
func readHeap() heapState {
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	metrics.Read(s)
	u := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	// What the limit counts is total less released; of it the heap's objects and its free
	// pages (which the collector reuses and the scavenger returns) are what the headroom is for.
	counted := u(2) - min(u(2), u(3))
	return heapState{live: u(0), allocs: u(1), overhead: counted - min(counted, u(4)+u(5))}
}

// goRuntime is what the governor drives: the real runtime's in a node, a test's own in tests.
type goRuntime struct {
	setLimit func(int64) int64 // debug.SetMemoryLimit
	read     func() heapState  // readHeap
	collect  func()            // debug.FreeOSMemory: a full collection that returns free memory to the OS
}

var realRuntime = goRuntime{setLimit: debug.SetMemoryLimit, read: readHeap, collect: debug.FreeOSMemory}

// idleAfterBurst says whether the heap, read as now a tick after before, allocated next to
// nothing meanwhile after allocating, since sinceAllocs, enough to be worth a collection.
func idleAfterBurst(before, now heapState, sinceAllocs uint64) bool {
	return now.allocs-before.allocs < idleAllocs && now.allocs-sinceAllocs >= max(idleBurstMin, now.live/4)
}

// memoryGovernor keeps the soft memory limit at autoLimit of the heap it reads, every interval,
// and collects when the node goes idle after a burst, until Close.
type memoryGovernor struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// governMemory starts a memoryGovernor over rt.
func governMemory(floor int64, every time.Duration, rt goRuntime) *memoryGovernor {
	g := &memoryGovernor{stop: make(chan struct{})}
	last := rt.read()
	rt.setLimit(autoLimit(floor, last.live, last.overhead))
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		since := last.allocs // allocations counted from here for the next idle collection
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			now := rt.read()
			if idleAfterBurst(last, now, since) {
				rt.collect()
				now = rt.read()
				since = now.allocs
			}
			rt.setLimit(autoLimit(floor, now.live, now.overhead))
			last = now
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
		return governMemory(limit, memoryGovernEvery, realRuntime).Close
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
