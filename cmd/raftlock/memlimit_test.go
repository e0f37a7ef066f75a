package main

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"
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

// The automatic limit is the floor until the live heap needs more, then a quarter above it.
func TestAutoLimit(t *testing.T) {
	for _, tc := range []struct {
		floor int64
		live  uint64
		want  int64
	}{
		{256 << 20, 0, 256 << 20},
		{256 << 20, 200 << 20, 256 << 20},
		{256 << 20, 240 << 20, 300 << 20},
		{256 << 20, 1 << 30, 1<<30 + 1<<28},
		{256 << 20, math.MaxUint64, math.MaxInt64 / 2},
	} {
		if got := autoLimit(tc.floor, tc.live); got != tc.want {
			t.Errorf("autoLimit(%d, %d) = %d; want %d", tc.floor, tc.live, got, tc.want)
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
	get := func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return live
	}
	g := governMemory(256<<20, time.Millisecond, set, get)
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
