package fsm_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// benchKeys is the number of distinct keys the apply benchmarks cycle through.
const benchKeys = 1024

// BenchmarkApplyGrantRelease is the hot path of a lock: an entry that grants a free key, then
// one that releases it by its token, decoded from the log as raftnode does. One op = both.
func BenchmarkApplyGrantRelease(b *testing.B) {
	m := fsm.New()
	grantRelease(b, m, 0, []byte("owner-0123456789"))
}

// grantRelease runs the timed loop of the grant+release benchmarks on m, whose last applied
// index is idx: one op grants the next of benchKeys keys to owner, then releases it by its token.
func grantRelease(b *testing.B, m *fsm.Machine, idx uint64, owner []byte) {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("lock:%04d", i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := keys[i%benchKeys]
		idx++
		g := benchApply(b, m, idx, fsm.Command{Kind: fsm.KindGrant, Key: k, Owner: owner, LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}})
		idx++
		benchApply(b, m, idx, fsm.Command{Kind: fsm.KindRelease, Key: k, Match: fsm.Match{Kind: fsm.MatchToken, Token: g.Token}})
	}
}

// BenchmarkApplyGrantReleaseAmongHeld is BenchmarkApplyGrantRelease with 100,000 other keys
// held: the table four levels deep, as on a busy node.
func BenchmarkApplyGrantReleaseAmongHeld(b *testing.B) {
	m := fsm.New()
	owner := []byte("owner-0123456789")
	idx := uint64(0)
	for i := range 100_000 {
		idx++
		benchApply(b, m, idx, fsm.Command{Kind: fsm.KindGrant, Key: fmt.Appendf(nil, "held:%06d", i), Owner: owner, Match: fsm.Match{Kind: fsm.MatchAbsent}})
	}
	grantRelease(b, m, idx, owner)
}

// BenchmarkCodec encodes and decodes one Grant.
func BenchmarkCodec(b *testing.B) {
	c := fsm.Command{Kind: fsm.KindGrant, Key: []byte("lock:0001"), Owner: []byte("owner-0123456789"), LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}}
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = benchEncode(buf[:0], c)
		if _, err := benchDecode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeldLocks reports the live heap per held lock (live-B/lock) of a table of 200k
// leased locks granted in a shuffled order, keys and owners the size `make bench-scale` uses:
// go test -run x -bench HeldLocks ./fsm/
func BenchmarkHeldLocks(b *testing.B) {
	const locks = 200_000
	order := rand.New(rand.NewPCG(1, 2)).Perm(locks)
	keys := make([][]byte, locks)
	for i, n := range order {
		keys[i] = fmt.Appendf(nil, "scale:%d", n)
	}
	owner := []byte("owner-0123456789abcdefghij") // 26 bytes
	var perLock float64
	for b.Loop() {
		before := liveHeap()
		m := fsm.New()
		m.SetLeaseClock(1)
		for i, k := range keys {
			m.Apply(uint64(i+1), fsm.Command{Kind: fsm.KindGrant, Key: k, Owner: owner, LeaseMs: 3_600_000,
				Match: fsm.Match{Kind: fsm.MatchAbsent}})
		}
		perLock = float64(liveHeap()-before) / locks
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perLock, "live-B/lock")
}

// liveHeap is the heap in use after a full collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
