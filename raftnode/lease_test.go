package raftnode

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// goneAt polls until key leaves n's table and returns when it was first seen gone.
func goneAt(t *testing.T, n *testNode, key string, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	testutil.WaitFor(t, timeout, func() error {
		if held(n, key) {
			return fmt.Errorf("%s still held on %s: %s", key, n.id, n.statsLine())
		}
		at = time.Now()
		return nil
	})
	return at
}

// A lease ends at its deadline on the node's clock, not before, and only through a committed
// Expire. The clock is injected: the bounds are exact, not real-time guesses.
func TestLeaseExpires(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	settle(t, []*testNode{n}) // the leader's own first entries are not the test's
	before := n.Stats()
	r := mustLock(t, n, "k", "o", 100)
	if r.LeaseMs != 100 || r.LeaseRev != uint64(r.Token) {
		t.Fatalf("grant = %+v, want lease 100 ms set by the grant's own entry", r)
	}
	if s := n.Stats(); s.Leases != 1 {
		t.Fatalf("leases armed = %d, want 1", s.Leases)
	}
	clock.Advance(99 * time.Millisecond)
	n.locks.ExpireDue()
	if !held(n, "k") {
		t.Fatalf("lease of 100 ms ended after 99 ms: %s", n.statsLine())
	}
	clock.Advance(time.Millisecond)
	n.locks.Wake()
	goneAt(t, n, "k", 2*time.Second)
	// Removal went through a committed Expire.
	waitExpired(t, n, 1)
	s := n.Stats()
	if s.Expired != 1 || s.Leases != 0 || s.Locks != 0 || s.LastIndex != before.LastIndex+2 {
		t.Fatalf("after expiry: expired %d, leases %d, locks %d, last index %d -> %d; want 1, 0, 0 and two entries (grant, expire): %s",
			s.Expired, s.Leases, s.Locks, before.LastIndex, s.LastIndex, logEntries(t, n, before.LastIndex+1, s.LastIndex))
	}
}

// A renewal moves the deadline to renewal + lease: the first deadline passes with the lock held,
// and the lock ends at the new one.
func TestLeaseRenewKeepsLockAlive(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	const lease = 400
	r := mustLock(t, n, "k", "o", lease)
	clock.Advance(150 * time.Millisecond)
	rn, err := propose(t.Context(), n, renewCmd("k", r.Token, lease))
	if err != nil || rn.Status != fsm.StatusRenewed || rn.Token != r.Token || rn.LeaseRev <= r.LeaseRev {
		t.Fatalf("renew = %+v, %v; want renewed, same token %d, newer lease rev", rn, err, r.Token)
	}
	// Past the first lease's deadline (grant + 400 ms): still held, with the renewal's lease.
	clock.Advance(350 * time.Millisecond)
	n.locks.ExpireDue()
	if l, _, ok := n.LocalLookup([]byte("k")); !ok || l.LeaseRev != rn.LeaseRev {
		t.Fatalf("renewed lock gone or changed past the original deadline: %+v, %v (%s)", l, ok, n.statsLine())
	}
	// 1 ms before the renewal's deadline: held; at it: gone.
	clock.Advance((lease - 350 - 1) * time.Millisecond)
	n.locks.ExpireDue()
	if !held(n, "k") {
		t.Fatalf("renewed lease of %d ms ended %d ms after the renewal", lease, lease-1)
	}
	clock.Advance(time.Millisecond)
	n.locks.Wake()
	goneAt(t, n, "k", 2*time.Second)
	waitExpired(t, n, 1)
}

