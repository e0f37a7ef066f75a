package main

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

func TestMemoryLimitOption(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args             []string
		env              string // GOMEMLIMIT
		want             int64
		wantSet, wantGov bool
	}{
		{nil, "", defaultMemoryLimit, true, true},
		{nil, "1GiB", 0, false, false}, // auto leaves an explicit GOMEMLIMIT alone
		{[]string{"--maxmemory", "400mb"}, "", 500 << 20, true, true},
		{[]string{"--maxmemory", "400mb"}, "1GiB", 0, false, false},
		{[]string{"--memory-limit", "512mb"}, "1GiB", 512 << 20, true, false}, // the flag wins, once
		{[]string{"--memory-limit", "0"}, "", math.MaxInt64, true, false},     // none
		{[]string{"--memory-limit", "AUTO", "--maxmemory", "1gb"}, "", 1<<30 + 1<<28, true, true},
	} {
		o, err := parseOptions(tc.args, getenv)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if got, set, gov := o.goMemoryLimit(tc.env); got != tc.want || set != tc.wantSet || gov != tc.wantGov {
			t.Errorf("%v GOMEMLIMIT=%q: got %d, %v, %v; want %d, %v, %v", tc.args, tc.env, got, set, gov, tc.want, tc.wantSet, tc.wantGov)
		}
	}
	if _, err := parseOptions([]string{"--memory-limit", "lots"}, getenv); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Errorf("--memory-limit lots: err %v, want one naming the flag", err)
	}
}

// The automatic limit is the floor until the live heap needs more, then a quarter above it
// and the runtime's overhead.
func TestAutoLimit(t *testing.T) {
	for _, tc := range []struct {
		floor          int64
		live, overhead uint64
		want           int64
	}{
		{256 << 20, 0, 0, 256 << 20},
		{256 << 20, 200 << 20, 0, 256 << 20},
		{256 << 20, 240 << 20, 0, 300 << 20},
		{256 << 20, 240 << 20, 60 << 20, 360 << 20},
		{256 << 20, 1 << 30, 0, 1<<30 + 1<<28},
		{256 << 20, math.MaxUint64, 0, math.MaxInt64 / 2},
		{256 << 20, math.MaxUint64, math.MaxUint64, math.MaxInt64 / 2},
	} {
		if got := autoLimit(tc.floor, tc.live, tc.overhead); got != tc.want {
			t.Errorf("autoLimit(%d, %d, %d) = %d; want %d", tc.floor, tc.live, tc.overhead, got, tc.want)
		}
	}
}

// The governor sets the limit at once, follows the live heap, and stops on Close (twice is fine).
func TestMemoryGovernor(t *testing.T) {
	var mu sync.Mutex
	var live uint64 = 100 << 20
	var limits []int64
	set := func(l int64) int64 {
		mu.Lock()
		defer mu.Unlock()
		limits = append(limits, l)
		return 0
	}
	get := func() heapState {
		mu.Lock()
		defer mu.Unlock()
		return heapState{live: live}
	}
	g := governMemory(256<<20, time.Millisecond, goRuntime{setLimit: set, read: get, collect: func() {}})
	mu.Lock()
	if len(limits) == 0 || limits[0] != 256<<20 {
		t.Errorf("first limit %v; want 256 MiB at once", limits)
	}
	live = 400 << 20
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		last := limits[len(limits)-1]
		mu.Unlock()
		if last == 500<<20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit %d after the live heap grew to 400 MiB; want 500 MiB", last)
		}
		time.Sleep(time.Millisecond)
	}
	g.Close()
	g.Close()
	mu.Lock()
	n := len(limits)
	mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(limits) != n {
		t.Errorf("the governor set %d limits after Close", len(limits)-n)
	}
}

// TestMemoryGovernorCollectsWhenIdle: a heap that stops allocating after a burst is collected
// once, and the limit follows what that collection found live; a busy heap, or an idle one
// that has not allocated much since, is left to the collector.
func TestMemoryGovernorCollectsWhenIdle(t *testing.T) {
	const mib = 1 << 20
	var mu sync.Mutex
	// A busy fill: 300 MiB live at its last collection (its requests in flight), allocating.
	h := heapState{live: 300 * mib, allocs: 10000 * mib}
	busy := true
	collects := 0
	var limit int64
	rt := goRuntime{
		setLimit: func(l int64) int64 { mu.Lock(); limit = l; mu.Unlock(); return 0 },
		read: func() heapState {
			mu.Lock()
			defer mu.Unlock()
			if busy {
				h.allocs += 50 * mib
			}
			return h
		},
		collect: func() {
			mu.Lock()
			defer mu.Unlock()
			collects++
			h.live = 235 * mib // what the fill left live: the table
		},
	}
	g := governMemory(256*mib, time.Millisecond, rt)
	defer g.Close()
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	if collects != 0 {
		t.Errorf("%d collections while the heap allocates; want none", collects)
	}
	busy = false
	mu.Unlock()
	testutil.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if want := int64(235*mib + 235*mib/4); collects != 1 || limit != want {
			return fmt.Errorf("%d collections, limit %d once idle; want 1 and %d", collects, limit, want)
		}
		return nil
	})
	time.Sleep(50 * time.Millisecond) // still idle, nothing allocated since: no more
	mu.Lock()
	defer mu.Unlock()
	if collects != 1 {
		t.Errorf("%d collections; want 1: an idle heap that allocated nothing since needs none", collects)
	}
}

func TestIdleAfterBurst(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name        string
		before, now heapState
		since       uint64
		want        bool
	}{
		{"idle after 500 MiB", heapState{allocs: 600 * mib}, heapState{live: 235 * mib, allocs: 600 * mib}, 100 * mib, true},
		{"allocating", heapState{allocs: 600 * mib}, heapState{live: 235 * mib, allocs: 602 * mib}, 100 * mib, false},
		{"idle after less than a quarter of live", heapState{allocs: 150 * mib}, heapState{live: 400 * mib, allocs: 150 * mib}, 60 * mib, false},
		{"idle after less than 64 MiB", heapState{allocs: 50 * mib}, heapState{live: 10 * mib, allocs: 50 * mib}, 0, false},
	} {
		if got := idleAfterBurst(c.before, c.now, c.since); got != c.want {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}
