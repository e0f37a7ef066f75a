package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/raftlock/raftlock/ops"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/store"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestReadinessAfterDiskFailed: a member whose raft log's disk failed says so where an operator
// and a load balancer look: ProbeStore (so /readyz, 503) names the failed disk, with the state
// Shutdown, and closes cleanly.
func TestReadinessAfterDiskFailed(t *testing.T) {
	fs := testutil.NewFaultFS(vfs.NewMem(), "raftlog")
	st, err := store.Open(store.Config{Dir: "n1", FS: fs, Logger: testutil.RaftLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() }) // after the member's own cleanup
	cfg := testConfig("n1")
	cfg.Bootstrap = true
	n := startNode(t, cfg, raftnode.Stores{Log: st, Stable: st, Snapshots: st.Snapshots(2), Health: st.Health})
	settle(t, []*testNode{n})
	mustLock(t, n, "before", "o", 60_000)
	if ready, reasons := ops.Ready(n.Core().Stats(), n.ProbeStore); !ready {
		t.Fatalf("not ready before the fault: %v", reasons)
	}

	fs.Break()
	if _, err := propose(t.Context(), n, grantCmd("at-failure", "o", 60_000)); err == nil {
		t.Fatal("a write on a failed disk was acknowledged")
	}
	fs.Repair() // the probe's own pebble write works: only the log's fault can make it fail
	testutil.WaitFor(t, 5*time.Second, func() error {
		ready, reasons := ops.Ready(n.Core().Stats(), n.ProbeStore)
		if ready || !strings.Contains(strings.Join(reasons, "; "), "store not writable: disk failed") {
			return errors.New("readiness: " + strings.Join(reasons, "; ") + "; want not ready, disk failed")
		}
		if s := n.Core().Stats().State; s != "Shutdown" {
			return errors.New("state " + s + ", want Shutdown")
		}
		return nil
	})
	// Raft stopped for the disk, not for a removal: the process stays up to say why, so the
	// member is not removed (cmd/raftlock exits when it is).
	select {
	case <-n.Removed():
		t.Fatal("a member whose disk failed was taken for removed (its process would exit)")
	case <-time.After(time.Second):
	}
}
