package raftnode

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// execCmds runs a request that yields cmds, unconditionally (the FSM checks their guards).
func execCmds(ctx context.Context, n *testNode, cmds ...fsm.Command) ([]fsm.Result, error) {
	keys := make([][]byte, len(cmds))
	for i, c := range cmds {
		keys[i] = c.Key
	}
	return n.Exec(ctx, keys, func(node.View) []fsm.Command { return cmds }, nil)
}

func grantCmd(key, owner string) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte(owner), Match: fsm.Match{Kind: fsm.MatchAbsent}}
}

// TestRequestIsOneEntry: the commands of one request are one request of one log entry, with one
// result per command; two grants in it get two tokens.
func TestRequestIsOneEntry(t *testing.T) {
	n := newNode(t)
	res, err := execCmds(t.Context(), n, grantCmd("a", "o"), grantCmd("b", "o"), grantCmd("c", "o"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	idx := res[0].LeaseRev
	// The entry at that index carries the three commands as one request (with nothing else:
	// nothing ran beside it).
	var l raft.Log
	if err := n.stores.Log.GetLog(idx, &l); err != nil {
		t.Fatal(err)
	}
	if cmds, ends, err := fsm.DecodeEntries(nil, nil, l.Data); err != nil || len(cmds) != 3 || len(ends) != 1 {
		t.Errorf("entry %d: %d commands in %d requests (%v), want 3 in 1", idx, len(cmds), len(ends), err)
	}
	for i, r := range res {
		if r.Status != fsm.StatusGranted || r.Token != fsm.Token(idx)+fsm.Token(i) || r.LeaseRev != idx {
			t.Errorf("result %d = %+v, want granted with token %d and lease rev %d", i, r, idx+uint64(i), idx)
		}
	}
	// The counter is above the index now: the next grant continues from it.
	if r := mustLock(t, n, "d", "o", 0); r.Token != fsm.Token(idx)+3 {
		t.Errorf("next grant got token %d, want %d", r.Token, idx+3)
	}
}

// TestAbortedEntryOnEveryNode: a request whose last guard fails at apply applies on no node:
// every node keeps its table and delivers none of its messages, and the request learns which
// command failed.
func TestAbortedEntryOnEveryNode(t *testing.T) {
	nodes := newCluster(t, 3)
	var delivered atomic.Int32
	for _, n := range nodes {
		n.Watch(node.Watchers{Published: func(_ node.LogPosition, channel, message []byte, shard bool) int {
			delivered.Add(1)
			return 0
		}})
	}
	l := testutil.Leader(t, nodes)
	a := mustLock(t, l, "a", "o", 0)
	b := mustLock(t, l, "b", "o", 0)
	waitConverged(t, l, nodes)
	before := table(t, l)
	publish := fsm.Command{Kind: fsm.KindPublish, Key: []byte("ch"), Owner: []byte("a and b released")}
	res, err := execCmds(t.Context(), l, releaseCmd("a", a.Token), grantCmd("c", "o"), publish, releaseCmd("b", b.Token+100))
	if err != nil {
		t.Fatal(err)
	}
	want := []fsm.Status{fsm.StatusAborted, fsm.StatusAborted, fsm.StatusAborted, fsm.StatusNotFound}
	for i, r := range res {
		if r.Status != want[i] {
			t.Errorf("result %d = %+v, want %s", i, r, want[i])
		}
	}
	if got := l.Stats().Aborted; got != 1 {
		t.Errorf("Stats().Aborted = %d, want 1", got)
	}
	waitApplied(t, nodes, l.raft.LastIndex())
	for _, n := range nodes {
		if d := diffTables(table(t, n), before); d != "" {
			t.Errorf("%s's table changed by an aborted entry (-before +now):\n%s", n.id, d)
		}
	}
	checkDigests(t, nodes)
	if got := delivered.Load(); got != 0 {
		t.Errorf("%d deliveries of the aborted entry's message, want none", got)
	}
}

// TestMultiKeyRequestAcrossLeaderChange: a request releasing three keys, with the leader cut
// off just before it proposes (the entry reaches only its own log, and the next leader's
// overwrites it) or just after (at varying moments: it commits, perhaps unknown to the
// request), ends applied on every node or on none, and a success means applied.
func TestMultiKeyRequestAcrossLeaderChange(t *testing.T) {
	nodes := newCluster(t, 3)
	outcomes := map[string]int{}
	for round := range 8 {
		keys := []string{fmt.Sprintf("r%d-a", round), fmt.Sprintf("r%d-b", round), fmt.Sprintf("r%d-c", round)}
		var cmds []fsm.Command
		var l *testNode
		// The node cut off in the round before may still unseat the leader as it rejoins (its
		// term went up while it was alone): take the locks on whoever leads once that settled.
		testutil.WaitFor(t, 5*time.Second, func() error {
			l, cmds = testutil.Leader(t, nodes), nil
			for _, k := range keys {
				out, err := tryLock(t.Context(), l, k, "o", 0)
				if err != nil {
					return fmt.Errorf("LOCK %s on %s: %v", k, l.id, err)
				}
				// Refused: an earlier try took it after all (only this test locks these keys).
				cmds = append(cmds, releaseCmd(k, out.token))
			}
			return nil
		})
		waitConverged(t, l, nodes)

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		done := make(chan error, 1)
		if round%2 == 0 {
			testutil.Isolate(l, nodes) // before: the leader does not know yet, and proposes
		}
		go func() {
			_, err := execCmds(ctx, l, cmds...)
			done <- err
		}()
		if round%2 == 1 {
			time.Sleep(time.Duration(round/2) * time.Millisecond)
			testutil.Isolate(l, nodes)
		}
		err := <-done
		cancel()
		if round%2 == 0 {
			// A new leader before the partition heals: its log overwrites the entry that
			// reached only the old one's (else the old leader might win again and commit it).
			testutil.Leader(t, testutil.Others(l, nodes))
		}
		testutil.ConnectAll(nodes)
		nl := testutil.Leader(t, nodes)
		waitConverged(t, nl, nodes)
		checkDigests(t, nodes)

		var present []string
		for _, k := range keys {
			if held(nl, k) {
				present = append(present, k)
			}
		}
		switch {
		case len(present) != 0 && len(present) != len(keys):
			t.Fatalf("round %d: half applied: %v still held after %v", round, present, err)
		case err == nil && len(present) != 0:
			t.Fatalf("round %d: the request succeeded but %v are held", round, present)
		case err != nil && !errors.Is(err, node.ErrUncertain) && notLeaderErr(err) == nil:
			t.Fatalf("round %d: error %v, want nil, ErrUncertain or NotLeaderError", round, err)
		}
		outcomes[fmt.Sprintf("applied=%v err=%v", len(present) == 0, err != nil)]++
	}
	t.Logf("outcomes: %v", outcomes)
	if outcomes["applied=false err=true"] == 0 {
		t.Errorf("no round lost its entry, so none tested a lost one: fix the test")
	}
}

// waitApplied waits until every node applied index.
func waitApplied(t *testing.T, nodes []*testNode, index uint64) {
	t.Helper()
	testutil.WaitFor(t, 3*time.Second, func() error {
		for _, n := range nodes {
			if got := n.raft.AppliedIndex(); got < index {
				return fmt.Errorf("%s applied %d, want %d", n.id, got, index)
			}
		}
		return nil
	})
}

// checkDigests checks that every node's Digest is the same.
func checkDigests(t *testing.T, nodes []*testNode) {
	t.Helper()
	_, want := nodes[0].Digest()
	for _, n := range nodes[1:] {
		if _, got := n.Digest(); got != want {
			t.Errorf("%s's digest %s, %s's %s", n.id, got, nodes[0].id, want)
		}
	}
}
