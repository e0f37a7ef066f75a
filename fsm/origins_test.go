package fsm

import (
	"strconv"
	"sync"
	"testing"
)

// A name gets one reference for good; past maxOrigins names nothing more is interned; a reader
// of references given earlier reads them while the applier adds (go test -race).
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
			if string(o.name(a)) != "n1" || string(o.name(b)) != "n2" {
				t.Error("a reference changed its name")
				return
			}
		}
	})
	for i := 2; i < maxOrigins; i++ {
		o.ref([]byte("id" + strconv.Itoa(i)))
	}
	wg.Wait()
	if r := o.ref([]byte("one too many")); r != 0 {
		t.Fatalf("a name past maxOrigins got reference %d", r)
	}
	if string(o.name(maxOrigins)) != "id"+strconv.Itoa(maxOrigins-1) {
		t.Fatalf("the last reference names %q", o.name(maxOrigins))
	}
}

// An entry with a grant time and an origin costs ten bytes more than one without, whatever the
// origin's length.
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
