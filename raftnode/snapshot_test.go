package raftnode

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestSnapshotRestart restarts a node on its stores after a snapshot and more entries: the table
// comes back the same, tokens keep growing, and every lease is armed again for its full length
// from the restart (late, never early), whether it came back through the snapshot or the log.
func TestSnapshotRestart(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Now = clock.Now })
	const lease = 60_000
	ctx := t.Context()

	var maxTok fsm.Token
	leased := map[string]bool{}
	for i := range 50 {
		key := fmt.Sprintf("s%02d", i)
		var ms uint64
		if i%3 == 0 {
			ms = lease
			leased[key] = true
		}
		maxTok = mustLock(t, n, key, "owner-"+key, ms).Token
	}
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	snapIdx := n.Stats().LastSnapshot
	if snapIdx < uint64(maxTok) {
		t.Fatalf("last snapshot index %d, want >= %d", snapIdx, maxTok)
	}
	// After the snapshot: more grants (one leased), releases, a renew; all from the log on restart.
	for i := range 20 {
		maxTok = mustLock(t, n, fmt.Sprintf("l%02d", i), "o", 0).Token
	}
	maxTok = mustLock(t, n, "l-leased", "o", lease).Token
	leased["l-leased"] = true
	for i := 1; i < 10; i += 2 {
		key := fmt.Sprintf("s%02d", i)
		l, _, _ := n.LocalLookup([]byte(key))
		if r, err := propose(ctx, n, releaseCmd(key, l.Token)); err != nil || r.Status != fsm.StatusReleased {
			t.Fatalf("release %s: %+v, %v", key, r, err)
		}
	}
	l0, _, _ := n.LocalLookup([]byte("s00"))
	if r, err := propose(ctx, n, renewCmd("s00", l0.Token, lease)); err != nil || r.Status != fsm.StatusRenewed {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	before := table(t, n)

	// The node restarts long after every lease it held would have ended by the old clock: it
	// cannot know how much of them ran, so each gets its full length again.
	n = restart(t, n, func(c *Config) { clock.Advance(10 * time.Minute) })
	testutil.Leader(t, []*testNode{n})
	if got := n.Stats().LastSnapshot; got != snapIdx {
		t.Fatalf("after restart, last snapshot %d, want %d", got, snapIdx)
	}
	if d := diffTables(table(t, n), before); d != "" {
		t.Fatalf("table after restart (-want +got):\n%s", d)
	}
	for key := range before {
		_, rem, ok := n.LocalLookup([]byte(key))
		want := time.Duration(0)
		if leased[key] {
			want = lease * time.Millisecond
		}
		if !ok || rem != want {
			t.Errorf("%s after restart: held %v, %v left; want %v", key, ok, rem, want)
		}
	}

	n.locks.ExpireDue()
	clock.Advance(lease*time.Millisecond - time.Millisecond)
	n.locks.ExpireDue()
	if d := diffTables(table(t, n), before); d != "" {
		t.Fatalf("leases ended before now+lease after restart (-want +got):\n%s", d)
	}
	clock.Advance(time.Millisecond)
	n.locks.Wake()
	testutil.WaitFor(t, time.Second, func() error {
		for key := range before {
			if held(n, key) == leased[key] {
				return fmt.Errorf("%s: held %v, want %v (%s)", key, held(n, key), !leased[key], n.statsLine())
			}
		}
		return nil
	})

	if r := mustLock(t, n, "after-restart", "o", 0); r.Token <= maxTok {
		t.Fatalf("token after restart %d, want > %d", r.Token, maxTok)
	}
}

// TestRestartWithoutSnapshot replays the whole log on restart.
func TestRestartWithoutSnapshot(t *testing.T) {
	n := newNode(t)
	var last fsm.Token
	for i := range 10 {
		last = mustLock(t, n, fmt.Sprintf("k%d", i), "o", 0).Token
	}
	before := table(t, n)
	n = restart(t, n)
	testutil.Leader(t, []*testNode{n})
	if d := diffTables(table(t, n), before); d != "" {
		t.Fatalf("table after restart (-want +got):\n%s", d)
	}
	out, err := tryLock(t.Context(), n, "k3", "other", 0)
	if err != nil || out.granted || out.token != before["k3"].Token {
		t.Fatalf("LOCK k3 after restart = %+v, %v; want refused naming token %d", out, err, before["k3"].Token)
	}
	if r := mustLock(t, n, "new", "o", 0); r.Token <= last {
		t.Fatalf("token after restart %d, want > %d", r.Token, last)
	}
}
