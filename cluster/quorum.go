package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// Safe membership (DESIGN.md §10, etcd's strict reconfiguration):
//   - RAFT ADD always adds a non-voter, which counts for no quorum, so adding even a dead
//     address cannot take the cluster out of quorum. Unless added with NONVOTER, it is promoted
//     by the leader once it shows it is caught up (promotePending, Promote): it answers RAFT
//     STATS on its announced client address with its own ID, this cluster's ID and a last log
//     index within promoteLag entries of the leader's. A node that never catches up is given up
//     after promoteDeadline and stays a harmless non-voter;
//   - a voter is added (promoted) only if the voters the leader reaches, the new one counted,
//     are a quorum of the new voter count, and removed only if the remaining voters the leader
//     reaches are a quorum of the remaining count;
//   - a voter the leader reaches (a live, healthy one, the leader itself included) is removed
//     only when asked with FORCE (RAFT REMOVE id FORCE); one whose heartbeats fail is removed
//     without it. The quorum rule above holds with FORCE too;
//   - which voters the leader reaches comes from raft's own heartbeats: FailedHeartbeat and
//     ResumedHeartbeat observations (runMembership feeds them to peerState). A leader elected a
//     moment ago may not have seen a dead peer's first failed heartbeat yet (one heartbeat
//     interval, a tenth of HeartbeatTimeout, when the peer refuses connections).

const (
	// promoteLag is how far behind the leader's last index a non-voter's last index may be for
	// it to count as caught up: two full appends.
	promoteLag = 1024
	// promoteDeadline is how long the leader keeps trying to promote a member added as a voter.
	promoteDeadline = 10 * time.Minute
)

// peerState is what the leader knows of the other members beyond the configuration. Its mu
// nests inside nothing and guards no I/O.
type peerState struct {
	mu struct {
		sync.Mutex
		failing map[raft.ServerID]bool // heartbeats to it fail
		promote map[string]time.Time   // non-voters to promote once caught up, until when
	}
}

// heartbeat records what one of raft's heartbeat observations says of a peer.
func (p *peerState) heartbeat(o any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.failing == nil {
		p.mu.failing = map[raft.ServerID]bool{}
	}
	switch o := o.(type) {
	case raft.FailedHeartbeatObservation:
		p.mu.failing[o.PeerID] = true
	case raft.ResumedHeartbeatObservation:
		delete(p.mu.failing, o.PeerID)
	}
}

// leaderChanged forgets what the previous term's leader knew.
func (p *peerState) leaderChanged() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.mu.failing)
	clear(p.mu.promote)
}

func (p *peerState) reachable(id raft.ServerID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.mu.failing[id]
}

func (p *peerState) wantPromotion(id string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.promote == nil {
		p.mu.promote = map[string]time.Time{}
	}
	p.mu.promote[id] = until
}

func (p *peerState) promoted(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.mu.promote, id)
}

func (p *peerState) pending() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]time.Time, len(p.mu.promote))
	for id, t := range p.mu.promote {
		out[id] = t
	}
	return out
}

// configuration returns the latest configuration raft holds.
func (n *Member) configuration() (raft.Configuration, error) { return configurationOf(n.raft()) }

// configurationOf returns the latest configuration r holds.
func configurationOf(r *raft.Raft) (raft.Configuration, error) {
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return raft.Configuration{}, fmt.Errorf("raft configuration: %w", err)
	}
	return f.Configuration(), nil
}

// voterCount returns how many voters c has other than skip, and how many of them this leader
// reaches (itself always).
func (n *Member) voterCount(c raft.Configuration, skip string) (voters, reachable int) {
	for _, s := range c.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == skip {
			continue
		}
		voters++
		if string(s.ID) == n.cfg.Core.ID || n.peers.reachable(s.ID) {
			reachable++
		}
	}
	return voters, reachable
}

