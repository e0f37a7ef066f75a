package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
)

// maxGroups bounds --groups. Each group costs every node a raft instance (about six
// goroutines, heartbeats to every peer, a lease timer), its own log files (an 8 MiB spare
// segment) and its share of the status; DESIGN.md §13 keeps G to tens.
const maxGroups = 256

// resolveGroups returns the number of raft groups this node runs: what dir records
// (cluster.ReadGroupsRecord), or for a node without a record, flag (1 when 0), recorded then.
// hasState reports whether the node has raft state already (a cluster created before groups were
// recorded runs one). A flag that contradicts the record is refused: a cluster's groups cannot
// change (yet).
func resolveGroups(dir string, flag int, hasState bool) (int, error) {
	g, found, err := cluster.ReadGroupsRecord(dir)
	switch {
	case err != nil:
		return 0, err
	case found:
		if g > maxGroups {
			return 0, fmt.Errorf("%s: want a number of raft groups from 1 to %d, found %d", filepath.Join(dir, cluster.GroupsFile), maxGroups, g)
		}
		if flag != 0 && flag != g {
			return 0, fmt.Errorf("--groups %d: this node's cluster was created with %d raft groups, which cannot change", flag, g)
		}
		return g, nil
	case hasState:
		if flag > 1 {
			return 0, fmt.Errorf("--groups %d: this node's cluster was created with one raft group, which cannot change", flag)
		}
		return 1, nil
	}
	g = max(flag, 1)
	if err := cluster.WriteGroupsRecord(dir, g); err != nil {
		return 0, fmt.Errorf("recording the raft groups: %w", err)
	}
	return g, nil
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

// groupsAdmin is group 0's administration on a node of several raft groups, whose RAFT BACKUP
// copies every group (cluster.BackupGroups).
type groupsAdmin struct {
	*cluster.Member
	members []*cluster.Member
}

func (a *groupsAdmin) Backup(ctx context.Context) ([]byte, error) {
	return cluster.BackupGroups(ctx, a.members)
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
