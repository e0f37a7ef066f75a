package store

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs measures one synced StoreLogs call on the real filesystem, by batch
// size: the fsync dominates, so bigger batches amortize it (raft batches up to
// MaxAppendEntries).
func BenchmarkStoreLogs(b *testing.B) {
	for _, batch := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Dir = b.TempDir()
			cfg.Logger = slog.New(slog.DiscardHandler)
			s, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := make([]byte, 256) // a typical lock command is far smaller
			logs := make([]*raft.Log, batch)
			next := uint64(1)
			b.SetBytes(int64(batch * len(data)))
			for b.Loop() {
				for i := range logs {
					logs[i] = &raft.Log{Index: next, Term: 1, Data: data, AppendedAt: time.Now()}
					next++
				}
				if err := s.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGroupsAppend measures G raft groups of one node appending at once, each a synced
// batch of 4 entries per append, from a goroutine of its own, two ways: each group's log in its
// own write-ahead log (what OpenGroups does: G fdatasyncs, which the disk may overlap), and every
// group's entries as synced batches in the one pebble database (pebble's commit pipeline puts
// concurrent synced batches under one WAL sync: shared syncs). ns/op is per append over all
// groups: 1e9/(ns/op) appends/s in all.
func BenchmarkGroupsAppend(b *testing.B) {
	for _, groups := range []int{1, 2, 4, 8} {
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("groups=%d/wal", groups)
			if shared {
				name = fmt.Sprintf("groups=%d/pebble-shared", groups)
			}
			b.Run(name, func(b *testing.B) {
				cfg := DefaultConfig()
				cfg.Dir = b.TempDir()
				cfg.Logger = slog.New(slog.DiscardHandler)
				gs, err := OpenGroups(cfg, groups)
				if err != nil {
					b.Fatal(err)
				}
				defer gs.Close()
				data := make([]byte, 200)
				per := (b.N + groups - 1) / groups
				b.ResetTimer()
				var wg sync.WaitGroup
				for g := range groups {
					wg.Go(func() {
						s := gs.Store(g)
						var buf []byte
						next := uint64(0)
						for range per {
							logs := make([]*raft.Log, 4)
							for i := range logs {
								next++
								logs[i] = &raft.Log{Index: next, Term: 1, Data: data}
							}
							if !shared {
								if err := s.StoreLogs(logs); err != nil {
									b.Error(err)
									return
								}
								continue
							}
							batch := gs.db.NewBatch()
							for _, l := range logs {
								buf = appendLog(buf[:0], l)
								batch.Set(s.keys.logKey(l.Index), buf, nil)
							}
							if err := batch.Commit(pebble.Sync); err != nil {
								b.Error(err)
								return
							}
							batch.Close()
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
