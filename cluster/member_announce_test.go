package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestAnnounceVerified: RAFT ANNOUNCE of a follower's ID and raft address with a fake client
// address must not be recorded (followers would forward clients there): the leader calls the
// address back, and one that answers as another member, as that member of another cluster, or not
// at all is refused and the table keeps the real address; the member's own is recorded.
func TestAnnounceVerified(t *testing.T) {
	// Client addresses where nothing listens (127.0.0.1:11 for n1 ...): the followers' own
	// announcements, over RESP, fail at once and are retried; the test announces for them.
	nodes := newCluster(t, 3, func(c *Config) { c.ClientAddr = "127.0.0.1:1" + c.Core.ID[len(c.Core.ID)-1:] })
	l := testutil.Leader(t, nodes)
	f := testutil.Others(l, nodes)[0]
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("a cluster ID", func() bool { return l.ClusterID() != "" }))
	ours := l.ClusterID()

	// In-memory nodes have no client port: each address answers as the test says.
	type answer struct{ id, cluster string }
	const asOther, otherCluster, noCluster, silent = "127.0.0.1:21", "127.0.0.1:22", "127.0.0.1:23", "127.0.0.1:24"
	answers := map[string]answer{asOther: {"n9", ours}, otherCluster: {f.id, "another-cluster"}, noCluster: {f.id, ""}}
	for _, n := range nodes {
		answers[n.cfg.ClientAddr] = answer{n.id, ours}
	}
	var asked []string
	orig := askState
	askState = func(_ context.Context, _ *Member, addr string) (node.PeerState, error) {
		asked = append(asked, addr)
		a, ok := answers[addr]
		if !ok {
			return node.PeerState{}, errors.New("connection refused")
		}
		return node.PeerState{ID: a.id, ClusterID: a.cluster}, nil
	}
	t.Cleanup(func() { askState = orig })

	ctx := t.Context()
	for _, addr := range []string{asOther, otherCluster, noCluster, silent} {
		if err := l.Announce(ctx, f.id, addr, string(f.addr)); !errors.Is(err, node.ErrNotMember) {
			t.Errorf("Announce(%s, %s) = %v; want %v", f.id, addr, err, node.ErrNotMember)
		}
		if got, _ := l.MemberAddr(f.id); got == addr {
			t.Errorf("the member table holds %s for %s", addr, f.id)
		}
	}
	if len(asked) != 4 {
		t.Errorf("the leader called back %v; want each of the 4 announced addresses", asked)
	}
	if err := l.Announce(ctx, f.id, f.cfg.ClientAddr, string(f.addr)); err != nil {
		t.Fatalf("Announce of %s's own address: %v", f.id, err)
	}
	if got, _ := l.MemberAddr(f.id); got != f.cfg.ClientAddr {
		t.Errorf("the member table holds %q for %s; want %s", got, f.id, f.cfg.ClientAddr)
	}
}
