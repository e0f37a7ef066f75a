package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/store"
)

// backupCatchUp bounds how long a follower waits to apply what the leader had applied when a
// backup was asked of it.
const backupCatchUp = 30 * time.Second

// ReadIndex returns, on the ready leader, an index that every write acknowledged before the
// call is at or below: the index of the last entry its table applied, read before leadership is
// confirmed (a leader replies only once a write is applied on it, and a ready leader has
// applied everything its predecessors committed). A follower that has applied up to it has
// every such write. RAFT READINDEX serves it to followers taking a backup.
func (n *Member) ReadIndex(ctx context.Context) (uint64, error) {
	if !n.isLeader() {
		return 0, n.notLeader()
	}
	index := n.applied()
	if err := n.core.Load().VerifyLeader(ctx); err != nil {
		return 0, err
	}
	return index, nil
}

// Backup returns a backup file (package backup) of this node's whole replicated state, taken
// while it serves. It is linearizable: it holds every write acknowledged before Backup was
// called. The leader reads its table and then confirms its leadership; a follower asks the
// leader for its read index (RAFT READINDEX, over the client port, logged in as the node's
// peer user) and reads its own table once it has applied that far, so a backup from a
// follower costs the leader one round trip. Each lock's lease in the file is what it has left
// by this node's timer (at least 1 ms), rounded up to the millisecond.
func (n *Member) Backup(ctx context.Context) ([]byte, error) {
	snap, term, err := n.backupTable(ctx, n.leaderReadIndex)
	if err != nil {
		return nil, err
	}
	if err := fsm.CheckOwnership([]fsm.Slots{snap.Slots()}); err != nil {
		return nil, errGroupsNotRunHere(snap, 1, err)
	}
	if mv, moving := snap.Slots().Moving(); moving {
		// Only a node of one group whose cluster planned more (RAFT GROUPS) has a move in flight
		// in a one-table backup: restored, nothing would decide it.
		return nil, fmt.Errorf("backup: slots %d-%d are moving to raft group %d, which this node does not run: retry once the move ended, from a node that runs it", mv.First, mv.Last, mv.Target)
	}
	return backup.Encode(backup.Header{
		ClusterID: n.ClusterID(), SourceNode: n.cfg.Core.ID, Part: backup.Part{Term: term}, Created: n.cfg.Core.Now().UTC(),
	}, snap)
}

// BackupGroups returns a backup file of every raft group of this node (members, index = group,
// members[0] holding the member table), as Backup does for one: each group's table holds every
// write acknowledged in that group before BackupGroups was called. The groups are read one
// after the other, each at its own applied index: the file is not one moment of the whole
// cluster (no write spans two groups, so no write is seen in part; a slot move does, and a
// read across one is taken again: fsm.CheckOwnership). A follower asks each
// group's leader for its read index with RAFT READINDEX g, at the leader's client address
// from group 0's member table.
func BackupGroups(ctx context.Context, members []*Member) ([]byte, error) {
	if len(members) == 1 {
		return members[0].Backup(ctx)
	}
	// The groups are read one after the other, so a slot move between two reads would show its
	// slot in both groups or in none: such a read is taken again.
	var err error
	for range backupReads {
		var h backup.Header
		var snaps []*fsm.Snapshot
		if h, snaps, err = readGroups(ctx, members); err != nil {
			return nil, err
		}
		owners := make([]fsm.Slots, len(snaps))
		for g, s := range snaps {
			owners[g] = s.Slots()
		}
		if err = fsm.CheckOwnership(owners); err == nil {
			return backup.EncodeGroups(h, snaps)
		}
		if servedElsewhere(snaps) {
			return nil, errGroupsNotRunHere(snaps[0], len(snaps), err)
		}
	}
	return nil, fmt.Errorf("backup: the groups' slots kept moving while they were read (%d reads): %w", backupReads, err)
}

// servedElsewhere reports whether a slot is served by none of snaps' groups and was last released
// to a group past them: one this node does not run (yet). Any other disagreement is a move seen
// on both sides, which reading again resolves.
func servedElsewhere(snaps []*fsm.Snapshot) bool {
	slotsOf := func(g int) fsm.Slots { return snaps[g].Slots() }
	for slot := range fsm.HashSlots {
		if _, _, served := fsm.OwnerOf(len(snaps), slotsOf, slot); served {
			continue
		}
		if to, ok := fsm.ReleasedTo(len(snaps), slotsOf, slot); ok && to >= len(snaps) {
			return true
		}
	}
	return false
}

// errGroupsNotRunHere is a backup's refusal on a node whose groups do not serve every slot:
// slots moved to groups its cluster added (RAFT GROUPS) that this node does not run until it is
// restarted. A backup of the groups it runs would restore a cluster without those slots' keys.
func errGroupsNotRunHere(group0 *fsm.Snapshot, running int, err error) error {
	if plan, ok := group0.GroupsPlan(); ok && plan.Groups > running {
		return fmt.Errorf("backup: this node runs %d raft groups and its cluster planned %d, which serve slots this node does not (%v): "+
			"restart it to run them (RAFT GROUPS, docs/groups.md) or back up from a node that runs them", running, plan.Groups, err)
	}
	return fmt.Errorf("backup: %w", err)
}

