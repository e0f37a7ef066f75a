package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// TestResolveGroups: a new node records --groups (1 by default); later starts read the record,
// and a --groups that contradicts it, or a node with state but no record asked for more than
// one group, is refused.
func TestResolveGroups(t *testing.T) {
	dir := t.TempDir()
	if g, err := resolveGroups(dir, 4, false, nil); err != nil || g.Groups != 4 || g.Layout != 4 {
		t.Fatalf("a new node with --groups 4: %+v, %v", g, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, cluster.GroupsFile)); strings.TrimSpace(string(b)) != "4" {
		t.Errorf("recorded %q; want 4", b)
	}
	for _, flag := range []int{0, 4} {
		if g, err := resolveGroups(dir, flag, true, nil); err != nil || g.Groups != 4 {
			t.Errorf("a restart with --groups %d: %+v, %v; want 4", flag, g, err)
		}
	}
	if _, err := resolveGroups(dir, 2, true, nil); err == nil {
		t.Error("a restart with --groups 2 on a 4-group node: accepted; want refused")
	}
	old := t.TempDir()
	if g, err := resolveGroups(old, 0, true, nil); err != nil || g.Groups != 1 {
		t.Errorf("a node with state and no record: %+v, %v; want 1", g, err)
	}
	if _, err := resolveGroups(old, 3, true, nil); err == nil {
		t.Error("--groups 3 on a one-group node with state: accepted; want refused")
	}
	if g, err := resolveGroups(t.TempDir(), 0, false, nil); err != nil || g.Groups != 1 {
		t.Errorf("a new node without --groups: %+v, %v; want 1", g, err)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, cluster.GroupsFile), []byte("lots\n"), 0o600)
	if _, err := resolveGroups(bad, 0, true, nil); err == nil {
		t.Error("an unreadable record: accepted; want refused")
	}
}

