package tests

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// lockWaiters is INFO clients' lock_waiters on addr: the LOCK ... WAITs queued there.
func lockWaiters(addr string) (int, error) {
	v, err := call(addr, "INFO", "clients")
	if err != nil {
		return 0, err
	}
	s, _ := v.(string)
	for line := range strings.SplitSeq(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "lock_waiters" {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO clients has no lock_waiters: %q", s)
}

// waitLockWaiters waits until addr queues want LOCK ... WAITs.
func waitLockWaiters(t *testing.T, addr string, want int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, func() error {
		got, err := lockWaiters(addr)
		if err == nil && got != want {
			err = fmt.Errorf("%d lock waiters on %s, want %d", got, addr, want)
		}
		return err
	})
}

// tokenOf parses an integer reply.
func tokenOf(reply []byte) (int64, bool) {
	s := string(reply)
	if !strings.HasPrefix(s, ":") || !strings.HasSuffix(s, "\r\n") {
		return 0, false
	}
	t, err := strconv.ParseInt(s[1:len(s)-2], 10, 64)
	return t, err == nil
}

// LOCK ... WAIT sent through the followers queues on the leader, in the order the waiters came:
// the holder's UNLOCK and then each grantee's hands the lock to the next, with growing tokens
// and never two holders at once (issue #15 item 3).
func TestClusterLockWaitFIFOThroughFollowers(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	fs := c.followers()
	holder, err := dialRESP(l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	reply, err := holder.do("LOCK", "fifo", "60000", "OWNER", "holder")
	tok, ok := tokenOf(reply)
	if err != nil || !ok {
		t.Fatalf("LOCK = %q, %v", reply, err)
	}
	const waiters = 20
	type grant struct {
		i     int
		token int64
		err   error
	}
	grants := make(chan grant, waiters)
	for i := range waiters {
		via := fs[i%len(fs)]
		wc, err := dialRESP(via.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer wc.Close()
		wc.timeout = 30 * time.Second
		go func() {
			reply, err := wc.do("LOCK", "fifo", "60000", "OWNER", fmt.Sprint("w", i), "WAIT", "30000")
			tok, ok := tokenOf(reply)
			if err == nil && !ok {
				err = fmt.Errorf("LOCK WAIT through %s = %q", via.id, reply)
			}
			if err == nil {
				if reply, err = wc.do("UNLOCK", "fifo", strconv.FormatInt(tok, 10)); err == nil && string(reply) != ":1\r\n" {
					err = fmt.Errorf("UNLOCK = %q", reply)
				}
			}
			grants <- grant{i, tok, err}
		}()
		waitLockWaiters(t, l.addr, i+1)
	}
	if reply, err := holder.do("UNLOCK", "fifo"); err != nil || string(reply) != ":1\r\n" {
		t.Fatalf("holder's UNLOCK = %q, %v", reply, err)
	}
	var all []grant
	for range waiters {
		var g grant
		select {
		case g = <-grants:
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d waiters were granted", len(all), waiters)
		}
		if g.err != nil {
			t.Fatalf("waiter %d: %v", g.i, g.err)
		}
		all = append(all, g)
	}
	// The grants' order is their tokens' (the goroutines may report them in another order): the
	// queue's, each token above the one before and the holder's.
	slices.SortFunc(all, func(a, b grant) int { return cmp.Compare(a.token, b.token) })
	var order []int
	prev := tok
	for _, g := range all {
		if g.token <= prev {
			t.Errorf("waiter %d got token %d after %d: tokens must grow", g.i, g.token, prev)
		}
		prev = g.token
		order = append(order, g.i)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want the queue's order 0..%d", order, waiters-1)
		}
	}
	c.digests()
}

// queueWaiters sends a LOCK key 60000 WAIT 30000 through each of vias in turn, each queued on the
// leader l before the next is sent, and returns where each one's reply comes.
func queueWaiters(t *testing.T, l *node, vias []*node, key string) []chan string {
	t.Helper()
	answers := make([]chan string, len(vias))
	for i, via := range vias {
		wc, err := dialRESP(via.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { wc.Close() })
		wc.timeout = 40 * time.Second
		answers[i] = make(chan string, 1)
		go func() {
			reply, err := wc.do("LOCK", key, "60000", "WAIT", "30000")
			if err != nil {
				answers[i] <- "read error: " + err.Error()
				return
			}
			answers[i] <- string(reply)
		}()
		waitLockWaiters(t, l.addr, i+1)
	}
	return answers
}

// Waiters keep their places across a leadership change (issue 32 item 8): LOCK ... WAITs queued
// on the leader, directly and through the followers, wait on through a leader transfer, and the
// new leader grants them in the order they queued, one per release.
func TestClusterLockWaitLeaderChange(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	fs := c.followers()
	v, err := call(l.addr, "LOCK", "lc", "60000", "OWNER", "holder")
	holder, ok := v.(int64)
	if err != nil || !ok {
		t.Fatalf("LOCK = %v, %v", v, err)
	}
	vias := []*node{l, fs[0], fs[1]}
	answers := queueWaiters(t, l, vias, "lc")
	if v, err := call(l.addr, "RAFT", "TRANSFER", fs[0].id); err != nil || v != "OK" {
		t.Fatalf("RAFT TRANSFER: %v, %v", v, err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if nl := c.leader(); nl == l {
			return fmt.Errorf("%s still leads", l.id)
		}
		return nil
	})
	release := func(token string) {
		t.Helper()
		if v, err := call(c.leader().addr, "UNLOCK", "lc", token); err != nil || v != int64(1) {
			t.Fatalf("UNLOCK lc %s through the new leader = %v, %v", token, v, err)
		}
	}
	release(strconv.FormatInt(holder, 10))
	var last int64
	for i := range vias {
		select {
		case a := <-answers[i]:
			tok, ok := tokenOf([]byte(a))
			if !ok || tok <= last {
				t.Fatalf("waiter %d (via %s) got %q after token %d, want the next grant", i, vias[i].id, a, last)
			}
			last = tok
			release(strconv.FormatInt(tok, 10))
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d (via %s) was not granted after the leader changed", i, vias[i].id)
		}
	}
}

// A follower's waiters keep their places when the leader dies (kill -9): the follower goes on
// waiting for them at their place in its own copy of the queue, and the new leader serves them in
// order as the holder's lease runs out and each releases.
func TestClusterLockWaitLeaderKilled(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	fs := c.followers()
	if v, err := call(l.addr, "LOCK", "lk", "3000"); err != nil {
		t.Fatalf("LOCK = %v, %v", v, err)
	}
	vias := []*node{fs[0], fs[1], fs[0]}
	answers := queueWaiters(t, l, vias, "lk")
	l.kill9()
	var last int64
	for i := range vias {
		select {
		case a := <-answers[i]:
			tok, ok := tokenOf([]byte(a))
			if !ok || tok <= last {
				t.Fatalf("waiter %d (via %s) got %q after token %d, want the next grant", i, vias[i].id, a, last)
			}
			last = tok
			if v, err := call(vias[i].addr, "UNLOCK", "lk", strconv.FormatInt(tok, 10)); err != nil || v != int64(1) {
				t.Fatalf("UNLOCK of waiter %d's lock = %v, %v", i, v, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("waiter %d (via %s) was not granted after the leader died", i, vias[i].id)
		}
	}
}
