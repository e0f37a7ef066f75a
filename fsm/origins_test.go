package fsm

import (
	"strconv"
	"sync"
	"testing"
)

// A name gets one reference for good, and a reader of references given earlier reads them while
// names are added (go test -race).
func TestOriginNames(t *testing.T) {
	o := newOriginNames()
	if o.ref(nil) != 0 || o.name(0) != nil || o.name(7) != nil {
		t.Fatal("no origin must be reference 0, and an unknown reference no name")
	}
	a, b := o.ref([]byte("n1")), o.ref([]byte("n2"))
	if a == 0 || b == 0 || a == b || o.ref([]byte("n1")) != a {
		t.Fatalf("references %d %d, and n1 again %d", a, b, o.ref([]byte("n1")))
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 10000 {
			if string(o.name(a)) != "n1" || string(o.name(b)) != "n2" || o.ref([]byte("n2")) != b {
				t.Error("a reference changed its name")
				return
			}
		}
	})
	for i := range 70000 { // past what two bytes would count: no cap, no wrap
		o.ref([]byte("id" + strconv.Itoa(i)))
	}
	wg.Wait()
	if r := o.ref([]byte("id69999")); string(o.name(r)) != "id69999" || r != 70002 {
		t.Fatalf("the last name has reference %d naming %q", r, o.name(r))
	}
}

// An entry with a grant time and an origin costs entryHeld bytes more than one without,
// whatever the origin's length.
func TestHeldEntrySize(t *testing.T) {
	tb := newLockTable(newOriginNames())
	plain := tb.encodeEntry("\x00k", Lock{Owner: []byte("o"), Token: 1})
	held := tb.encodeEntry("\x00k", Lock{Owner: []byte("o"), Token: 1, Since: 1_765_000_000_000, Origin: []byte("node-127.0.0.1-7400")})
	if len(held)-len(plain) != entryHeld {
		t.Fatalf("an entry with its grant time and origin is %d bytes, %d without", len(held), len(plain))
	}
	if _, l, _ := tb.decodeEntry(held); l.Since != 1_765_000_000_000 || string(l.Origin) != "node-127.0.0.1-7400" || string(l.Owner) != "o" {
		t.Fatalf("decoded %+v", l)
	}
}

// A backup rewrites a snapshot's leases (WithLeases, on its own goroutine) while the applier
// grants locks from new origins: they share the table's names (go test -race).
func TestWithLeasesWhileApplying(t *testing.T) {
	m := New()
	m.NoteFormat(FormatFunctions)
	grant := func(i int) {
		m.Apply(uint64(i+1), Command{Kind: KindGrant, Key: DBKey(0, []byte("k"+strconv.Itoa(i))), Owner: []byte("o"),
			LeaseMs: 60000, Match: Match{Kind: MatchFree}, Since: 1, Origin: []byte("n" + strconv.Itoa(i))}) // a new name each
	}
	for i := range 100 {
		grant(i)
	}
	snap := m.Snapshot()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 20 {
			snap.WithLeases(func(string, Lock) uint64 { return 1000 })
		}
	})
	for i := 100; i < 2000; i++ {
		grant(i)
	}
	wg.Wait()
}
