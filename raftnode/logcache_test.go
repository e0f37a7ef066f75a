package raftnode

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// countingStore counts the reads that reach the store behind the cache.
type countingStore struct {
	*raft.InmemStore
	reads int
}

func (s *countingStore) GetLog(index uint64, out *raft.Log) error {
	s.reads++
	return s.InmemStore.GetLog(index, out)
}

func newTestLogCache(t *testing.T, entries, bytes int) (*logCache, *countingStore) {
	t.Helper()
	store := &countingStore{InmemStore: raft.NewInmemStore()}
	c, err := newLogCache(store, entries, bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c, store
}

func logsOf(first, last uint64, size int) []*raft.Log {
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, size)})
	}
	return logs
}

// cached reports whether index is served from memory: the read must not reach the store.
func cached(t *testing.T, c *logCache, store *countingStore, index uint64) bool {
	t.Helper()
	before := store.reads
	var l raft.Log
	if err := c.GetLog(index, &l); err != nil {
		t.Fatalf("GetLog(%d): %v", index, err)
	}
	if l.Index != index || len(l.Data) > 0 && l.Data[0] != byte(index) {
		t.Fatalf("GetLog(%d) returned entry %d", index, l.Index)
	}
	return store.reads == before
}

func wantCached(t *testing.T, c *logCache, store *countingStore, first, last uint64) {
	t.Helper()
	for i := uint64(1); i <= 20; i++ {
		if err := store.InmemStore.GetLog(i, new(raft.Log)); err != nil {
			continue // not in the store at all
		}
		if got, want := cached(t, c, store, i), first <= i && i <= last; got != want {
			t.Fatalf("entry %d cached = %v, want %v (cache should hold %d..%d)", i, got, want, first, last)
		}
	}
}

func TestLogCacheKeepsTheNewestEntries(t *testing.T) {
	c, store := newTestLogCache(t, 4, 1<<20)
	if err := c.StoreLogs(logsOf(1, 10, 8)); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 7, 10)
	if err := c.StoreLog(logsOf(11, 11, 8)[0]); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 8, 11)
}

func TestLogCacheIsBoundedByBytes(t *testing.T) {
	c, store := newTestLogCache(t, 100, 250)
	if err := c.StoreLogs(logsOf(1, 10, 100)); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 9, 10) // 200 bytes; a third entry would be 300
	if c.nbytes != 200 {
		t.Fatalf("nbytes = %d, want 200", c.nbytes)
	}
	// An entry larger than the whole budget is still kept, alone: it is the one raft reads next.
	if err := c.StoreLogs(logsOf(11, 11, 1000)); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 11, 11)
}

func TestLogCacheStartsAgainAfterAGap(t *testing.T) {
	c, store := newTestLogCache(t, 8, 1<<20)
	if err := c.StoreLogs(logsOf(1, 4, 8)); err != nil {
		t.Fatal(err)
	}
	// A snapshot install leaves the follower's log to continue past a gap.
	if err := c.StoreLogs(logsOf(10, 12, 8)); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 10, 12)
	if c.count != 3 || c.nbytes != 24 {
		t.Fatalf("count %d, nbytes %d after the gap, want 3 and 24", c.count, c.nbytes)
	}
}

func TestLogCacheDeleteRange(t *testing.T) {
	c, store := newTestLogCache(t, 8, 1<<20)
	if err := c.StoreLogs(logsOf(1, 8, 8)); err != nil {
		t.Fatal(err)
	}
	// The head, once a snapshot covers it: the rest stays in memory.
	if err := c.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 4, 8)
	// A conflicting tail: gone from the cache and the store, and the leader's entries follow.
	if err := c.DeleteRange(7, 8); err != nil {
		t.Fatal(err)
	}
	if err := c.GetLog(7, new(raft.Log)); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(7) after deleting the tail: %v, want ErrLogNotFound", err)
	}
	replaced := logsOf(7, 8, 8)
	for _, l := range replaced {
		l.Term = 2
	}
	if err := c.StoreLogs(replaced); err != nil {
		t.Fatal(err)
	}
	wantCached(t, c, store, 4, 8)
	var l raft.Log
	if err := c.GetLog(8, &l); err != nil || l.Term != 2 {
		t.Fatalf("GetLog(8) = term %d, %v; want the new term 2", l.Term, err)
	}
	if c.nbytes != 5*8 {
		t.Fatalf("nbytes = %d, want %d", c.nbytes, 5*8)
	}
	// Everything.
	if err := c.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	if c.count != 0 || c.nbytes != 0 {
		t.Fatalf("count %d, nbytes %d after deleting everything", c.count, c.nbytes)
	}
}

func TestLogCacheRejectsBadBounds(t *testing.T) {
	if _, err := newLogCache(raft.NewInmemStore(), 0, 1); err == nil {
		t.Fatal("no error for zero entries")
	}
	if _, err := newLogCache(raft.NewInmemStore(), 1, 0); err == nil {
		t.Fatal("no error for zero bytes")
	}
}

// copyingStore is a log store that keeps copies of what it is given, as the real one (store)
// keeps bytes on disk: raft.InmemStore keeps the pointers.
type copyingStore struct{ *raft.InmemStore }

func (s copyingStore) StoreLogs(logs []*raft.Log) error {
	for _, l := range logs {
		c := *l
		if err := s.InmemStore.StoreLog(&c); err != nil {
			return err
		}
	}
	return nil
}

// The cache keeps no pointer it was given: on the leader raft hands it a pointer into its
// future for the entry, and the future holds the batch's results (1M locks filled: ~100 MB).
func TestLogCacheKeepsNoPointerItWasGiven(t *testing.T) {
	c, err := newLogCache(copyingStore{raft.NewInmemStore()}, 16, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	type future struct {
		log      raft.Log
		response *[1 << 16]byte
	}
	f := &future{log: raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: []byte{1}}, response: new([1 << 16]byte)}
	collected := make(chan struct{})
	runtime.SetFinalizer(f, func(*future) { close(collected) })
	if err := c.StoreLogs([]*raft.Log{&f.log}); err != nil {
		t.Fatal(err)
	}
	f = nil
	for i := 0; ; i++ {
		runtime.GC()
		select {
		case <-collected:
			var l raft.Log
			if err := c.GetLog(1, &l); err != nil || l.Index != 1 || !bytes.Equal(l.Data, []byte{1}) {
				t.Fatalf("GetLog(1) = %+v, %v after the original went", l, err)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if i == 100 {
			t.Fatal("the entry raft handed to the cache is still reachable: the cache keeps the pointer")
		}
	}
}
