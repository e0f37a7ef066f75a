package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// The entry API the benchmarks run on: one command per entry, as LOCK and UNLOCK propose.

func benchEncode(dst []byte, c fsm.Command) []byte { return fsm.EncodeEntry(dst, []fsm.Command{c}) }

func benchDecode(b []byte) ([]fsm.Command, error) { return fsm.DecodeEntry(b) }

func benchApply(b *testing.B, m *fsm.Machine, idx uint64, c fsm.Command) fsm.Result {
	d, err := fsm.DecodeEntry(fsm.EncodeEntry(nil, []fsm.Command{c}))
	if err != nil {
		b.Fatal(err)
	}
	return m.ApplyEntry(idx, d)[0]
}
