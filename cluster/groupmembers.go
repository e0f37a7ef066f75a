package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Membership changes of a cluster of several raft groups. Every node is a member of every group
// under one ID (docs/groups.md), so RAFT ADD, PROMOTE and REMOVE change every group's
// configuration: GroupsAdmin runs them on group 0's leader, one group at a time, each group's
// step on that group's leader (here, or RAFT ADD|PROMOTE|REMOVE ... GROUP g on its client port).
// Group 0's configuration is the cluster's membership (its member table holds the client
// addresses, its handshake gate admits a node's raft connection, its plan names the voters of
// added groups), so it changes first when a node arrives and last when one leaves: at every
// moment a member of any group is a member of group 0. A change interrupted part way (its
// leader lost) is finished by repeating it: each group's step is idempotent, and a promotion
// first adds the member to any group group 0 lists it in but that lacks it.

// groupStepWait bounds how long one group's step waits for that group's leader (an election, the
// balancer's hand-off) before the change gives up; groupStepTimeout bounds the step itself.
const (
	groupStepWait    = 10 * time.Second
	groupStepTimeout = 15 * time.Second
)

// GroupsAdmin is the administration of a node of several raft groups (server.Admin): group 0's
// member for what is the cluster's (member table, announcements, plans), every group for
// membership changes and backups.
type GroupsAdmin struct {
	*Member
	groups []*Member
	// changes serializes the membership changes and plans this node runs across its groups.
	changes sync.Mutex
}

// NewGroupsAdmin returns the administration of groups, this node's members of its raft groups
// (index = group number).
func NewGroupsAdmin(groups []*Member) *GroupsAdmin {
	return &GroupsAdmin{Member: groups[0], groups: groups}
}

// Backup copies every group (BackupGroups).
func (a *GroupsAdmin) Backup(ctx context.Context) ([]byte, error) {
	return BackupGroups(ctx, a.groups)
}

// AddServer adds member id at raftAddr to every group, group 0 first (where clientAddr is
// checked and recorded), as a non-voter each group's leader promotes once it has caught up in
// that group when voter is set. It returns the index of group 0's configuration change: a
// joining node that applied it has group 0's state from before its arrival.
func (a *GroupsAdmin) AddServer(ctx context.Context, id, raftAddr, clientAddr string, voter bool) (uint64, error) {
	if !a.isLeader() {
		return 0, a.notLeader()
	}
	a.changes.Lock()
	defer a.changes.Unlock()
	index, err := a.Member.AddServer(ctx, id, raftAddr, clientAddr, voter)
	if err != nil {
		return 0, err
	}
	for g := 1; g < len(a.groups); g++ {
		if err := a.addIn(ctx, g, id, raftAddr, voter); err != nil {
			return 0, fmt.Errorf("%s is a member of raft group 0 but not yet of every group (RAFT PROMOTE %s, or RAFT ADD again, finishes it): %w", id, id, err)
		}
	}
	return index, nil
}

// Promote makes id a voter of every group, group 0 last: in a group that does not list it yet
// (a RAFT ADD cut short) it is added first, at group 0's raft address for it. Each group checks
// that it has caught up there (Member.Promote).
func (a *GroupsAdmin) Promote(ctx context.Context, id string) error {
	if !a.isLeader() {
		return a.notLeader()
	}
	a.changes.Lock()
	defer a.changes.Unlock()
	raftAddr, err := a.raftAddrOf(id)
	if err != nil {
		return err
	}
	for g := 1; g < len(a.groups); g++ {
		if !listsMember(a.groups[g], id) {
			if err := a.addIn(ctx, g, id, raftAddr, true); err != nil {
				return err
			}
		}
		err := a.inGroup(ctx, g, []string{"RAFT", "PROMOTE", id}, func(m *Member) error { return m.Promote(ctx, id) })
		if err != nil {
			return err
		}
	}
	return a.Member.Promote(ctx, id)
}

