package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// TestResolveGroups: a new node records --groups (1 by default); later starts read the record,
// and a --groups that contradicts it, or a node with state but no record asked for more than
// one group, is refused.
func TestResolveGroups(t *testing.T) {
	dir := t.TempDir()
	if g, err := resolveGroups(dir, 4, false); err != nil || g.Groups != 4 || g.Layout != 4 {
		t.Fatalf("a new node with --groups 4: %+v, %v", g, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, cluster.GroupsFile)); strings.TrimSpace(string(b)) != "4" {
		t.Errorf("recorded %q; want 4", b)
	}
	for _, flag := range []int{0, 4} {
		if g, err := resolveGroups(dir, flag, true); err != nil || g.Groups != 4 {
			t.Errorf("a restart with --groups %d: %+v, %v; want 4", flag, g, err)
		}
	}
	if _, err := resolveGroups(dir, 2, true); err == nil {
		t.Error("a restart with --groups 2 on a 4-group node: accepted; want refused")
	}
	old := t.TempDir()
	if g, err := resolveGroups(old, 0, true); err != nil || g.Groups != 1 {
		t.Errorf("a node with state and no record: %+v, %v; want 1", g, err)
	}
	if _, err := resolveGroups(old, 3, true); err == nil {
		t.Error("--groups 3 on a one-group node with state: accepted; want refused")
	}
	if g, err := resolveGroups(t.TempDir(), 0, false); err != nil || g.Groups != 1 {
		t.Errorf("a new node without --groups: %+v, %v; want 1", g, err)
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, cluster.GroupsFile), []byte("lots\n"), 0o600)
	if _, err := resolveGroups(bad, 0, true); err == nil {
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
	got, err := resolveGroups(dir, 0, true)
	if err != nil || got.Groups != 4 || got.Layout != 1 || len(got.Voters) != 2 || got.Voters[1] != want.Voters[1] {
		t.Fatalf("read back %+v, %v; want %+v", got, err, want)
	}
	for _, body := range []string{"4\nlayout 1\n", "4\nlayout 5\nvoter a b\n", "4\nvoter a\n"} {
		os.WriteFile(filepath.Join(dir, cluster.GroupsFile), []byte(body), 0o600)
		if _, err := resolveGroups(dir, 0, true); err == nil {
			t.Errorf("record %q: accepted; want refused", body)
		}
	}
}