// groupLeaderAddr is the ID and client address of the leader of group g (its member m), the
// address from group 0's member table (book), or an error when either is not known.
func groupLeaderAddr(book, m *Member, g int) (id, addr string, err error) {
	id, _ = m.LeaderClient()
	addr, _ = book.MemberAddr(id)
	if id == "" || addr == "" {
		return "", "", fmt.Errorf("raft group %d: %w", g, m.notLeader())
	}
	return id, addr, nil
}

// backupReads bounds how often BackupGroups reads the groups again while slots move.
const backupReads = 5

// readGroups reads every group's table for BackupGroups, each holding every write
// acknowledged in that group before it was read.
func readGroups(ctx context.Context, members []*Member) (backup.Header, []*fsm.Snapshot, error) {
	book := members[0]
	h := backup.Header{ClusterID: book.ClusterID(), SourceNode: book.cfg.Core.ID, Created: book.cfg.Core.Now().UTC()}
	snaps := make([]*fsm.Snapshot, len(members))
	for g, m := range members {
		readIndex := func(ctx context.Context) (uint64, error) {
			id, addr, err := groupLeaderAddr(book, m, g)
			if err != nil {
				return 0, fmt.Errorf("backup: %w", err)
			}
			index, err := book.peerAPI.ReadIndexOf(ctx, addr, g)
			if err != nil {
				return 0, fmt.Errorf("backup: raft group %d: read index from the leader %s at %s: %w", g, id, addr, err)
			}
			return index, nil
		}
		snap, term, err := m.backupTable(ctx, readIndex)
		if err != nil {
			return h, nil, fmt.Errorf("raft group %d: %w", g, err)
		}
		snaps[g] = snap
		h.Groups = append(h.Groups, backup.Part{Term: term})
	}
	return h, snaps, nil
}

// backupTable returns this node's table holding every write acknowledged before the call, with
// each lock's lease what it has left, and the raft term: read and then confirmed on the
// leader, or read once this node applied the leader's read index (leaderIndex) on a follower.
func (n *Member) backupTable(ctx context.Context, leaderIndex func(context.Context) (uint64, error)) (*fsm.Snapshot, uint64, error) {
	var want uint64
	leader := n.isLeader()
	if !leader {
		var err error
		if want, err = leaderIndex(ctx); err != nil {
			return nil, 0, err
		}
		if err := n.awaitApplied(ctx, want); err != nil {
			return nil, 0, err
		}
	}
	var snap *fsm.Snapshot
	var clock int64
	core := n.core.Load()
	core.ReadTable(func(m *fsm.Machine) {
		snap = m.Snapshot()
		clock = core.LeaseNow()
	})
	if leader {
		if err := core.VerifyLeader(ctx); err != nil {
			return nil, 0, fmt.Errorf("backup: %w", err)
		}
	}
	snap = snap.WithLeases(leaseLeft(clock))
	n.log.Info("backup taken", "locks", snap.Len(), "applied", snap.Applied(), "read_index", want, "leader", leader)
	return snap, n.raft().CurrentTerm(), nil
}

// applied is the index of the last entry this node's table applied.
func (n *Member) applied() (index uint64) {
	n.core.Load().ReadTable(func(m *fsm.Machine) { index = m.Applied() })
	return index
}

// leaderReadIndex asks the leader for its read index.
func (n *Member) leaderReadIndex(ctx context.Context) (uint64, error) {
	id, addr := n.LeaderClient()
	if addr == "" {
		return 0, n.notLeader()
	}
	index, err := n.peerAPI.ReadIndex(ctx, addr)
	if err != nil {
		return 0, fmt.Errorf("backup: read index from the leader %s at %s: %w", id, addr, err)
	}
	return index, nil
}

// awaitApplied waits until this node's table has applied index, for at most backupCatchUp.
func (n *Member) awaitApplied(ctx context.Context, index uint64) error {
	ctx, cancel := context.WithTimeout(ctx, backupCatchUp)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		applied := n.applied()
		if applied >= index {
			return nil
		}
		select {
		case <-tick.C:
		case <-n.stop:
			return node.ErrShutdown
		case <-ctx.Done():
			return fmt.Errorf("backup: this node applied %d, the leader's read index is %d: not caught up within %v: %w",
				applied, index, backupCatchUp, ctx.Err())
		}
	}
}

