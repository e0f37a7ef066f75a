package powerloss

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// configTimeout bounds one configuration change's enqueueing in raft.
const configTimeout = 200 * time.Millisecond

// runMembership removes a node from the configuration and adds it back, again and again,
// through whichever node leads, until ctx ends: cuts land in the middle of changes.
//
// The same node every time: with two different nodes removed in turn, a voter that lags behind
// the second removal holds a configuration without the first node, refuses its votes
// (hashicorp/raft's "not in configuration" check, hashicorp/raft#526), and a cluster whose
// only up-to-date voters are those two never elects a leader again (seen under -race, seed
// 4354685564936845385: n3 at configuration {n2,n3}, n1 and n2 at {n1,n3} further on).
func (c *cluster) runMembership(ctx context.Context, rng *rand.Rand) {
	n := c.nodes[rng.IntN(len(c.nodes))]
	for ctx.Err() == nil {
		time.Sleep(time.Duration(rng.Int64N(int64(20 * time.Millisecond))))
		l := c.readyLeader()
		if l == nil {
			continue
		}
		// One change at a time, as cluster management makes them: a removal whose future
		// failed may still commit, and a second removal on top of it can leave a lagging voter
		// whose latest configuration holds neither candidate, which hashicorp/raft then never
		// votes for (requestVote's "not in configuration" check, hashicorp/raft#526).
		if missing, err := c.missing(); err != nil || len(missing) > 0 {
			_ = c.addMissing(ctx, 0)
			continue
		}
		c.changing.Store(true)
		// WaitFuture, not the future's Error: hashicorp/raft leaves a configuration change
		// unanswered when its leader shuts down with the entry committed but not yet applied
		// (raftnode's awaitFuture), as a cut does.
		if err := l.rep.WaitFuture(l.rep.Raft().RemoveServer(raft.ServerID(n.id), 0, configTimeout)); err == nil {
			c.stats.mu.Lock()
			c.stats.changes++
			c.stats.mu.Unlock()
		}
		_ = c.addMissing(ctx, 0)
		c.changing.Store(false)
	}
}

// addMissing adds every node the leader's configuration lacks back as a voter, until there is
// none or ctx ends (timeout > 0: or timeout passes, then it returns the error).
func (c *cluster) addMissing(ctx context.Context, timeout time.Duration) error {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	for {
		missing, err := c.missing()
		if err == nil && len(missing) == 0 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%v not in the configuration", missing)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !deadline.IsZero() && time.Now().After(deadline) {
			return err
		}
		if l := c.readyLeader(); l != nil {
			for _, n := range missing {
				_ = l.rep.WaitFuture(l.rep.Raft().AddVoter(raft.ServerID(n.id), n.addr, 0, configTimeout))
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// missing returns the nodes the ready leader's latest configuration does not hold as voters.
func (c *cluster) missing() ([]*pnode, error) {
	l := c.readyLeader()
	if l == nil {
		return nil, fmt.Errorf("no ready leader")
	}
	f := l.rep.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []*pnode
	for _, n := range c.nodes {
		if !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
			return s.ID == raft.ServerID(n.id) && s.Suffrage == raft.Voter
		}) {
			out = append(out, n)
		}
	}
	return out, nil
}