// TestLeaseInjectedClock drives lease timers with Config.Now alone: real time passing does not end
// a lease, the injected clock passing its deadline does.
func TestLeaseInjectedClock(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })

	r := mustLock(t, n, "k", "o", 100)
	if _, rem, ok := n.LocalLookup([]byte("k")); !ok || rem != 100*time.Millisecond {
		t.Fatalf("LocalLookup = %v, %v; want 100 ms left on the frozen clock", rem, ok)
	}
	// Three times the lease in real time, while the injected clock stands still: the loop (which
	// sleeps min(time left, 1 s)) checks a few times and finds nothing due.
	time.Sleep(300 * time.Millisecond)
	if !held(n, "k") || n.Stats().Expired != 0 {
		t.Fatalf("lease ended while the injected clock stood still: %s", n.statsLine())
	}

	clock.Advance(99 * time.Millisecond)
	n.locks.Wake()
	n.locks.ExpireDue() // one deterministic pass, besides the loop's own
	if _, rem, ok := n.LocalLookup([]byte("k")); !ok || rem != time.Millisecond {
		t.Fatalf("1 ms before the deadline: held %v, %v left; want held, 1 ms", ok, rem)
	}

	clock.Advance(2 * time.Millisecond)
	goneAt(t, n, "k", time.Second)
	waitExpired(t, n, 1)

	// A long lease: the loop sleeps its full second. A wake-up after the jump ends it at once.
	r2 := mustLock(t, n, "k2", "o", 10_000)
	if r2.Token <= r.Token {
		t.Fatalf("token %d after %d", r2.Token, r.Token)
	}
	clock.Advance(10*time.Second - time.Millisecond)
	n.locks.ExpireDue()
	if !held(n, "k2") {
		t.Fatal("10 s lease ended 1 ms early")
	}
	clock.Advance(time.Millisecond)
	n.locks.Wake()
	start := time.Now()
	goneAt(t, n, "k2", 400*time.Millisecond)
	t.Logf("woken expiry took %v", time.Since(start))

	// A jump with no wake-up: the loop is in its full 1 s sleep (5 s left when it last looked)
	// and notices the jump when that sleep ends.
	mustLock(t, n, "k3", "o", 5000)
	clock.Advance(5 * time.Second)
	start = time.Now()
	goneAt(t, n, "k3", 1500*time.Millisecond)
	t.Logf("noticed the clock jump after %v without a wake-up", time.Since(start))
	waitExpired(t, n, 3)
}

func TestLeaseRenewInjectedClock(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	r := mustLock(t, n, "k", "o", 1000)

	clock.Advance(600 * time.Millisecond)
	rn, err := propose(t.Context(), n, renewCmd("k", r.Token, 1000))
	if err != nil || rn.Status != fsm.StatusRenewed {
		t.Fatalf("renew = %+v, %v", rn, err)
	}
	// A late Expire of the first lease (as from a leader that popped it before the renew
	// applied) must not end the renewed one, nor disarm its timer.
	ex, err := propose(t.Context(), n, fsm.Command{Kind: fsm.KindExpire, Key: []byte("k"), Token: r.Token, LeaseRev: r.LeaseRev})
	if err != nil || ex.Status != fsm.StatusExpired || ex.Existed {
		t.Fatalf("stale expire = %+v, %v; want expired, existed=false", ex, err)
	}
	if s := n.Stats(); s.Leases != 1 || s.Locks != 1 {
		t.Fatalf("after stale expire: %s; want the lock and its timer kept", n.statsLine())
	}

	clock.Advance(500 * time.Millisecond) // 1100 ms after the grant, 500 ms after the renew
	n.locks.Wake()
	n.locks.ExpireDue()
	if _, rem, ok := n.LocalLookup([]byte("k")); !ok || rem != 500*time.Millisecond {
		t.Fatalf("past the first deadline: held %v, %v left; want held with 500 ms left", ok, rem)
	}
	clock.Advance(501 * time.Millisecond)
	n.locks.Wake()
	goneAt(t, n, "k", time.Second)
	waitExpired(t, n, 1)
	if s := n.Stats(); s.Leases != 0 {
		t.Fatalf("after the renewed deadline: %s; want expired 1, no timers", n.statsLine())
	}
}

