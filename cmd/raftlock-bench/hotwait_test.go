package main

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// startNode builds raftlock and starts one plain node; it returns its client address.
func startNode(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts raftlock")
	}
	bin := filepath.Join(t.TempDir(), "raftlock")
	if err := testutil.GoBuild(bin, "github.com/raftlock/raftlock/cmd/raftlock", false); err != nil {
		t.Fatal(err)
	}
	free := func() string {
		port, err := testutil.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	addr := free()
	p, err := testutil.Launch(t, "raftlock", bin, "--id", "n1", "--dir", t.TempDir(), "--addr", addr, "--raft-addr", free())
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !p.Running() {
			t.Fatalf("raftlock exited:\n%s", p.Log())
		}
		c := newClient(addr, Auth{}, nil)
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.Do(ctx, "LOCK", "ready-probe", 1).Result()
		return err
	})
	return addr
}

// The hot-wait workload queues every worker on one key with LOCK ... WAIT: each grant is
// released at once and counted as a hand-off, and none fails.
func TestHotWaitAgainstNode(t *testing.T) {
	addr := startNode(t)
	for _, ops := range []int64{0, 200} {
		cfg := shortConfig(addr, ModeNative, WorkloadHotWait)
		cfg.Conns, cfg.Wait, cfg.Ops = 8, 5*time.Second, ops
		res, err := runBench(t.Context(), cfg, testLogger(t))
		if err != nil {
			t.Fatalf("runBench: %v", err)
		}
		checkClean(t, cfg, res)
		if res.Refusals != 0 {
			t.Errorf("Refusals = %d, want 0: every waiter is served within its WAIT", res.Refusals)
		}
		if ops > 0 && res.Cycles != ops {
			t.Errorf("Cycles = %d, want the -ops budget %d", res.Cycles, ops)
		}
	}
}
