package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// The entry API the benchmarks run on: one command per entry, as LOCK and UNLOCK propose. The
// decoded commands and the results go to buffers reused from entry to entry, as raftnode's
// ApplyBatch reuses its decoding buffer and shares one results array over a batch.
var (
	benchCmds    []fsm.Command
	benchResults []fsm.Result
)

func benchEncode(dst []byte, c fsm.Command) []byte { return fsm.EncodeEntry(dst, []fsm.Command{c}) }

func benchDecode(b []byte) ([]fsm.Command, error) {
	var err error
	benchCmds, err = fsm.DecodeEntry(benchCmds[:0], b)
	return benchCmds, err
}

func benchApply(b *testing.B, m *fsm.Machine, idx uint64, c fsm.Command) fsm.Result {
	cmds, err := benchDecode(fsm.EncodeEntry(nil, []fsm.Command{c}))
	if err != nil {
		b.Fatal(err)
	}
	benchResults = m.ApplyEntry(benchResults[:0], idx, cmds)
	return benchResults[0]
}
