package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLockKindsOnANode: on a real node, a semaphore permit whose holder went silent comes back by
// its committed expiry, and its holder hears lock-lost; a lock taken with DELAY keeps its key
// refused for the delay after its lease expired (not after an UNLOCK), LOCKINFO shows the delay
// left, and LOCK ... WAIT gets the key once the delay ends.
func TestLockKindsOnANode(t *testing.T) {
	n := startNode(t, t.TempDir())
	holder := mustDial(t, n.addr)
	if got, err := holder.do("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	got, err := holder.do("SEMACQUIRE", "pool", "1", "300")
	if err != nil || !strings.HasPrefix(string(got), ":") {
		t.Fatalf("SEMACQUIRE: %q, %v", got, err)
	}
	tok, _ := strconv.ParseInt(strings.TrimSpace(string(got[1:])), 10, 64)
	other := mustDial(t, n.addr)
	if got, _ := other.do("SEMACQUIRE", "pool", "1", "1000"); string(got) != "$-1\r\n" {
		t.Fatalf("the one permit taken: SEMACQUIRE = %q, want nil", got)
	}
	expectPush(t, holder, lockLost("pool", tok, "expired"))
	if got, _ := other.do("SEMACQUIRE", "pool", "1", "1000", "WAIT", "5000"); !strings.HasPrefix(string(got), ":") {
		t.Fatalf("the permit back after its lease: SEMACQUIRE = %q", got)
	}

	// A release starts no delay.
	got, _ = other.do("LOCK", "k", "60000", "DELAY", "1500")
	if got, _ := other.do("UNLOCK", "k", strings.TrimSpace(string(got[1:]))); string(got) != ":1\r\n" {
		t.Fatalf("UNLOCK = %q", got)
	}
	if got, _ := other.do("LOCK", "k", "200", "DELAY", "1500"); !strings.HasPrefix(string(got), ":") {
		t.Fatalf("LOCK right after an UNLOCK with a delay = %q, want a token", got)
	}
	// An expiry does: within it LOCK is refused and LOCKINFO says what is left.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ = other.do("LOCKINFO", "k")
		if strings.Contains(string(got), "delay") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lock-delay after the lease: LOCKINFO = %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got, _ := other.do("LOCK", "k", "1000"); string(got) != "$-1\r\n" {
		t.Fatalf("LOCK within the delay = %q, want nil", got)
	}
	if got, _ := other.do("GET", "k"); string(got) != "$-1\r\n" {
		t.Fatalf("GET within the delay = %q: the key expired", got)
	}
	start := time.Now()
	if got, _ := other.do("LOCK", "k", "1000", "WAIT", "10000"); !strings.HasPrefix(string(got), ":") {
		t.Fatalf("LOCK ... WAIT through the delay = %q", got)
	}
	if waited := time.Since(start); waited > 9*time.Second {
		t.Fatalf("LOCK ... WAIT waited %v for a delay of 1.5 s", waited)
	}
}