// TestGroupsRecordOfAPlan: a record a plan wrote keeps the layout and the voters, and one
// without the voters of the groups it added is refused.
func TestGroupsRecordOfAPlan(t *testing.T) {
	dir := t.TempDir()
	want := cluster.GroupsRecord{Groups: 4, Layout: 1, Voters: []fsm.PlanVoter{{ID: "n1", Addr: "127.0.0.1:1"}, {ID: "n2", Addr: "127.0.0.1:2"}}}
	if err := cluster.WriteGroupsRecord(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := resolveGroups(dir, 0, true, nil)
	if err != nil || got.Groups != 4 || got.Layout != 1 || len(got.Voters) != 2 || got.Voters[1] != want.Voters[1] {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	for _, body := range []string{"4\nlayout 1\n", "4\nlayout 5\nvoter a b\n", "4\nvoter a\n"} {
		os.WriteFile(filepath.Join(dir, cluster.GroupsFile), []byte(body), 0o600)
		if _, err := resolveGroups(dir, 0, true, nil); err == nil {
			t.Errorf("record %q: accepted; want refused", body)
		}
	}
}

// TestResolveGroupsOfAJoiningNode: a node joining a cluster runs the raft groups its cluster
// planned (it waits for every member to run them before it is added), records that it joined
// (it starts no group itself), and refuses a --groups that contradicts its cluster.
func TestResolveGroupsOfAJoiningNode(t *testing.T) {
	dir := t.TempDir()
	converting := func() (node.PeerState, error) { return node.PeerState{Groups: 1, Layout: 1, Planned: 4}, nil }
	got, err := resolveGroups(dir, 0, false, converting)
	if err != nil || got.Groups != 4 || got.Layout != 1 || got.Joined != 4 || len(got.Voters) != 0 {
		t.Fatalf("joining a cluster planning 4 groups: %+v, %v; want 4 groups, layout 1, joined", got, err)
	}
	if back, err := resolveGroups(dir, 0, true, nil); err != nil || back.Groups != 4 || back.Layout != 1 || back.Joined != 4 {
		t.Errorf("its record read back at the next start: %+v, %v", back, err)
	}
	if _, err := resolveGroups(t.TempDir(), 2, false, converting); err == nil || !strings.Contains(err.Error(), "runs 4 raft groups") {
		t.Errorf("--groups 2 joining a cluster of 4: %v; want refused", err)
	}
	if got, err := resolveGroups(t.TempDir(), 4, false, converting); err != nil || got.Groups != 4 {
		t.Errorf("--groups 4 joining a cluster of 4: %+v, %v; want accepted", got, err)
	}
	older := func() (node.PeerState, error) { return node.PeerState{}, nil } // a release that does not say
	if got, err := resolveGroups(t.TempDir(), 0, false, older); err != nil || got.Groups != 1 || got.Layout != 1 {
		t.Errorf("joining a node that names no groups: %+v, %v; want one group", got, err)
	}
	unsaid := func() (node.PeerState, error) { return node.PeerState{Groups: 4}, nil } // no layout: a release before it was said
	if _, err := resolveGroups(t.TempDir(), 0, false, unsaid); err == nil {
		t.Error("joining a node of 4 groups that names no layout: accepted; want refused")
	}
	down := func() (node.PeerState, error) { return node.PeerState{}, errors.New("connection refused") }
	if _, err := resolveGroups(t.TempDir(), 0, false, down); err == nil {
		t.Error("joining through a member that does not answer: accepted; want an error")
	}
}

// TestGroupStart: how a node starts a group it has no state for. A group it joined never
// starts on its own (a joined node restarted without --join, or with --peers copied from the
// others, would otherwise lead a group of its own with an empty table); a group a plan added
// starts with the plan's voters; any other group as --peers and --join say.
func TestGroupStart(t *testing.T) {
	peers := []cluster.Peer{{ID: "n1", RaftAddr: "a1"}, {ID: "n2", RaftAddr: "a2"}}
	voters := []fsm.PlanVoter{{ID: "n1", Addr: "a1"}, {ID: "n2", Addr: "a2"}, {ID: "n3", Addr: "a3"}}
	for _, tc := range []struct {
		name      string
		rec       cluster.GroupsRecord
		g         int
		join      string
		bootstrap bool
		with      int // peers it bootstraps with
	}{
		{"created with --peers", cluster.GroupsRecord{Groups: 4, Layout: 4}, 2, "", true, 2},
		{"a new node joining", cluster.GroupsRecord{Groups: 4, Layout: 4, Joined: 4}, 0, "n1:6379", false, 0},
		{"a joined node restarted without --join, group 0", cluster.GroupsRecord{Groups: 4, Layout: 4, Joined: 4}, 0, "", false, 0},
		{"a joined node restarted without --join, group 3", cluster.GroupsRecord{Groups: 4, Layout: 1, Joined: 4}, 3, "", false, 0},
		{"a group a plan added", cluster.GroupsRecord{Groups: 4, Layout: 1, Voters: voters}, 2, "", true, 3},
		{"a group a plan added, on a node with --join", cluster.GroupsRecord{Groups: 4, Layout: 1, Voters: voters}, 2, "n1:6379", true, 3},
		{"a group a later plan added to a joined node", cluster.GroupsRecord{Groups: 8, Layout: 1, Voters: voters, Joined: 4}, 5, "", true, 3},
		{"a group the joined node joined, after a later plan", cluster.GroupsRecord{Groups: 8, Layout: 1, Voters: voters, Joined: 4}, 3, "", false, 0},
		{"an original group of a converted cluster", cluster.GroupsRecord{Groups: 4, Layout: 1, Voters: voters}, 0, "", true, 2},
	} {
		bootstrap, with := groupStart(tc.rec, tc.g, tc.join, peers)
		if bootstrap != tc.bootstrap || len(with) != tc.with {
			t.Errorf("%s: bootstrap %v with %v; want %v with %d peers", tc.name, bootstrap, with, tc.bootstrap, tc.with)
		}
	}
}
