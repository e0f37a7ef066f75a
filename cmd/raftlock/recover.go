package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/store"
)

// recoverUsage is what `raftlock recover` prints when its flags are wrong.
const recoverUsage = `usage: raftlock recover --dir DIR --peers ID=RAFTADDR,... [--id ID] [--log-level L]

Offline recovery of a cluster that lost its quorum for good (docs/operations-recovery.md).
Run it on a STOPPED node, with every other node of the cluster stopped: it rewrites DIR so
that the node starts as a member of a cluster of exactly --peers. Everything in the node's log
is kept, committed or not. Then start the node as usual.`

// runRecover is `raftlock recover`: cluster.Recover on the node's own stores.
func runRecover(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("raftlock recover", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("dir", "", "the stopped node's data directory")
	peers := fs.String("peers", "", "the voters of the recovered cluster: ID=RAFTADDR,... (this node included)")
	id := fs.String("id", "", "this node's ID (default: the one its data dir records)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, recoverUsage)
	}
	if fs.NArg() > 0 || *dir == "" || *peers == "" {
		return errors.New(recoverUsage)
	}
	list, err := parsePeers(*peers)
	if err != nil {
		return err
	}
	raftDir := filepath.Join(*dir, "raft")
	if _, err := os.Stat(raftDir); err != nil {
		return fmt.Errorf("recover: %s holds no raftlock data: %w", *dir, err)
	}
	logger := newLogger(stderr, *level, "text")
	rec, found, err := cluster.ReadGroupsRecord(*dir)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	if !found {
		rec = cluster.GroupsRecord{Groups: 1, Layout: 1}
	}
	// pebble locks the directory: a node still running on it makes this fail here.
	gst, err := store.OpenGroups(store.Config{Dir: raftDir, Logger: logger}, rec.Groups)
	if err != nil {
		return fmt.Errorf("recover: open %s (is the node still running?): %w", raftDir, err)
	}
	// Every group the node runs is recovered with the same peers: every node is a member of
	// every group. A group the node has not run yet (planned, RAFT GROUPS) has no state: its
	// first start bootstraps it from the record, whose voters are rewritten here too.
	var rerr error
	for g := range rec.Groups {
		st := gst.Store(g)
		stores := raftnode.Stores{Log: st, Stable: st, Snapshots: st.Snapshots(2)}
		if has, err := raft.HasExistingState(st, st, stores.Snapshots); err == nil && !has && g >= rec.Layout {
			logger.Info("recover: raft group not started on this node yet; it starts with --peers", "group", g)
			continue
		}
		if rerr = cluster.Recover(*id, list, stores, cluster.RecoveredGroup{Group: g, Groups: rec.Groups, Layout: rec.Layout}, logger); rerr != nil {
			if rec.Groups > 1 {
				rerr = fmt.Errorf("raft group %d: %w", g, rerr)
			}
			break
		}
	}
	if rerr == nil && found && len(rec.Voters) > 0 {
		rec.Voters = cluster.PeersAsVoters(list) // as group 0's plan now names them
		rerr = cluster.WriteGroupsRecord(*dir, rec)
	}
	if err := gst.Close(); err != nil && rerr == nil {
		rerr = fmt.Errorf("recover: close store: %w", err)
	}
	return rerr
}