// RemoveServer removes id from every group, group 0 last, each group's leader checking its
// quorum and FORCE for a live voter (Member.RemoveServer). A group that no longer lists it is
// done already: a removal cut short is finished by repeating it.
func (a *GroupsAdmin) RemoveServer(ctx context.Context, id string, force bool) error {
	if !a.isLeader() {
		return a.notLeader()
	}
	a.changes.Lock()
	defer a.changes.Unlock()
	raftAddr, err := a.raftAddrOf(id)
	if err != nil {
		return err
	}
	if err := a.plannedGroupsRun(ctx, id); err != nil {
		return err
	}
	args := []string{"RAFT", "REMOVE", id}
	if force {
		args = append(args, "FORCE")
	}
	var done []int // the groups this removal took id out of
	for g := len(a.groups) - 1; g >= 1; g-- {
		if !listsMember(a.groups[g], id) {
			continue
		}
		err := a.inGroup(ctx, g, args, func(m *Member) error { return m.RemoveServer(ctx, id, force) })
		switch {
		case err == nil:
			done = append(done, g)
		case errors.Is(err, node.ErrNoSuchMember), strings.Contains(err.Error(), node.ErrNoSuchMember.Error()):
		default:
			return a.undoRemoval(ctx, id, raftAddr, done, fmt.Errorf("%s was not removed from raft group %d: %w", id, g, err))
		}
	}
	if err := a.Member.RemoveServer(ctx, id, force); err != nil {
		return a.undoRemoval(ctx, id, raftAddr, done, fmt.Errorf("%s was not removed from raft group 0: %w", id, err))
	}
	return nil
}

// raftAddrOf is member id's raft address in group 0's newest configuration, where a change's
// other groups take it from.
func (a *GroupsAdmin) raftAddrOf(id string) (string, error) {
	c, err := a.configuration()
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return "", fmt.Errorf("%w: %s", node.ErrNoSuchMember, id)
	}
	return string(c.Servers[i].Address), nil
}

// undoRemoval adds id back, as a voter once caught up, to the groups a removal that failed
// (cause) had taken it out of, so that a refused removal leaves the member where it was: a
// member of every group. What it cannot add back it says: RAFT PROMOTE id, or RAFT REMOVE id
// again, ends the mixed state.
func (a *GroupsAdmin) undoRemoval(ctx context.Context, id, raftAddr string, done []int, cause error) error {
	var left []string
	for _, g := range done {
		if err := a.addIn(ctx, g, id, raftAddr, true); err != nil {
			left = append(left, strconv.Itoa(g))
			a.log.Warn("a refused removal could not add the member back to a group it had left", "member", id, "group", g, "err", err)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%w; it stays out of raft groups %s, which it had left (RAFT PROMOTE %s adds it back, RAFT REMOVE %s again finishes the removal)",
			cause, strings.Join(left, ", "), id, id)
	}
	if len(done) > 0 {
		return fmt.Errorf("%w; it was added back to the groups it had left", cause)
	}
	return cause
}

// PlanGroups plans more groups (Member.PlanGroups) once every group's configuration is group
// 0's: a plan's voters start the groups it adds, and must be every group's members.
func (a *GroupsAdmin) PlanGroups(ctx context.Context, want fsm.GroupsPlan, running int) (fsm.GroupsPlan, error) {
	a.changes.Lock()
	defer a.changes.Unlock()
	c, err := a.configuration()
	if err != nil {
		return fsm.GroupsPlan{}, err
	}
	for g := 1; g < len(a.groups); g++ {
		cg, err := a.groups[g].configuration()
		if err != nil {
			return fsm.GroupsPlan{}, err
		}
		if !sameMembers(c, cg) {
			return fsm.GroupsPlan{}, fmt.Errorf("raft group %d's members (%s) are not group 0's (%s) yet: a membership change is in progress; "+
				"finish it (RAFT PROMOTE or REMOVE again) and try again", g, configString(cg), configString(c))
		}
	}
	return a.Member.PlanGroups(ctx, want, running)
}

// addIn adds id at raftAddr to group g as a non-voter, which that group's leader promotes once
// caught up when voter is set: one group's step of a change (inGroup).
func (a *GroupsAdmin) addIn(ctx context.Context, g int, id, raftAddr string, voter bool) error {
	args := []string{"RAFT", "ADD", id, raftAddr}
	if !voter {
		args = append(args, "NONVOTER")
	}
	return a.inGroup(ctx, g, args, func(m *Member) error {
		_, err := m.AddServer(ctx, id, raftAddr, "", voter)
		return err
	})
}

