package locks

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/raftlock/raftlock/fsm"
)

// leaseTable applies commands to a table and keeps the lease timers in step, as the core's
// apply does (raftnode's ApplyBatch: the lease clock counts from epoch).
type leaseTable struct {
	p     *Policy
	m     *fsm.Machine
	epoch time.Time
	index uint64
}

func newLeaseTable(epoch time.Time) *leaseTable {
	return &leaseTable{p: New(Config{}), m: fsm.New(), epoch: epoch}
}

// clock is now on the lease clock.
func (lt *leaseTable) clock(now time.Time) int64 { return int64(now.Sub(lt.epoch)) }

// at is ms milliseconds after the table's epoch.
func (lt *leaseTable) at(ms int) time.Time { return lt.epoch.Add(time.Duration(ms) * time.Millisecond) }

// leaseGrant sets key for owner o with a lease of ms, whoever held it.
func leaseGrant(key string, ms uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte("o"), LeaseMs: ms, Match: fsm.Match{Kind: fsm.MatchAny}}
}

func (lt *leaseTable) apply(now time.Time, c fsm.Command) fsm.Result {
	return lt.applyEntry(now, c)[0]
}

// applyEntry applies cmds as one entry.
func (lt *leaseTable) applyEntry(now time.Time, cmds ...fsm.Command) []fsm.Result {
	lt.index++
	lt.m.SetLeaseClock(lt.clock(now))
	res := lt.m.ApplyEntry(nil, lt.index, cmds)
	for j, c := range cmds {
		lt.p.Applied(lt.m, c.Key, lt.index, res[j])
	}
	return res
}

// remaining is key's lease left at now by the node's timer.
func (lt *leaseTable) remaining(key string, now time.Time) (time.Duration, bool) {
	l, ok := lt.m.Get([]byte(key))
	if !ok || l.LeaseMs == 0 {
		return 0, false
	}
	return max(time.Duration(l.Deadline-lt.clock(now)), 0), true
}

