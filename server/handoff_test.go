package server

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// waitLockWaiters waits until s queues want LOCK ... WAITs.
func waitLockWaiters(t *testing.T, s *Server, want int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("lock waiters", func() bool { return s.lockWaiters() == want }))
}

// A lease that runs out goes to the queued waiter in the Expire's own entry: a client that keeps
// trying LOCK without WAIT meanwhile never gets in between.
func TestLockWaitExpiryHandsOffWithoutGap(t *testing.T) {
	addr, s := startServer(t, nil)
	holder, waiter, barger := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
	if r := holder.do("LOCK", "k", "300"); !strings.HasPrefix(r, ":") {
		t.Fatalf("LOCK = %q", r)
	}
	got := make(chan string, 1)
	go func() { got <- waiter.do("LOCK", "k", "10000", "WAIT", "4000") }()
	waitLockWaiters(t, s, 1)
	deadline := time.After(4500 * time.Millisecond)
	for tries := 0; ; tries++ {
		select {
		case r := <-got:
			if !strings.HasPrefix(r, ":") {
				t.Fatalf("the waiter got %q, want the lock once the lease ended", r)
			}
			t.Logf("the barger tried %d times", tries)
			return
		case <-deadline:
			t.Fatal("the waiter got no answer")
		default:
		}
		if r := barger.do("LOCK", "k", "10000"); r != "$-1\r\n" {
			t.Fatalf("a LOCK without WAIT got %q while a waiter was queued: the expiry left a gap", r)
		}
	}
}

// A waiter whose client hangs up leaves the queue; the next one gets the lock at the release.
func TestLockWaitSkipsGoneWaiter(t *testing.T) {
	addr, s := startServer(t, nil)
	holder, gone, next := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
	if r := holder.do("LOCK", "k", "10000"); !strings.HasPrefix(r, ":") {
		t.Fatalf("LOCK = %q", r)
	}
	go func() {
		gone.nc.Write([]byte(multibulk("LOCK", "k", "10000", "OWNER", "gone", "WAIT", "10000")))
	}()
	waitLockWaiters(t, s, 1)
	got := make(chan string, 1)
	go func() { got <- next.do("LOCK", "k", "10000", "OWNER", "next", "WAIT", "10000") }()
	waitLockWaiters(t, s, 2)
	gone.nc.Close()
	waitLockWaiters(t, s, 1)
	if r := holder.do("UNLOCK", "k"); r != ":1\r\n" {
		t.Fatalf("UNLOCK = %q", r)
	}
	select {
	case r := <-got:
		if !strings.HasPrefix(r, ":") {
			t.Fatalf("the next waiter got %q", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter after a gone one was never granted")
	}
	if r := holder.do("LOCKINFO", "k"); !strings.Contains(r, "next") {
		t.Errorf("LOCKINFO = %q, want held by next", r)
	}
}

// A key freed by a change that is neither a release nor an expiry (the last pop of a list, a
// FLUSHDB) still goes to its queued waiter.
func TestLockWaitAfterOtherFrees(t *testing.T) {
	addr, s := startServer(t, nil)
	c, waiter := dialRaw(t, addr), dialRaw(t, addr)
	for _, free := range [][]string{{"LPOP", "k"}, {"FLUSHDB"}} {
		if r := c.do("RPUSH", "k", "x"); r != ":1\r\n" {
			t.Fatalf("RPUSH = %q", r)
		}
		got := make(chan string, 1)
		go func() { got <- waiter.do("LOCK", "k", "10000", "WAIT", "4000") }()
		waitLockWaiters(t, s, 1)
		c.do(free...)
		select {
		case r := <-got:
			if !strings.HasPrefix(r, ":") {
				t.Fatalf("after %s the waiter got %q, want the lock", free[0], r)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %s the waiter got no answer", free[0])
		}
		if r := waiter.do("UNLOCK", "k"); r != ":1\r\n" {
			t.Fatalf("UNLOCK = %q", r)
		}
	}
}
