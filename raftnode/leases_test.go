package raftnode

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// leaseTable applies commands to a table and keeps the lease timers in step, as ApplyBatch does.
type leaseTable struct {
	n     *Node
	index uint64
}

func newLeaseTable(epoch time.Time) *leaseTable {
	n := &Node{leaseWake: make(chan struct{}, 1)}
	n.mu.machine, n.mu.leases = fsm.New(), newLeases(epoch, 0)
	return &leaseTable{n: n}
}

func (lt *leaseTable) apply(now time.Time, c fsm.Command) fsm.Result {
	lt.index++
	res := lt.n.mu.machine.Apply(lt.index, c)
	lt.n.trackLeaseLocked(string(c.Key), lt.index, res, now)
	return res
}

// Timers end in deadline order; a renewed, released or re-granted lease's old timer never ends
// anything; KEEPTTL keeps the running timer for the new holder; a requeued expiry survives
// compaction.
func TestLeaseTimers(t *testing.T) {
	epoch := time.Unix(1000, 0)
	lt := newLeaseTable(epoch)
	ls := &lt.n.mu.leases
	at := func(ms int) time.Time { return epoch.Add(time.Duration(ms) * time.Millisecond) }
	grant := func(key string, ms uint64) fsm.Command {
		return fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte("o"), LeaseMs: ms, Match: fsm.Match{Kind: fsm.MatchAny}}
	}

	a := lt.apply(at(0), grant("a", 300))
	lt.apply(at(0), grant("b", 100))
	lt.apply(at(0), grant("c", 200))
	lt.apply(at(0), grant("gone", 50))
	lt.apply(at(10), fsm.Command{Kind: fsm.KindRelease, Key: []byte("gone"), Match: fsm.Match{Kind: fsm.MatchAny}})
	// c is renewed at 20 for 500 ms: its first timer (at 200) must not end it.
	c, _ := lt.n.mu.machine.Get([]byte("c"))
	lt.apply(at(20), fsm.Command{Kind: fsm.KindRenew, Key: []byte("c"), LeaseMs: 500, Match: fsm.Match{Kind: fsm.MatchToken, Token: c.Token}})
	// a gets a new holder with KEEPTTL: same lease, ending at 300, for the new token.
	keep := grant("a", 0)
	keep.Owner, keep.KeepLease = []byte("o2"), true
	a2 := lt.apply(at(30), keep)
	if a2.LeaseRev != a.LeaseRev || a2.Token == a.Token {
		t.Fatalf("KEEPTTL result %+v after %+v: want the same lease revision, a new token", a2, a)
	}
	if rem, ok := ls.remaining("a", at(100)); !ok || rem != 200*time.Millisecond {
		t.Errorf("a's remaining lease at 100 ms = %v, %v; want 200ms", rem, ok)
	}

	var ended []string
	for _, now := range []int{99, 100, 250, 300, 519, 520} {
		for _, e := range ls.due(lt.n.mu.machine, at(now), 10) {
			l, _ := lt.n.mu.machine.Get([]byte(e.key))
			if e.token != l.Token || e.rev != l.LeaseRev {
				t.Errorf("expiry %+v for %q does not name its holder %+v", e, e.key, l)
			}
			ended = append(ended, fmt.Sprintf("%s@%d", e.key, now))
			lt.apply(at(now), fsm.Command{Kind: fsm.KindExpire, Key: []byte(e.key), Token: e.token, LeaseRev: e.rev})
		}
	}
	if want := []string{"b@100", "a@300", "c@520"}; !slices.Equal(ended, want) {
		t.Errorf("leases ended %v; want %v", ended, want)
	}
	if len(ls.deadline) != 0 || lt.n.mu.machine.Len() != 0 {
		t.Errorf("after every expiry: %d armed, %d locks; want none", len(ls.deadline), lt.n.mu.machine.Len())
	}

	// A failed Expire proposal is requeued; compaction (forced by churn) keeps it.
	lt.apply(at(1000), grant("r", 10))
	due := ls.due(lt.n.mu.machine, at(1010), 10)
	if len(due) != 1 {
		t.Fatalf("due at 1010 = %v; want r", due)
	}
	ls.requeue(due[0], at(1100))
	for i := range 200 {
		k := fmt.Sprintf("churn%d", i%5)
		lt.apply(at(1020), grant(k, 1_000_000))
	}
	if len(ls.queue) > 2*len(ls.deadline)+64 {
		t.Errorf("queue of %d for %d armed leases: not compacted", len(ls.queue), len(ls.deadline))
	}
	if got := ls.due(lt.n.mu.machine, at(1100), 10); len(got) != 1 || got[0].key != "r" {
		t.Errorf("due at 1100 = %v; want the requeued r", got)
	}
}

// The queue pops in deadline order whatever the order of arming, and a bulk arm (a restore)
// yields one timer per armed lease.
func TestLeaseQueueOrder(t *testing.T) {
	epoch := time.Unix(0, 0)
	lt := newLeaseTable(epoch)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		lt.apply(epoch, fsm.Command{Kind: fsm.KindGrant, Key: fmt.Appendf(nil, "k%d", i), Owner: []byte("o"),
			LeaseMs: 1 + rng.Uint64N(10_000), Match: fsm.Match{Kind: fsm.MatchAny}})
	}
	check := func(what string, ls *leases) {
		t.Helper()
		if len(ls.queue) != 500 {
			t.Fatalf("%s: %d queued for 500 leases", what, len(ls.queue))
		}
		var last int64
		for n := 0; len(ls.queue) > 0; n++ {
			d := ls.queue[0].deadline
			if d < last {
				t.Fatalf("%s: popped %d after %d", what, d, last)
			}
			last = d
			ls.queue.pop()
		}
	}
	lt.n.mu.leases.compact(lt.n.mu.machine)
	check("arm", &lt.n.mu.leases)
	restored := newLeases(epoch, 0)
	restored.armAll(lt.n.mu.machine, epoch)
	check("armAll", &restored)
}
