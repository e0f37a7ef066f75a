package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/tests/testutil"
)

// A sole voter needs nobody's heartbeat: with a heartbeat timeout of 20 s, a one-node cluster
// is the leader within seconds of its bootstrap and of a restart on its stores, not after
// 20–40 s.
func TestSoleVoterStandsAtOnce(t *testing.T) {
	slow := func(c *Config) {
		c.Core.HeartbeatTimeout = 20 * time.Second
		c.Core.ElectionTimeout = 20 * time.Second
	}
	within := 5 * time.Second // a quarter of the timeout: raft's own wait cannot pass this
	leaderWithin := func(n *testNode) {
		t.Helper()
		if err := testutil.Poll(within, testutil.PollInterval, func() error {
			if !n.IsLeader() {
				return errors.New("not the ready leader")
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v within %v of its start, with a heartbeat timeout of %v", n.id, err, within, n.cfg.Core.HeartbeatTimeout)
		}
	}
	cfg := testConfig("n1")
	cfg.Bootstrap = true
	slow(&cfg)
	n := startNode(t, cfg, newStores())
	leaderWithin(n)
	mustLock(t, n, "k", "o", 60_000)

	n = restart(t, n)
	leaderWithin(n)
	if got := n.Core().Raft().State(); got != raft.Leader {
		t.Fatalf("raft state %v after the restart, want Leader", got)
	}
	if hb := n.Core().Raft().ReloadableConfig().HeartbeatTimeout; hb != 20*time.Second {
		t.Errorf("heartbeat timeout %v after standing, want the configured 20s back", hb)
	}
}
