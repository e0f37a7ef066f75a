package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/server"
)

// resolveGroups returns the raft groups this node runs: what dir records
// (cluster.ReadGroupsRecord), or for a node without a record, flag (1 when 0), or for a node
// joining a cluster (joining not nil) the cluster's groups, as joining asks a member (the
// planned ones: the join waits for every member to run them), recorded then. hasState reports
// whether the node has raft state already (a cluster created before groups were recorded runs
// one). A flag that contradicts the record is refused: a cluster's groups change only through
// RAFT GROUPS (docs/groups.md), which every node records when it applies it. A joining node's
// record names no voters: it starts no group of its own, each group adds it.
func resolveGroups(dir string, flag int, hasState bool, joining func() (node.PeerState, error)) (cluster.GroupsRecord, error) {
	rec, found, err := cluster.ReadGroupsRecord(dir)
	switch {
	case err != nil:
		return cluster.GroupsRecord{}, err
	case found:
		if rec.Groups > server.MaxGroups {
			return cluster.GroupsRecord{}, fmt.Errorf("%s: want a number of raft groups from 1 to %d, found %d", filepath.Join(dir, cluster.GroupsFile), server.MaxGroups, rec.Groups)
		}
		if flag != 0 && flag != rec.Groups {
			return cluster.GroupsRecord{}, fmt.Errorf("--groups %d: this node's cluster runs %d raft groups; RAFT GROUPS adds groups to a running cluster (docs/groups.md)", flag, rec.Groups)
		}
		return rec, nil
	case hasState:
		if flag > 1 {
			return cluster.GroupsRecord{}, fmt.Errorf("--groups %d: this node's cluster runs one raft group; RAFT GROUPS adds groups to a running cluster (docs/groups.md)", flag)
		}
		return cluster.GroupsRecord{Groups: 1, Layout: 1}, nil
	}
	g := max(flag, 1)
	rec = cluster.GroupsRecord{Groups: g, Layout: g}
	if joining != nil {
		st, err := joining()
		if err != nil {
			return cluster.GroupsRecord{}, fmt.Errorf("--join: asking the cluster's raft groups: %w", err)
		}
		rec.Groups = max(st.Groups, st.Planned, 1)
		rec.Layout = min(max(st.Layout, 1), rec.Groups)
		rec.Joined = rec.Groups
		switch {
		case st.Groups > 1 && st.Layout == 0:
			return cluster.GroupsRecord{}, fmt.Errorf("--join: the member runs %d raft groups and does not say how many its cluster was created with (an older release): join through a member that runs this one", st.Groups)
		case rec.Groups > server.MaxGroups:
			return cluster.GroupsRecord{}, fmt.Errorf("--join: the cluster runs %d raft groups, more than this binary's %d", rec.Groups, server.MaxGroups)
		case flag != 0 && flag != rec.Groups:
			return cluster.GroupsRecord{}, fmt.Errorf("--groups %d: the cluster this node joins runs %d raft groups (a joining node runs its cluster's; --groups may be left out)", flag, rec.Groups)
		}
	}
	if err := cluster.WriteGroupsRecord(dir, rec); err != nil {
		return cluster.GroupsRecord{}, fmt.Errorf("recording the raft groups: %w", err)
	}
	return rec, nil
}

// recordPlans writes every groups plan group 0 applies that adds groups to what dir records
// (cluster.GroupsRecord), checking once a second until stop closes: the node runs them from
// its next start, the groups the plan added bootstrapped with its voters.
func recordPlans(dir string, running cluster.GroupsRecord, core *raftnode.Replica, log *slog.Logger, stop <-chan struct{}) {
	recorded := running.Groups
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if plan, ok := core.GroupsPlan(); ok && plan.Groups > recorded {
			rec := cluster.GroupsRecord{Groups: plan.Groups, Layout: plan.Layout, Voters: plan.Voters, Joined: running.Joined}
			if err := cluster.WriteGroupsRecord(dir, rec); err != nil {
				log.Error("cannot record the planned raft groups; retrying", "groups", plan.Groups, "err", err)
			} else {
				recorded = plan.Groups
				log.Warn("the cluster planned more raft groups: restart this node to run them (docs/groups.md)",
					"groups", plan.Groups, "running", running.Groups)
			}
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		}
	}
}

// addressedReplica is a group's replica whose leader's client address comes from group 0's
// member table: members announce their client addresses to group 0 only, and every node is a
// member of every group under the same ID.
type addressedReplica struct {
	*raftnode.Replica
	book *cluster.Member
}

func (r *addressedReplica) Leadership() node.Leadership {
	l := r.Replica.Leadership()
	if l.ID != "" && l.ClientAddr == "" {
		l.ClientAddr, _ = r.book.MemberAddr(l.ID)
	}
	return l
}

// dirHasRaftState reports whether the raft directory holds anything: a node that ran before.
func dirHasRaftState(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return len(entries) > 0, err
}

// diskSiblings are the cores of a node's raft groups, whose logs share its disk: when one
// stops for a failed disk, the others stop too (raftnode.Config.DiskFailed).
type diskSiblings struct {
	mu    sync.Mutex
	cores []*raftnode.Replica
}

func (d *diskSiblings) add(c *raftnode.Replica) {
	d.mu.Lock()
	d.cores = append(d.cores, c)
	d.mu.Unlock()
}

// stopAll is DiskFailed: on the failing core's raft goroutine, so it only starts the others'
// stops (each stops once; a core that failed already ignores it).
func (d *diskSiblings) stopAll(err error) {
	d.mu.Lock()
	cores := slices.Clone(d.cores)
	d.mu.Unlock()
	for _, c := range cores {
		c.StopForDiskFault(err)
	}
}

// groupStart is how this node starts raft group g should it find no raft state for it (one
// with state resumes and ignores both): bootstrapped with peers, or not at all (it waits for the
// group's leader to add it). A group the node joined never starts on its own, whatever its
// flags say now; a group a plan added starts with the plan's voters on every node, whatever
// flags each was first started with; any other group as the flags say: a node without --join
// bootstraps with --peers (alone without them), one with --join waits.
func groupStart(rec cluster.GroupsRecord, g int, join string, peers []cluster.Peer) (bootstrap bool, with []cluster.Peer) {
	switch {
	case g < rec.Joined:
		return false, nil
	case g >= rec.Layout && len(rec.Voters) > 0:
		for _, v := range rec.Voters {
			with = append(with, cluster.Peer{ID: v.ID, RaftAddr: v.Addr})
		}
		return true, with
	}
	return join == "", peers
}

// askJoinState asks the member at addr what it says of itself (RAFT STATS) for a joining node's
// resolveGroups, trying again every second while it does not answer (as the join itself does)
// until ctx ends.
func askJoinState(ctx context.Context, addr string, ask func(context.Context, string) (node.PeerState, error), log *slog.Logger) (node.PeerState, error) {
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := ask(actx, addr)
		cancel()
		if err == nil {
			return st, nil
		}
		if try%10 == 0 {
			log.Warn("join: the member to join through does not say which raft groups the cluster runs yet; retrying", "via", addr, "err", err)
		}
		select {
		case <-ctx.Done():
			return st, err
		case <-time.After(time.Second):
		}
	}
}