// checkAddVoter refuses to make id a voter unless the reachable voters, id counted (it just
// answered as caught up), are a quorum of the new voter count.
func (n *Member) checkAddVoter(c raft.Configuration, id string) error {
	voters, reachable := n.voterCount(c, id)
	voters, reachable = voters+1, reachable+1
	if q := voters/2 + 1; reachable < q {
		return fmt.Errorf("%w: promoting %s makes %d voters (quorum %d) but this leader reaches only %d of them; "+
			"bring the unreachable members back, or RAFT REMOVE them, first", node.ErrQuorumAtRisk, id, voters, q, reachable)
	}
	return nil
}

// checkRemove refuses to remove voter id unless the remaining reachable voters are a quorum of
// the remaining voter count, and, without force, refuses to remove a voter this leader reaches
// (itself included): a live, healthy voter leaves only when asked with FORCE, so that one
// mistaken or hostile RAFT REMOVE cannot shrink a healthy cluster (two in a row would take 3 voters to 1).
// A voter whose heartbeats fail is removed without it: replacing a dead member is routine.
func (n *Member) checkRemove(c raft.Configuration, id string, force bool) error {
	for _, s := range c.Servers {
		if string(s.ID) == id && s.Suffrage != raft.Voter {
			return nil // a non-voter counts for no quorum
		}
	}
	voters, reachable := n.voterCount(c, id)
	if voters == 0 {
		return fmt.Errorf("%w: %s is the last voter", node.ErrQuorumAtRisk, id)
	}
	if q := voters/2 + 1; reachable < q {
		return fmt.Errorf("%w: removing %s leaves %d voters (quorum %d) of which this leader reaches only %d; "+
			"bring the unreachable members back, or RAFT REMOVE an unreachable one instead", node.ErrQuorumAtRisk, id, voters, q, reachable)
	}
	if !force && (id == n.cfg.Core.ID || n.peers.reachable(raft.ServerID(id))) {
		return fmt.Errorf("%w: %s is a voter this leader reaches (it answers heartbeats); to remove a live member, "+
			"RAFT REMOVE %s FORCE (it stops serving). A member that is down is removed without FORCE once the leader's "+
			"heartbeats to it fail (within a second of its going down)", node.ErrLiveVoter, id, id)
	}
	return nil
}

// caughtUp asks member id, on the client address it announced, whether it holds the log up to
// within promoteLag entries of this leader's last index, as a member of this cluster.
func (n *Member) caughtUp(ctx context.Context, id string) error {
	addr, ok := n.MemberAddr(id)
	if !ok || addr == "" {
		return fmt.Errorf("%w: %s has not announced its client address yet", node.ErrNotCaughtUp, id)
	}
	st, err := askState(ctx, n, addr)
	if err != nil {
		return fmt.Errorf("%w: %s does not answer at %s: %v", node.ErrNotCaughtUp, id, addr, err)
	}
	if st.ID != id {
		return fmt.Errorf("%w: the node at %s says it is %q, not %s", node.ErrNotCaughtUp, addr, st.ID, id)
	}
	if ours, theirs := n.ClusterID(), st.ClusterID; ours != "" && theirs != "" && ours != theirs {
		return fmt.Errorf("%w: %s at %s is a member of cluster %s, this is cluster %s", node.ErrForeignCluster, id, addr, theirs, ours)
	}
	if lead := n.raft().LastIndex(); st.LastIndex+promoteLag < lead {
		return fmt.Errorf("%w: %s holds the log up to %d, the leader's is at %d", node.ErrNotCaughtUp, id, st.LastIndex, lead)
	}
	return nil
}

// promotePending tries to promote each member added as a voter (AddServer) that is still a
// non-voter; it reports whether some are left to try again later.
func (n *Member) promotePending(ctx context.Context) bool {
	if !n.isLeader() {
		return false
	}
	left := false
	for id, until := range n.peers.pending() {
		err := n.Promote(ctx, id)
		switch {
		case err == nil:
			n.peers.promoted(id)
		case errors.Is(err, node.ErrNoSuchMember):
			n.peers.promoted(id) // removed meanwhile
		case time.Now().After(until):
			n.peers.promoted(id)
			n.log.Warn("giving up promoting a member: it did not catch up; it stays a non-voter "+
				"(RAFT PROMOTE to try again, RAFT REMOVE to drop it)", "member", id, "err", err)
		default:
			left = true
		}
	}
	return left
}
