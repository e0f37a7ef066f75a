package raftnode

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/node"
)

// statusTimeout bounds asking one member for its figures (MemberStatus).
const statusTimeout = time.Second

// MemberStatus lists the members with the figures each reports: this node's own Stats for
// itself, the reply to RAFT STATS on its client port (asked in parallel, as the peers ask each
// other, with Config.PeerUser's credentials) for the others. hashicorp/raft does not expose a
// follower's match index, so a member's progress is what it says it applied when asked. A
// member that cannot be asked has Err set.
func (n *Node) MemberStatus(ctx context.Context) ([]node.MemberStatus, error) {
	members, err := n.Members()
	if err != nil {
		return nil, err
	}
	out := make([]node.MemberStatus, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		out[i].Member = m
		if m.ID == n.cfg.ID {
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
			v, err := n.callPeer(ctx, m.ClientAddr, statusTimeout, "RAFT", "STATS")
			if err != nil {
				out[i].Err = err.Error()
				return
			}
			f := fields(v)
			u := func(name string) uint64 { x, _ := strconv.ParseUint(f[name], 10, 64); return x }
			out[i].State, out[i].Term, out[i].LastIndex = f["raft_state"], u("raft_term"), u("raft_last_index")
			out[i].CommitIndex, out[i].AppliedIndex = u("raft_commit_index"), u("raft_applied_index")
		})
	}
	wg.Wait()
	return out, nil
}