// TestLeaseTimersFollowTable checks the timers stay in step with the table: a release or a grant
// without a lease disarms, a renew by the wrong token changes nothing.
func TestLeaseTimersFollowTable(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	ctx := t.Context()

	r := mustLock(t, n, "a", "o", 1000)
	if got, err := propose(ctx, n, renewCmd("a", r.Token+1, 5000)); err != nil || got.Status != fsm.StatusNotFound {
		t.Fatalf("renew with wrong token = %+v, %v; want not-found", got, err)
	}
	if _, rem, _ := n.LocalLookup([]byte("a")); rem != time.Second {
		t.Fatalf("a renew that did not apply moved the timer: %v left, want 1s", rem)
	}
	if _, err := propose(ctx, n, releaseCmd("a", r.Token)); err != nil {
		t.Fatal(err)
	}
	if s := n.Stats(); s.Leases != 0 {
		t.Fatalf("release left %d timers armed", s.Leases)
	}

	mustLock(t, n, "b", "o", 1000)
	// SET b o (no lease) by the same owner: keeps the token, drops the lease.
	got, err := propose(ctx, n, fsm.Command{Kind: fsm.KindGrant, Key: []byte("b"), Owner: []byte("o"), Match: fsm.Match{Kind: fsm.MatchAny}})
	if err != nil || got.LeaseMs != 0 {
		t.Fatalf("SET without lease = %+v, %v", got, err)
	}
	if s := n.Stats(); s.Leases != 0 {
		t.Fatalf("a grant without a lease left %d timers armed", s.Leases)
	}

	// SET c ... KEEPTTL by a new owner keeps the running lease: same deadline, new token.
	rc := mustLock(t, n, "c", "o", 1000)
	clock.Advance(400 * time.Millisecond)
	got, err = propose(ctx, n, fsm.Command{Kind: fsm.KindGrant, Key: []byte("c"), Owner: []byte("p"), KeepLease: true, Match: fsm.Match{Kind: fsm.MatchAny}})
	if err != nil || got.Token == rc.Token || got.LeaseRev != rc.LeaseRev {
		t.Fatalf("KEEPTTL grant = %+v, %v; want a new token and lease rev %d", got, err, rc.LeaseRev)
	}
	if _, rem, _ := n.LocalLookup([]byte("c")); rem != 600*time.Millisecond {
		t.Fatalf("KEEPTTL: %v left, want the same lease's 600 ms", rem)
	}
	clock.Advance(600 * time.Millisecond)
	n.locks.Wake()
	goneAt(t, n, "c", time.Second)
	waitExpired(t, n, 1) // the KEEPTTL lease, ended under its new token
}

// logEntries describes n's log entries from..to: each one's type and, for a command entry, the
// kinds of the commands it carries.
func logEntries(t *testing.T, n *testNode, from, to uint64) string {
	t.Helper()
	var b strings.Builder
	for i := from; i <= to; i++ {
		var l raft.Log
		if err := n.stores.Log.GetLog(i, &l); err != nil {
			fmt.Fprintf(&b, " [%d: %v]", i, err)
			continue
		}
		fmt.Fprintf(&b, " [%d: %s", i, l.Type)
		if l.Type == raft.LogCommand {
			cmds, _, err := fsm.DecodeEntries(nil, nil, l.Data)
			for _, c := range cmds {
				fmt.Fprintf(&b, " %v %q", c.Kind, c.Key)
			}
			if err != nil {
				fmt.Fprintf(&b, " (%v)", err)
			}
		}
		b.WriteString("]")
	}
	return b.String()
}

// A lease loop round whose timers are all stale (the lease was renewed to end later) proposes
// nothing and asks no quorum: a renewal costs the leader no leadership check when its old
// deadline passes.
func TestStaleTimerRoundIsFree(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	r := mustLock(t, n, "k", "o", 100)
	if rn, err := propose(t.Context(), n, renewCmd("k", r.Token, 10_000)); err != nil || rn.Status != fsm.StatusRenewed {
		t.Fatalf("renew = %+v, %v", rn, err)
	}
	settle(t, []*testNode{n})
	before := n.Stats()
	clock.Advance(200 * time.Millisecond) // past the grant's timer, long before the renewal's
	n.locks.ExpireDue()
	after := n.Stats()
	if !held(n, "k") {
		t.Fatal("the renewed lock ended at its first lease's deadline")
	}
	if after.LastIndex != before.LastIndex || after.VerifyRounds != before.VerifyRounds {
		t.Errorf("a round of stale timers: last index %d -> %d, verify rounds %d -> %d; want both unchanged",
			before.LastIndex, after.LastIndex, before.VerifyRounds, after.VerifyRounds)
	}
}