// RestoreBackup writes a new data dir at dir, for node id of a new cluster of peers, seeded
// from a backup file's table (backup.Decode's). The dir starts as a raft snapshot of the table
// at the backup's applied index with peers as its committed configuration, and an empty log:
// a node started on it serves the table, and its voters elect a leader among the peers each
// restored from the same file (or a single one, which others then join). The table's member
// table is emptied, so the new cluster's first leader chooses a NEW cluster ID and the members
// announce their own addresses: the old cluster may still be running, and the two must never
// be taken for one. Fencing tokens go on above the backup's token counter; leases are armed
// afresh by each node when it loads the table, for what they had left at the backup.
//
// dir must not exist, or be empty; nothing is written to it unless everything succeeds: the
// dir is built beside it and renamed into place.
//
// tables holds one table per raft group (index = group): a backup of several groups restores a
// node of that many, every group with the same peers, and records their number in the dir
// (GroupsFile).
func RestoreBackup(dir, id string, peers []Peer, tables []*fsm.Machine, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	if !fsm.ValidNodeID(id) {
		return fmt.Errorf("restore: node ID %q: 1 to 128 printable characters, no spaces", id)
	}
	conf, err := votersOf("restore", id, peers)
	if err != nil {
		return err
	}
	if err := checkEmptyDir(dir); err != nil {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dir))
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed into place
	if len(tables) == 0 || len(tables) > store.MaxGroups {
		return fmt.Errorf("restore: a backup of %d raft groups", len(tables))
	}
	rec := restoredGroups(tables, conf)
	if err := writeRestoredStore(filepath.Join(tmp, "raft"), id, conf, tables, logger); err != nil {
		return err
	}
	if len(tables) > 1 {
		if err := WriteGroupsRecord(tmp, rec); err != nil {
			return fmt.Errorf("restore: record the raft groups: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o750); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := checkEmptyDir(dir); err != nil { // nothing may have appeared meanwhile
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("restore: move the new data dir into place: %w", err)
	}
	if d, err := os.Open(parent); err == nil { // make the rename durable
		d.Sync()
		d.Close()
	}
	for g, m := range tables {
		logger.Info("restored: a node started on the dir serves the backup's table as a member of a new cluster",
			"dir", dir, "node_id", id, "group", g, "configuration", configString(conf), "locks", m.Len(), "last_token", m.LastToken(), "applied", m.Applied())
	}
	return nil
}

// checkEmptyDir refuses a dir that exists and holds anything: restore never writes over data.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("restore: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("restore: %s is not empty: restore writes only a new data dir (give a dir that does not exist, or an empty one)", dir)
	}
	return nil
}

// writeRestoredStore creates the pebble store at path holding, for each raft group, the node's
// identity and the snapshot of its table with configuration conf.
func writeRestoredStore(path, id string, conf raft.Configuration, tables []*fsm.Machine, logger *slog.Logger) (err error) {
	gs, err := store.OpenGroups(store.Config{Dir: path, Logger: logger}, len(tables))
	if err != nil {
		return fmt.Errorf("restore: create the store: %w", err)
	}
	defer func() {
		if cerr := gs.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("restore: close the store: %w", cerr)
		}
	}()
	for g, m := range tables {
		if err := writeRestoredGroup(gs.Store(g), id, conf, m); err != nil {
			if len(tables) > 1 {
				err = fmt.Errorf("raft group %d: %w", g, err)
			}
			return err
		}
	}
	return nil
}

// restoredGroups is the groups record of a node restored from tables with the voters conf: as
// many groups as tables, created with the layout of group 0's groups plan (one a cluster grown
// by RAFT GROUPS holds; without one, every group is of the layout). Group 0's plan becomes the
// new cluster's: its groups are the backup's and its voters conf (none when the backup's
// groups are those the cluster was created with: the backup was taken before its node grew).
func restoredGroups(tables []*fsm.Machine, conf raft.Configuration) GroupsRecord {
	rec := GroupsRecord{Groups: len(tables), Layout: len(tables)}
	plan, ok := tables[0].GroupsPlan()
	if !ok || plan.Layout >= len(tables) {
		tables[0].ReplaceGroupsPlan(nil)
		return rec
	}
	// Sorted as a plan's voters are: every node restored with these peers, in whatever order
	// its --peers names them, holds the same plan (the same table bytes).
	rec.Layout, rec.Voters = plan.Layout, planVoters(conf)
	tables[0].ReplaceGroupsPlan(&fsm.GroupsPlan{Groups: rec.Groups, Layout: rec.Layout, Voters: rec.Voters})
	return rec
}

// writeRestoredGroup writes one group's identity and snapshot into its store.
func writeRestoredGroup(st *store.Store, id string, conf raft.Configuration, m *fsm.Machine) error {
	// Every voter of the new cluster is restored by this version: it may write its format.
	if err := saveIdentity(st, identity{NodeID: id, BootstrapFormat: fsm.FormatCurrent}); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	snap := m.Snapshot().WithoutMembers()
	// Term 1: the new cluster's first term. Its log starts after the backup's applied index,
	// so every lease revision and fencing token of the backup stays below what it writes.
	index := max(snap.Applied(), 1)
	_, trans := raft.NewInmemTransport(conf.Servers[0].Address)
	defer trans.Close()
	sink, err := st.Snapshots(2).Create(raft.SnapshotVersionMax, index, 1, conf, 1, trans)
	if err != nil {
		return fmt.Errorf("restore: create the snapshot: %w", err)
	}
	if err := raftnode.TableSnapshot(snap).Persist(sink); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}
