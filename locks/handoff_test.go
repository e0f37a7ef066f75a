package locks

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func noneInFlight([]byte) bool { return false }

// A proposal while nobody waits gets its own commands back: the hand-off costs it no allocation.
func TestHandoffsWithoutWaitersCostNothing(t *testing.T) {
	p, m := New(Config{}), fsm.New()
	m.NoteFormat(fsm.FormatCurrent)
	cmds := []fsm.Command{{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte("k")), Match: fsm.Match{Kind: fsm.MatchAny}}}
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

// The Release of a held key whose queue's head waits for a plain lock carries the head's Serve in
// the same entry; a key in flight, or touched again later in the entry, serves nobody (the
// Serve's guard could fail); a head that waits for a share is served by Changed instead.
func TestHandoffsServeTheHeadOnRelease(t *testing.T) {
	p, m := New(Config{}), fsm.New()
	m.NoteFormat(fsm.FormatCurrent)
	key := fsm.DBKey(0, []byte("k"))
	res := m.ApplyEntry(nil, 1, []fsm.Command{Acquire(key, []byte("holder"), 1000)})
	q := Request{Key: key, Owner: []byte("next"), TTL: 1000}
	queued := m.ApplyEntry(nil, 2, Enqueue([]Request{q}, 5000))
	release := Unlock(key, res[0].Token)

	if out, _ := p.Handoffs(m, func([]byte) bool { return true }, []fsm.Command{release}, fsm.FormatCurrent); len(out) != 1 {
		t.Fatalf("a key in flight: %d commands, want the release alone", len(out))
	}
	if out, _ := p.Handoffs(m, noneInFlight, []fsm.Command{release, Acquire(key, []byte("x"), 0)}, fsm.FormatCurrent); len(out) != 2 {
		t.Fatalf("a key touched after its release: %d commands, want the entry as it was", len(out))
	}
	if out, _ := p.Handoffs(m, noneInFlight, []fsm.Command{release}, fsm.FormatBatch); len(out) != 1 {
		t.Fatal("an older format has no queues: nothing to serve")
	}
	out, _ := p.Handoffs(m, noneInFlight, []fsm.Command{release}, fsm.FormatCurrent)
	if len(out) != 2 || out[1].Kind != fsm.KindServe || out[1].Token != queued[0].Token || out[1].KeepLease {
		t.Fatalf("release with a waiter: %+v; want the release and the head's Serve", out)
	}
	results := m.ApplyEntry(nil, 3, out)
	if results[1].Status != fsm.StatusGranted || results[1].Served != queued[0].Token {
		t.Fatalf("the Serve applied as %+v", results[1])
	}
	// A share's waiter is not served in the releasing entry.
	res = m.ApplyEntry(nil, 4, []fsm.Command{Unlock(key, results[1].Token), Acquire(key, []byte("h"), 1000)})
	m.ApplyEntry(nil, 5, Enqueue([]Request{{Key: key, Owner: []byte("r"), TTL: 1000, Shared: true}}, 5000))
	if out, _ := p.Handoffs(m, noneInFlight, []fsm.Command{Unlock(key, res[1].Token)}, fsm.FormatCurrent); len(out) != 1 {
		t.Fatalf("a share's waiter served in the releasing entry: %+v", out)
	}
}
