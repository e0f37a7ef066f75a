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

// TestLockKindsThroughFollower: on a 3-node cluster, a client of a follower takes a share, a
// permit and an MLOCK; their tokens are the leader's (VALIDATE on another node agrees); the
// holder hears lock-lost when a share's lease runs out, also after the leader is killed while it
// is held; SEMRELEASE through the follower is its own release (no push).
func TestLockKindsThroughFollower(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	fs := c.others(l)
	f, other := fs[0], fs[1]
	h := mustDial(t, f.addr)
	if got, err := h.do("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	token := func(got []byte, err error) string {
		t.Helper()
		if err != nil || !strings.HasPrefix(string(got), ":") {
			t.Fatalf("a grant through the follower: %q, %v", got, err)
		}
		return strings.TrimSpace(string(got[1:]))
	}
	permit := token(h.do("SEMACQUIRE", "pool", "2", "60000"))
	check := mustDial(t, other.addr)
	if got, _ := check.do("VALIDATE", "pool", permit); string(got) != ":1\r\n" {
		t.Fatalf("VALIDATE of the permit on %s = %q", other.id, got)
	}
	if got, _ := h.do("SEMRELEASE", "pool", permit); string(got) != ":1\r\n" {
		t.Fatalf("SEMRELEASE through the follower = %q", got)
	}
	time.Sleep(200 * time.Millisecond) // the follower applies the release after the reply
	expectQuiet(t, h)

	got, err := h.do("MLOCK", "60000", "a", "b")
	if err != nil || !strings.HasPrefix(string(got), "*2\r\n:") {
		t.Fatalf("MLOCK through the follower: %q, %v", got, err)
	}

	share := token(h.do("LOCK", "doc", "300", "SHARED"))
	tok, _ := strconv.ParseInt(share, 10, 64)
	expectPush(t, h, lockLost("doc", tok, "expired"))

	share = token(h.do("LOCK", "doc", "3000", "SHARED"))
	tok, _ = strconv.ParseInt(share, 10, 64)
	l.kill9()
	expectPush(t, h, lockLost("doc", tok, "expired"))
}

// TestLockKindsLostReasons: a share released by another connection (with its token) is
// "deleted" for its holder, a permit flushed by FLUSHDB "flushed"; a subscriber of the key's lock
// channel hears both.
func TestLockKindsLostReasons(t *testing.T) {
	n := startNode(t, t.TempDir())
	h := mustDial(t, n.addr)
	if got, err := h.do("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	got, _ := h.do("LOCK", "doc", "60000", "SHARED")
	share := strings.TrimSpace(string(got[1:]))
	tok, _ := strconv.ParseInt(share, 10, 64)
	other := mustDial(t, n.addr)
	if got, _ := other.do("UNLOCK", "doc", share); string(got) != ":1\r\n" {
		t.Fatalf("UNLOCK of another's share = %q", got)
	}
	expectPush(t, h, lockLost("doc", tok, "deleted"))

	got, _ = h.do("SEMACQUIRE", "pool", "3", "60000")
	tok, _ = strconv.ParseInt(strings.TrimSpace(string(got[1:])), 10, 64)
	if got, _ := other.do("FLUSHDB"); string(got) != "+OK\r\n" {
		t.Fatalf("FLUSHDB = %q", got)
	}
	expectPush(t, h, lockLost("pool", tok, "flushed"))
	if got, _ := other.do("SEMACQUIRE", "pool", "1", "1000"); !strings.HasPrefix(string(got), ":") {
		t.Fatalf("after FLUSHDB the semaphore is gone, any count may take it: %q", got)
	}
}
