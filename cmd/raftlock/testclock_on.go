//go:build raftlock_testclock

package main

// testClockBuilt: this is a test build (tag raftlock_testclock), so --test-clock may be used.
const testClockBuilt = true
