package main

import (
	"errors"
	"sync/atomic"
	"time"
)

// testClock is the clock a node times leases and converts absolute expiry times with. It is the
// real clock shifted by an offset that only a node started with --test-clock lets a test move
// (DEBUG CLOCK-SHIFT), to inject skew and jumps: OS tools such as libfaketime do not reach Go
// binaries. Shifting keeps Go's monotonic reading, so timers see the jump too.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Shift moves the clock by d and returns the total offset.
func (c *testClock) Shift(d time.Duration) time.Duration {
	return time.Duration(c.offset.Add(int64(d)))
}

// errNoTestClock is run's error for --test-clock on a production build.
var errNoTestClock = errors.New("--test-clock: this binary was built without the raftlock_testclock tag; " +
	"the test clock (DEBUG CLOCK-SHIFT) exists only in test builds (go build -tags raftlock_testclock ./cmd/raftlock)")

// errNoTestDiskFaults is run's error for --test-disk-faults on a production build.
var errNoTestDiskFaults = errors.New("--test-disk-faults: this binary was built without the raftlock_testclock tag; " +
	"the injected disk failure (SIGUSR2) exists only in test builds (go build -tags raftlock_testclock ./cmd/raftlock)")
