package cluster

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
)

// Recover rewrites a stopped node's stores so that it starts as a member of a cluster of peers
// alone (hashicorp/raft's RecoverCluster): the offline way out of a cluster that lost its quorum
// for good. It replays the node's snapshot and every entry of its log into a table, committed
// or not (an entry the old cluster had not committed becomes committed: nothing committed is
// lost, something uncommitted may be kept), writes that table as a snapshot whose
// configuration is peers, and empties the log. id is the node's ID (empty: the one its data dir
// records); peers must name it. Every other node must be stopped, and stay so until each peer
// has been recovered with the same peers, or the peers are new and join afterwards.
//
// group says which raft group of the node's the stores hold (its number, the groups the node
// runs and the layout: raftnode.Config's), so that the replay decides slot moves as the
// running node did; the zero value is a node of one group.
func Recover(id string, peers []Peer, st raftnode.Stores, group RecoveredGroup, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.Default()
	}
	ident, ok, err := loadIdentity(st.Stable)
	if err != nil {
		return err
	}
	switch {
	case id == "" && !ok:
		return errors.New("recover: the data dir records no node ID: give --id")
	case id == "":
		id = ident.NodeID
	case ok && ident.NodeID != id:
		return fmt.Errorf("recover: data dir belongs to node %q, not %q", ident.NodeID, id)
	}
	conf, err := votersOf("recover", id, peers)
	if err != nil {
		return err
	}
	cfg := raftnode.DefaultConfig()
	cfg.ID, cfg.Logger = id, logger
	self := peers[slices.IndexFunc(peers, func(p Peer) bool { return p.ID == id })]
	_, trans := raft.NewInmemTransport(raft.ServerAddress(self.RaftAddr))
	defer trans.Close()
	f := &recoveryFSM{m: fsm.New(), group: group, voters: planVoters(conf)}
	f.m.SetGroup(group.Group, group.Groups, group.Layout)
	if err := raft.RecoverCluster(cfg.RaftConfig(), f, st.Log, st.Stable, st.Snapshots, trans, conf); err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if f.bad > 0 {
		logger.Warn("recover: skipped undecodable log entries, as a running node does", "entries", f.bad)
	}
	logger.Info("recovered: the node starts as a member of the new configuration", "node_id", id, "group", group.Group,
		"cluster_id", f.m.ClusterID(), "locks", f.m.Len(), "last_token", f.m.LastToken(), "configuration", configString(conf))
	return nil
}

// recoveryFSM is the table RecoverCluster replays the log into and snapshots. Unlike
// the core's FSM it arms no lease timers and tells no one: the node is not running.
type recoveryFSM struct {
	m     *fsm.Machine
	group RecoveredGroup
	// voters replace a groups plan's in the table it snapshots (group 0's): a group the plan
	// added that a node has not started yet starts with the recovered voters, on every node.
	voters []fsm.PlanVoter
	bad    int
}

// RecoveredGroup is which of a node's raft groups Recover rewrites: Group of Groups, of a cluster
// created with Layout (raftnode.Config's fields of the same names).
type RecoveredGroup struct {
	Group, Groups, Layout int
}

func (f *recoveryFSM) Apply(l *raft.Log) interface{} {
	cmds, ends, err := fsm.DecodeEntries(nil, nil, l.Data)
	if err != nil {
		f.bad++
		f.m.Advance(l.Index)
		return nil
	}
	f.m.NoteFormat(fsm.FormatOf(l.Data))
	from := 0
	for _, end := range ends { // a group commit's requests, each whole or not at all
		f.m.ApplyEntry(nil, l.Index, cmds[from:end])
		from = end
	}
	return nil
}

func (f *recoveryFSM) Snapshot() (raft.FSMSnapshot, error) {
	if p, ok := f.m.GroupsPlan(); ok {
		p.Voters = f.voters
		f.m.ReplaceGroupsPlan(&p)
	}
	return raftnode.TableSnapshot(f.m.Snapshot()), nil
}

func (f *recoveryFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	m, err := fsm.Restore(rc)
	if err != nil {
		return fmt.Errorf("restore lock table: %w", err)
	}
	m.SetGroup(f.group.Group, f.group.Groups, f.group.Layout)
	f.m = m
	return nil
}

// votersOf is the configuration of peers, all voters, for op (recover, restore) on node id: it
// must name id, and every peer needs a valid ID and a raft address.
func votersOf(op, id string, peers []Peer) (raft.Configuration, error) {
	if len(peers) == 0 {
		return raft.Configuration{}, fmt.Errorf("%s: --peers is required: the voters of the cluster, ID=RAFTADDR,... (this node included)", op)
	}
	if !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == id }) {
		return raft.Configuration{}, fmt.Errorf("%s: --peers must name this node (%s)", op, id)
	}
	var conf raft.Configuration
	for _, p := range peers {
		if !fsm.ValidNodeID(p.ID) || p.RaftAddr == "" {
			return raft.Configuration{}, fmt.Errorf("%s: peer %q=%q: want ID=RAFTADDR", op, p.ID, p.RaftAddr)
		}
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	return conf, nil
}
