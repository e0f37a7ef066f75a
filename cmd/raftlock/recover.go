package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	// pebble locks the directory: a node still running on it makes this fail here.
	st, err := store.Open(store.Config{Dir: raftDir, Logger: logger})
	if err != nil {
		return fmt.Errorf("recover: open %s (is the node still running?): %w", raftDir, err)
	}
	rerr := cluster.Recover(*id, list, raftnode.Stores{Log: st, Stable: st, Snapshots: st.Snapshots(2)}, logger)
	if err := st.Close(); err != nil && rerr == nil {
		rerr = fmt.Errorf("recover: close store: %w", err)
	}
	return rerr
}
