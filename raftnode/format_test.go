package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// Until the cluster switches, it writes only what its format reads: locks go on in entries of
// its layout, and a write only the current format carries is refused after formatWait with
// ErrOlderMembers, nothing proposed. Once the leader switches the cluster with one entry, every
// node follows, and the write goes through, in a batch even alone.
func TestFormatGate(t *testing.T) {
	old := formatWait
	formatWait = 300 * time.Millisecond
	defer func() { formatWait = old }()

	nodes := formCluster(t, 3)
	l := testutil.Leader(t, nodes)
	mustLock(t, l, "job", "alice", 0)
	if got := lastCommandFormat(t, l.stores.Log); got != fsm.FormatKeyed {
		t.Fatalf("a LOCK before the switch went into an entry of format %d, want %d", got, fsm.FormatKeyed)
	}
	hash := fsm.Command{Kind: fsm.KindWrite, Key: []byte("\x00h"), Match: fsm.Match{Kind: fsm.MatchAbsent},
		Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}}
	before := l.Stats().Proposals
	if _, err := propose(t.Context(), l, hash); !errors.Is(err, node.ErrOlderMembers) {
		t.Fatalf("a hash write before the switch = %v, want ErrOlderMembers", err)
	}
	if after := l.Stats().Proposals; after != before {
		t.Fatalf("the refused write proposed %d entries", after-before)
	}
	settle(t, nodes)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := propose(ctx, l, hash); err != nil {
		t.Fatalf("the hash write after the switch: %v", err)
	}
	if got := lastCommandFormat(t, l.stores.Log); got != fsm.FormatBatch {
		t.Fatalf("after the switch an entry of format %d, want %d", got, fsm.FormatBatch)
	}
}

// A cluster in FormatTyped writes one log entry per request, however many arrive together;
// once it switches to FormatBatch, requests share entries.
func TestGroupCommitFollowsFormat(t *testing.T) {
	nodes := formCluster(t, 3)
	l := testutil.Leader(t, nodes)
	if err := l.SwitchFormat(fsm.FormatTyped); err != nil {
		t.Fatal(err)
	}
	concurrentLocks := func(prefix string) {
		errs := make(chan error, 32)
		for i := range 32 {
			go func() {
				_, err := tryLock(t.Context(), l, fmt.Sprint(prefix, i), "o", 0)
				errs <- err
			}()
		}
		for range 32 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	from := l.raft.LastIndex()
	concurrentLocks("typed")
	if got := batchesIn(t, l.stores.Log, from); got != 0 {
		t.Fatalf("%d batch entries in FormatTyped", got)
	}
	if err := l.SwitchFormat(fsm.FormatBatch); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for round := 0; ctx.Err() == nil; round++ {
		from = l.raft.LastIndex()
		concurrentLocks(fmt.Sprint("batched", round, "-"))
		if batchesIn(t, l.stores.Log, from) > 0 {
			return
		}
	}
	t.Fatal("no batch entry among concurrent locks after the switch")
}

// lastCommandFormat returns the format of the newest command entry in log.
func lastCommandFormat(t *testing.T, log raft.LogStore) byte {
	t.Helper()
	last, err := log.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := last; i > 0; i-- {
		var l raft.Log
		if err := log.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand {
			return fsm.FormatOf(l.Data)
		}
	}
	t.Fatal("no command entry in the log")
	return 0
}

// batchesIn counts the batch entries of log after index from, the switch's no-op aside.
func batchesIn(t *testing.T, log raft.LogStore, from uint64) int {
	t.Helper()
	last, err := log.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for i := from + 1; i <= last; i++ {
		var l raft.Log
		if err := log.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand && fsm.FormatOf(l.Data) == fsm.FormatBatch {
			if _, ends, _ := fsm.DecodeEntries(nil, nil, l.Data); len(ends) > 1 {
				count++
			}
		}
	}
	return count
}

// A cluster in FormatBatch (every member v0.3.0 or newer, not all v0.4.0) refuses the library
// commands with ErrOlderMembers; once switched to FormatFunctions (a version 6 entry, on every
// node) it carries them, in ordinary batches.
func TestFormatGateLibraries(t *testing.T) {
	old := formatWait
	formatWait = 300 * time.Millisecond
	defer func() { formatWait = old }()

	nodes := formCluster(t, 3)
	l := testutil.Leader(t, nodes)
	if err := l.SwitchFormat(fsm.FormatBatch); err != nil {
		t.Fatal(err)
	}
	lib := fsm.Command{Kind: fsm.KindStoreLibrary, Key: []byte("mylib"), Owner: []byte("#!lua name=mylib\n")}
	if _, err := propose(t.Context(), l, lib); !errors.Is(err, node.ErrOlderMembers) {
		t.Fatalf("a library stored in FormatBatch = %v, want ErrOlderMembers", err)
	}
	if err := l.SwitchFormat(fsm.FormatFunctions); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		for _, n := range nodes {
			if f := n.Stats().LogFormat; f != int(fsm.FormatFunctions) {
				return fmt.Errorf("%s is in log format %d", n.id, f)
			}
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := propose(ctx, l, lib); err != nil {
		t.Fatalf("the library after the switch: %v", err)
	}
	if got := lastCommandFormat(t, l.stores.Log); got != fsm.FormatBatch {
		t.Fatalf("a library went into an entry of format %d, want %d (a batch)", got, fsm.FormatBatch)
	}
}
