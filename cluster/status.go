package cluster

import (
	"context"
	"sync"

	"github.com/raftlock/raftlock/node"
)

// MemberStatus lists the members with the figures each reports: this node's own Stats for
// itself, the reply to RAFT STATS on its client port (asked in parallel, as the peers ask each
// other, with Config.PeerUser's credentials) for the others. hashicorp/raft does not expose a
// follower's match index, so a member's progress is what it says it applied when asked. A
// member that cannot be asked has Err set.
func (n *Member) MemberStatus(ctx context.Context) ([]node.MemberStatus, error) {
	members, err := n.Members()
	if err != nil {
		return nil, err
	}
	out := make([]node.MemberStatus, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		if m.ID == n.cfg.Core.ID {
			s := n.Stats()
			out[i].State, out[i].Term, out[i].LastIndex = s.State, s.Term, s.LastIndex
			out[i].CommitIndex, out[i].AppliedIndex = s.CommitIndex, s.AppliedIndex
			continue
		}
		if m.ClientAddr == "" {
			out[i].Err = "no client address announced yet"
			continue
		}
		wg.Go(func() {
			st, err := n.peerAPI.State(ctx, m.ClientAddr)
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			out[i].State, out[i].Term, out[i].LastIndex = st.State, st.Term, st.LastIndex
			out[i].CommitIndex, out[i].AppliedIndex = st.CommitIndex, st.AppliedIndex
		})
	}
	wg.Wait()
	return out, nil
}
