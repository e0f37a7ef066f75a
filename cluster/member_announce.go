package cluster

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/node"
)

// A member's client address gets into the member table only when the leader, calling that
// address, finds the member there (DESIGN.md §10: membership is announced only by the member
// itself). RAFT ANNOUNCE names the
// member, its client address and its raft address; Announce checks the name and raft address
// against the configuration, and before anything is recorded the leader calls the announced
// client address back and asks who answers there (verifyAnnounced): it must say it is that
// member, of this cluster. A client address is where followers forward every request and where
// a leadership transfer sends clients, so an address that answers as someone else, as a member of
// another cluster or not at all is refused: RAFT ANNOUNCE of a follower's ID and its public raft
// address with a fake client address once sent clients' LOCKs to the fake.
//
// The call-back proves what the node at the address says, not who it is: a server built to
// answer RAFT STATS with a member's ID and this cluster's ID (both readable with RAFT STATS)
// passes. Against that, the client port's TLS with member identities checks the certificate of
// the node called back, and with credentials set only a user allowed RAFT may announce at all.
// The member itself announces to the leader directly (RAFT ANNOUNCE is not forwarded).

// askState asks the node at a client address what it says of itself (RAFT STATS): who it is
// and how far its log goes. The leader asks it of an announced address (verifyAnnounced) and of
// a non-voter to promote (caughtUp). Tests of the decisions replace it to reach in-memory
// nodes, which have no client port.
var askState = func(ctx context.Context, n *Member, addr string) (node.PeerState, error) {
	return n.peerAPI.StateOf(ctx, addr, n.cfg.Core.Group)
}

// verifyAnnounced checks, on the leader, that the node at clientAddr answers as member id of
// this cluster. An address the member table already holds for id is not asked again.
func (n *Member) verifyAnnounced(ctx context.Context, id, clientAddr string) error {
	if cur, ok := n.MemberAddr(id); ok && cur == clientAddr {
		return nil
	}
	st, err := askState(ctx, n, clientAddr)
	if err != nil {
		return fmt.Errorf("%w: the leader called %s back to check that member %s answers there, and got no answer: %v",
			node.ErrNotMember, clientAddr, id, err)
	}
	if st.ID != id {
		return fmt.Errorf("%w: the node at %s says it is %q, not %s", node.ErrNotMember, clientAddr, st.ID, id)
	}
	// A new cluster has no ID until its first leader's entry commits: then the member ID is all
	// there is to check.
	if ours, theirs := n.ClusterID(), st.ClusterID; ours != "" && theirs != ours {
		return fmt.Errorf("%w: the node at %s says it is %s of cluster %q; this is cluster %s",
			node.ErrNotMember, clientAddr, id, theirs, ours)
	}
	return nil
}
