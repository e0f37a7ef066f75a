package locks

import (
	"context"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func noneInFlight([]byte) bool { return false }

// A proposal while nobody waits gets its own commands back, and no answer to give: the hand-off
// costs it no allocation.
func TestHandoffsWithoutWaitersCostNothing(t *testing.T) {
	p, m := New(Config{}), fsm.New()
	cmds := []fsm.Command{{Kind: fsm.KindRelease, Key: []byte("k"), Match: fsm.Match{Kind: fsm.MatchAny}}}
	allocs := testing.AllocsPerRun(100, func() {
		out, answer := p.Handoffs(m, noneInFlight, cmds, fsm.FormatCurrent)
		if &out[0] != &cmds[0] || answer != nil {
			t.Fatal("Handoffs changed a proposal while nobody waits")
		}
	})
	if allocs != 0 {
		t.Errorf("Handoffs allocates %v times per proposal while nobody waits, want 0", allocs)
	}
}

// The Release of a held key that a waiter queues on carries the waiter's grant in the same entry;
// the answer gives the waiter the grant's result. A key in flight, or touched again later in the
// entry, hands nothing off (the grant's guard could fail).
func TestHandoffsGrantTheHeadOnRelease(t *testing.T) {
	p, m := New(Config{}), fsm.New()
	p.leading.Store(true)
	key := []byte("k")
	res := m.ApplyEntry(nil, 1, []fsm.Command{Acquire(key, []byte("holder"), 0)})
	release := Unlock(key, res[0].Token)
	w := &lockWaiter{ctx: context.Background(), grants: oneGrant(key, []byte("next"), 0), out: make(chan handoffOutcome, 1)}
	p.mu.Lock()
	p.queueLocked(w)
	p.mu.Unlock()

	if out, answer := p.Handoffs(m, func([]byte) bool { return true }, []fsm.Command{release}, fsm.FormatCurrent); len(out) != 1 || answer != nil {
		t.Fatalf("a key in flight: %d commands, answer %v; want the release alone", len(out), answer != nil)
	}
	if out, answer := p.Handoffs(m, noneInFlight, []fsm.Command{release, Acquire(key, []byte("x"), 0)}, fsm.FormatCurrent); len(out) != 2 || answer != nil {
		t.Fatalf("a key touched after its release: %d commands, answer %v; want the entry as it was", len(out), answer != nil)
	}
	out, answer := p.Handoffs(m, noneInFlight, []fsm.Command{release}, fsm.FormatCurrent)
	if len(out) != 2 || answer == nil || string(out[1].Owner) != "next" {
		t.Fatalf("release with a waiter: %+v, answer %v; want the release and next's grant", out, answer != nil)
	}
	if p.LockWaiters() != 0 {
		t.Fatalf("%d waiters queued after the hand-off took the head, want 0", p.LockWaiters())
	}
	results := m.ApplyEntry(nil, 2, out)
	answer(results, nil)
	got := <-w.out
	if got.err != nil || !got.granted() {
		t.Fatalf("the waiter heard %+v, want its grant", got)
	}
}

// Demote answers every queued waiter at once and queues none until Promote.
func TestDemoteAnswersEveryWaiter(t *testing.T) {
	p := New(Config{})
	p.leading.Store(true)
	var ws []*lockWaiter
	p.mu.Lock()
	for _, k := range []string{"a", "a", "b"} {
		w := &lockWaiter{ctx: context.Background(), grants: oneGrant([]byte(k), []byte("o"), 0), out: make(chan handoffOutcome, 1)}
		p.queueLocked(w)
		ws = append(ws, w)
	}
	p.mu.Unlock()
	lost := context.Canceled
	p.Demote(lost)
	for i, w := range ws {
		if got := <-w.out; got.err != lost {
			t.Errorf("waiter %d heard %v, want %v", i, got.err, lost)
		}
	}
	if p.LockWaiters() != 0 || p.leading.Load() {
		t.Fatalf("after Demote: %d waiters, leading %v; want 0, false", p.LockWaiters(), p.leading.Load())
	}
}

// oneGrant is a plain lock waiter's grants.
func oneGrant(key, owner []byte, ttl uint64) []fsm.Command {
	return []fsm.Command{Acquire(key, owner, ttl)}
}
