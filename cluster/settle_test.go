package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// TestAwaitSetup: a node that forms a new cluster alone returns from AwaitSetup only once its
// cluster ID, the newest log format and its client address are in its table, so that its first
// client's request comes after them; a node that resumes returns at once.
func TestAwaitSetup(t *testing.T) {
	cfg := testConfig("n1")
	cfg.Bootstrap, cfg.ClientAddr = true, "127.0.0.1:6379"
	n := startNode(t, cfg, newStores())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.AwaitSetup(ctx); err != nil {
		t.Fatal(err)
	}
	addr, ok := n.MemberAddr("n1")
	if id, f := n.tableClusterID(), n.format(); id == "" || f < fsm.FormatCurrent || !ok || addr != cfg.ClientAddr {
		t.Fatalf("after AwaitSetup: cluster ID %q, format %d, address %q (%v); want all three in the table", id, f, addr, ok)
	}

	again := restart(t, n)
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	if err := again.AwaitSetup(short); err != nil {
		t.Errorf("a resumed node's AwaitSetup: %v; want it to return at once", err)
	}
}