// Timers end in deadline order; a renewed, released or re-granted lease's old timer never ends
// anything; KEEPTTL keeps the running timer for the new holder; a requeued expiry survives
// compaction.
func TestLeaseTimers(t *testing.T) {
	epoch := time.Unix(1000, 0)
	lt := newLeaseTable(epoch)
	ls := &lt.p.mu.leases
	at, grant := lt.at, leaseGrant

	a := lt.apply(at(0), grant("a", 300))
	lt.apply(at(0), grant("b", 100))
	lt.apply(at(0), grant("c", 200))
	lt.apply(at(0), grant("gone", 50))
	lt.apply(at(10), fsm.Command{Kind: fsm.KindRelease, Key: []byte("gone"), Match: fsm.Match{Kind: fsm.MatchAny}})
	// c is renewed at 20 for 500 ms: its first timer (at 200) must not end it.
	c, _ := lt.m.Get([]byte("c"))
	lt.apply(at(20), fsm.Command{Kind: fsm.KindRenew, Key: []byte("c"), LeaseMs: 500, Match: fsm.Match{Kind: fsm.MatchToken, Token: c.Token}})
	// a gets a new holder with KEEPTTL: same lease, ending at 300, for the new token.
	keep := grant("a", 0)
	keep.Owner, keep.KeepLease = []byte("o2"), true
	a2 := lt.apply(at(30), keep)
	if a2.LeaseRev != a.LeaseRev || a2.Token == a.Token {
		t.Fatalf("KEEPTTL result %+v after %+v: want the same lease revision, a new token", a2, a)
	}
	if rem, ok := lt.remaining("a", at(100)); !ok || rem != 200*time.Millisecond {
		t.Errorf("a's remaining lease at 100 ms = %v, %v; want 200ms", rem, ok)
	}

	var ended []string
	for _, now := range []int{99, 100, 250, 300, 519, 520} {
		for _, e := range ls.due(lt.m, lt.clock(at(now)), 10) {
			l, _ := lt.m.Get([]byte(e.key))
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
	if lt.m.Leases() != 0 || lt.m.Len() != 0 {
		t.Errorf("after every expiry: %d armed, %d locks; want none", lt.m.Leases(), lt.m.Len())
	}

	// A failed Expire proposal is requeued; compaction (forced by churn) keeps it.
	lt.apply(at(1000), grant("r", 10))
	due := ls.due(lt.m, lt.clock(at(1010)), 10)
	if len(due) != 1 {
		t.Fatalf("due at 1010 = %v; want r", due)
	}
	ls.requeue(due[0], lt.clock(at(1100)))
	for i := range 200 {
		k := fmt.Sprintf("churn%d", i%5)
		lt.apply(at(1020), grant(k, 1_000_000))
	}
	if len(ls.queue) > 2*lt.m.Leases()+64 {
		t.Errorf("queue of %d for %d armed leases: not compacted", len(ls.queue), lt.m.Leases())
	}
	if got := ls.due(lt.m, lt.clock(at(1100)), 10); len(got) != 1 || got[0].key != "r" {
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
	lt.p.mu.leases.compact(lt.m)
	check("arm", &lt.p.mu.leases)
	restored := leases{}
	restored.armAll(lt.m)
	check("armAll", &restored)
}

// A renewal re-arms (the old timer ends nothing, the new one ends the lease at its new
// deadline, sooner or later than the old), a release leaves nothing to end, and a key set twice in one entry ends at the
// entry's last lease, never at an earlier command's.
func TestLeaseRenewReleaseEntry(t *testing.T) {
	epoch := time.Unix(0, 0)
	lt := newLeaseTable(epoch)
	ls := &lt.p.mu.leases
	at, grant := lt.at, leaseGrant
	renew := func(key string, ms uint64) fsm.Command {
		return fsm.Command{Kind: fsm.KindRenew, Key: []byte(key), LeaseMs: ms, Match: fsm.Match{Kind: fsm.MatchAny}}
	}
	lt.apply(at(0), grant("r", 100))
	lt.apply(at(50), renew("r", 100)) // now ends at 150
	lt.apply(at(0), grant("gone", 100))
	lt.apply(at(10), fsm.Command{Kind: fsm.KindRelease, Key: []byte("gone"), Match: fsm.Match{Kind: fsm.MatchAny}})
	lt.apply(at(0), grant("s", 1000))
	lt.apply(at(10), renew("s", 100))                               // now ends at 110, sooner: the timer at 1000 finds it gone
	lt.applyEntry(at(0), grant("multi", 100), renew("multi", 1000)) // MULTI: SET PX 100, PEXPIRE 1000
	if rem, ok := lt.remaining("multi", at(0)); !ok || rem != time.Second {
		t.Errorf("multi's lease at 0 = %v, %v; want 1s", rem, ok)
	}
	if rem, ok := lt.remaining("gone", at(20)); ok {
		t.Errorf("released key has a lease: %v", rem)
	}
	var ended []string
	for _, now := range []int{100, 109, 110, 149, 150, 999, 1000} {
		for _, e := range ls.due(lt.m, lt.clock(at(now)), 10) {
			ended = append(ended, fmt.Sprintf("%s@%d", e.key, now))
			lt.apply(at(now), fsm.Command{Kind: fsm.KindExpire, Key: []byte(e.key), Token: e.token, LeaseRev: e.rev})
		}
	}
	// multi was armed twice by its entry (one push per command): at 100 by its grant, a timer
	// that finds the lease renewed when it fires, and at 1000 by the renewal.
	if want := []string{"s@110", "r@150", "multi@1000"}; !slices.Equal(ended, want) {
		t.Errorf("leases ended %v; want %v", ended, want)
	}
	if n := lt.m.Len(); n != 0 {
		t.Errorf("%d locks left; want none", n)
	}
}

// The queue stays within twice the live leases plus a constant however often they are re-granted,
// and the live timers' keys are the table's own bytes, not copies.
func TestLeaseQueueSharesKeys(t *testing.T) {
	epoch := time.Unix(0, 0)
	lt := newLeaseTable(epoch)
	const keys = 100
	for round := range 50 {
		for i := range keys {
			lt.apply(epoch, fsm.Command{Kind: fsm.KindGrant, Key: fmt.Appendf(nil, "k%d", i), Owner: []byte("o"),
				LeaseMs: uint64(1000 + round), Match: fsm.Match{Kind: fsm.MatchAny}})
			if q := len(lt.p.mu.leases.queue); q > 2*keys+64 {
				t.Fatalf("round %d: %d queued for %d leases", round, q, keys)
			}
		}
	}
	fresh := 0
	for _, q := range lt.p.mu.leases.queue {
		if stored, l, ok := lt.m.Entry([]byte(q.key)); ok && l.Deadline == q.deadline {
			fresh++
			if unsafe.StringData(stored) != unsafe.StringData(q.key) {
				t.Errorf("queued key %q does not share the table's bytes", q.key)
			}
		}
	}
	if fresh != keys {
		t.Errorf("%d live timers for %d leases", fresh, keys)
	}
}
