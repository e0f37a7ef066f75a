package store

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

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