// inGroup runs one group's step of a membership change: here when this node leads group g,
// else as args ... GROUP g on the client port of group g's leader, waiting up to groupStepWait
// for one.
func (a *GroupsAdmin) inGroup(ctx context.Context, g int, args []string, here func(*Member) error) error {
	m := a.groups[g]
	ctx, cancel := context.WithTimeout(ctx, groupStepTimeout)
	defer cancel()
	for wait := time.Now().Add(groupStepWait); ; {
		if m.isLeader() {
			return here(m)
		}
		id, addr, err := groupLeaderAddr(a.Member, m, g)
		if err == nil {
			_, err = a.peerAPI.call(ctx, addr, groupStepTimeout, append(args, "GROUP", strconv.Itoa(g))...)
			if err == nil {
				return nil
			}
			if !noLeaderNow(err) {
				return fmt.Errorf("raft group %d's leader %s at %s: %w", g, id, addr, err)
			}
		}
		if time.Now().After(wait) {
			return fmt.Errorf("raft group %d: %w", g, err)
		}
		if err := pauseRetry(ctx); err != nil {
			return fmt.Errorf("raft group %d: %w", g, err)
		}
	}
}

// listsMember reports whether id is in the newest configuration m's raft holds.
func listsMember(m *Member, id string) bool {
	c, err := m.configuration()
	return err == nil && slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id })
}

// sameMembers reports whether a and b list the same servers, each with the same address and
// suffrage, in whatever order.
func sameMembers(a, b raft.Configuration) bool {
	if len(a.Servers) != len(b.Servers) {
		return false
	}
	for _, s := range a.Servers {
		if !slices.Contains(b.Servers, s) {
			return false
		}
	}
	return true
}

// plannedGroupsRun refuses a membership change while the cluster's groups plan (RAFT GROUPS) is
// not run by every member but except (the member the change is about): a node that restarts
// into the plan starts its added groups with the plan's voters, which a change made meanwhile
// would contradict. It runs on group 0's leader, where the plan is; without a plan it refuses
// nothing. Once every member ran the plan it is not asked again: a node never runs fewer groups
// than it did, and a node joins with the groups planned (cmd/raftlock, Member.join).
func (n *Member) plannedGroupsRun(ctx context.Context, except string) error {
	plan, planned := n.core.Load().GroupsPlan()
	if !planned || int64(plan.Groups) <= n.planRun.Load() {
		return nil
	}
	if runs := max(n.cfg.Core.Groups, 1); runs < plan.Groups {
		return fmt.Errorf("%w: this node runs %d of the %d raft groups the cluster planned (RAFT GROUPS): restart every member into the plan before changing the members (docs/groups.md)",
			node.ErrPlanNotRun, runs, plan.Groups)
	}
	c, err := n.configuration()
	if err != nil {
		return err
	}
	var exceptErr error // whether except runs the plan: the answer does not refuse its change
	for _, s := range c.Servers {
		id := string(s.ID)
		if id == n.cfg.Core.ID {
			continue
		}
		err := n.runsPlan(ctx, id, plan.Groups)
		switch {
		case id == except:
			exceptErr = err
		case err != nil:
			return err
		}
	}
	if exceptErr == nil {
		n.planRun.Store(int64(plan.Groups))
	}
	return nil
}

// runsPlan asks member id (RAFT STATS on its client address) whether it runs groups raft
// groups; an error says why not, or why it is not known.
func (n *Member) runsPlan(ctx context.Context, id string, groups int) error {
	addr, _ := n.MemberAddr(id)
	if addr == "" {
		return fmt.Errorf("%w: member %s has not announced its client address, so whether it runs the planned raft groups is not known", node.ErrPlanNotRun, id)
	}
	st, err := n.peerAPI.State(ctx, addr)
	if err != nil {
		return fmt.Errorf("%w: member %s does not answer at %s (%v): whether it runs the planned raft groups is not known; "+
			"bring it back, or RAFT REMOVE it", node.ErrPlanNotRun, id, addr, err)
	}
	if runs := max(st.Groups, 1); runs < groups {
		return fmt.Errorf("%w: member %s runs %d of the %d raft groups the cluster planned (RAFT GROUPS): restart it into the plan first", node.ErrPlanNotRun, id, runs, groups)
	}
	return nil
}
