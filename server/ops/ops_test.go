package ops

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/node"
)

func TestWriteMetrics(t *testing.T) {
	var b strings.Builder
	WriteMetrics(&b, node.Stats{State: "Leader", Ready: true, Locks: 42, Proposals: 7, Store: node.StoreStats{LastIndex: 9}})
	out := b.String()
	for _, want := range []string{
		"# TYPE raftlock_locks_held gauge\nraftlock_locks_held 42\n",
		"raftlock_ready 1\n",
		"raftlock_is_leader 1\n",
		"# TYPE raftlock_proposals_total counter\nraftlock_proposals_total 7\n",
		"raftlock_store_last_index 9\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}
