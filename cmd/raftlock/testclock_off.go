//go:build !raftlock_testclock

package main

// testClockBuilt: a production build, which refuses --test-clock (and RAFTLOCK_TEST_CLOCK):
// a clock any client could shift would let it expire every lease.
const testClockBuilt = false
