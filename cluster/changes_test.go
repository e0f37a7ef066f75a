package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// A leader that removes itself, while requests keep arriving, reports Removed and closes
// promptly: no proposal or leadership check is left waiting on a raft that stopped.
func TestLeaderRemovesItself(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := fmt.Sprintf("w%d-%d", w, i)
				propose(ctx, l, grantCmd(k, "o", 60_000))
				l.Core().Exec(ctx, [][]byte{[]byte(k)}, func(node.View) []fsm.Command { return nil }, nil) // a read
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	rctx, rcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer rcancel()
	if err := l.RemoveServer(rctx, l.id, true); err != nil {
		t.Fatalf("RemoveServer(self): %v", err)
	}
	select {
	case <-l.Removed():
	case <-time.After(10 * time.Second):
		t.Fatal("the removed leader never reported Removed")
	}
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close of the removed leader hangs")
	}
	cancel()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("requests on the removed leader never returned")
	}
	testutil.Leader(t, testutil.Others(l, nodes))
}
