package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// settledVoters is the leader's configuration as plan voters, sorted by ID: refused while a
// member is a non-voter or the newest configuration is not the committed one (a change in
// progress).
func (n *Member) settledVoters() ([]fsm.PlanVoter, error) {
	c, err := n.configuration()
	if err != nil {
		return nil, err
	}
	for _, s := range c.Servers {
		if s.Suffrage != raft.Voter {
			return nil, fmt.Errorf("member %s is not a voter: promote or remove it first, so that every new group starts with the cluster's voters", s.ID)
		}
		if _, member, known := n.committedConf.get(string(s.ID)); !known || !member {
			return nil, errors.New("a membership change is not committed yet; try again")
		}
	}
	if n.committedConf.len() != len(c.Servers) {
		return nil, errors.New("a membership change is not committed yet; try again")
	}
	return planVoters(c), nil
}

// planVoters is conf as a plan's voters, sorted by ID: every node that derives them from one
// configuration, in whatever order it lists its servers, holds the same plan.
func planVoters(conf raft.Configuration) []fsm.PlanVoter {
	var out []fsm.PlanVoter
	for _, s := range conf.Servers {
		out = append(out, fsm.PlanVoter{ID: string(s.ID), Addr: string(s.Address)})
	}
	slices.SortFunc(out, func(a, b fsm.PlanVoter) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PeersAsVoters is peers as a plan's voters, sorted as planVoters sorts them (a groups record a
// recovery rewrites: cmd/raftlock).
func PeersAsVoters(peers []Peer) []fsm.PlanVoter {
	var conf raft.Configuration
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	return planVoters(conf)
}

// PlanGroups commits, on group 0's leader, a plan to run want.Groups raft groups, created with
// want.Layout (RAFT GROUPS, docs/groups.md "From one group to several"): its voters are this
// configuration's, which must have no non-voter (a change in progress). running is how many
// groups this node runs: the plan must add some, to them and to the last plan. Every node
// records the plan when it applies it (cmd/raftlock) and runs the groups from its next start.
func (n *Member) PlanGroups(ctx context.Context, want fsm.GroupsPlan, running int) (fsm.GroupsPlan, error) {
	if !n.isLeader() {
		return fsm.GroupsPlan{}, n.notLeader()
	}
	n.changes.Lock()
	defer n.changes.Unlock()
	have := running
	last, planned := n.core.Load().GroupsPlan()
	if planned {
		have = max(have, last.Groups)
	}
	if want.Groups <= have {
		return fsm.GroupsPlan{}, fmt.Errorf("the cluster runs or plans %d raft groups already; a plan can only add groups", have)
	}
	voters, err := n.settledVoters()
	if err != nil {
		return fsm.GroupsPlan{}, err
	}
	if planned {
		if notRun := n.plannedGroupsRun(ctx, ""); notRun != nil && !slices.Equal(voters, last.Voters) {
			// A node not yet restarted into the last plan starts every group it added with the
			// voters of the newest plan it holds: this one's must then be the last one's.
			return fsm.GroupsPlan{}, fmt.Errorf("the members changed since the last groups plan, and %w", notRun)
		}
	}
	want.Voters = voters
	cmd := fsm.Command{Kind: fsm.KindPlanGroups, Key: fsm.EncodeGroupsPlan(want)}
	if err := cmd.Validate(); err != nil {
		return fsm.GroupsPlan{}, err
	}
	res, err := n.core.Load().Exec(ctx, nil, func(node.View) []fsm.Command { return []fsm.Command{cmd} }, nil)
	if err != nil {
		return fsm.GroupsPlan{}, err
	}
	if len(res) != 1 || res[0].Status != fsm.StatusGroupsPlanned {
		return fsm.GroupsPlan{}, errors.New("the groups plan was refused: another plan committed first")
	}
	n.log.Info("raft groups planned", "groups", want.Groups, "layout", want.Layout, "voters", len(want.Voters))
	return want, nil
}
