package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// The one-command-per-entry API the benchmarks run on.

func benchEncode(dst []byte, c fsm.Command) []byte { return c.Encode(dst) }

func benchDecode(b []byte) (fsm.Command, error) { return fsm.Decode(b) }

func benchApply(b *testing.B, m *fsm.Machine, idx uint64, c fsm.Command) fsm.Result {
	d, err := fsm.Decode(c.Encode(nil))
	if err != nil {
		b.Fatal(err)
	}
	return m.Apply(idx, d)
}
