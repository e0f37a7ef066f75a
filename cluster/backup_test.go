package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/store"
	"github.com/raftlock/raftlock/tests/testutil"
)

// The leader's backup holds what each lease has left by its timers; a node started on a dir
// RestoreBackup wrote serves that table, leases counting from its start, under a new cluster
// ID, with tokens above the backup's.
func TestBackupAndRestoreBackup(t *testing.T) {
	clock := testutil.NewClock()
	n := newNode(t, func(c *Config) { c.Core.Now = clock.Now })
	a := mustLock(t, n, "a", "alice", 10000)
	mustLock(t, n, "b", "bob", 60000)
	hasClusterID(t, n)
	old := n.ClusterID()
	clock.Advance(4 * time.Second)

	data, err := n.Backup(t.Context())
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	h, m, err := backup.Decode(data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if h.SourceNode != "n1" || h.ClusterID != old || h.Keys != 2 || h.Term == 0 {
		t.Errorf("header %+v", h)
	}
	for key, want := range map[string]uint64{"a": 6000, "b": 56000} {
		if l, ok := m.Get([]byte(key)); !ok || l.LeaseMs != want {
			t.Errorf("backup's %s: %+v (%v); want %d ms left", key, l, ok, want)
		}
	}

	dir := filepath.Join(t.TempDir(), "restored")
	if err := RestoreBackup(dir, "r1", []Peer{{ID: "r1", RaftAddr: addrOf("r1")}}, []*fsm.Machine{m}, testutil.RaftLogger()); err != nil {
		t.Fatalf("RestoreBackup: %v", err)
	}
	if err := RestoreBackup(dir, "r1", []Peer{{ID: "r1", RaftAddr: addrOf("r1")}}, []*fsm.Machine{m}, testutil.RaftLogger()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("RestoreBackup over its own dir: %v; want it refused as not empty", err)
	}
	if err := RestoreBackup(filepath.Join(t.TempDir(), "x"), "r1", []Peer{{ID: "r2", RaftAddr: addrOf("r2")}}, []*fsm.Machine{m}, testutil.RaftLogger()); err == nil {
		t.Errorf("RestoreBackup with peers that do not name the node succeeded")
	}
	if entries, _ := os.ReadDir(filepath.Dir(dir)); len(entries) != 1 {
		t.Errorf("RestoreBackup left more than the dir beside it: %v", entries)
	}

	st, err := store.Open(store.Config{Dir: filepath.Join(dir, "raft"), Logger: testutil.RaftLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	later := testutil.NewClock()
	later.Advance(time.Hour) // the restore happens long after the backup: leases count from it
	cfg := testConfig("r1")
	cfg.Core.Now = later.Now
	r := startNode(t, cfg, raftnode.Stores{Log: st, Stable: st, Snapshots: st.Snapshots(2)})
	testutil.Leader(t, []*testNode{r})
	if l, left, ok := r.Core().LocalLookup([]byte("a")); !ok || l.Token != a.Token || string(l.Owner) != "alice" || left != 6*time.Second {
		t.Errorf("restored a: %+v, %v left (%v); want alice's token %d with 6s left", l, left, ok, a.Token)
	}
	hasClusterID(t, r)
	if r.ClusterID() == old {
		t.Errorf("the restored node kept the cluster ID %s", old)
	}
	if res := mustLock(t, r, "c", "carol", 1000); res.Token <= fsm.Token(h.LastToken) {
		t.Errorf("a grant after the restore got token %d, not above the backup's %d", res.Token, h.LastToken)
	}
}

// hasClusterID waits until n's table holds a cluster ID.
func hasClusterID(t *testing.T, n *testNode) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if n.ClusterID() == "" {
			return errors.New("no cluster ID yet")
		}
		return nil
	})
}

// TestRestoredGroupsKeepTheLayout: a backup of a cluster grown by RAFT GROUPS restores with its
// layout and a plan naming the restored voters; one taken on a node that had not grown yet
// restores as the groups it holds, without the plan.
func TestRestoredGroupsKeepTheLayout(t *testing.T) {
	conf := raft.Configuration{Servers: []raft.Server{{ID: "r1", Address: "127.0.0.1:1"}, {ID: "r2", Address: "127.0.0.1:2"}}}
	planned := func(groups int) []*fsm.Machine {
		tables := make([]*fsm.Machine, groups)
		for g := range tables {
			tables[g] = fsm.New()
			tables[g].SetGroup(g, groups, 1)
			tables[g].NoteFormat(fsm.FormatFunctions)
		}
		p := fsm.GroupsPlan{Groups: 4, Layout: 1, Voters: []fsm.PlanVoter{{ID: "old", Addr: "10.0.0.1:7000"}}}
		if r := tables[0].Apply(1, fsm.Command{Kind: fsm.KindPlanGroups, Key: fsm.EncodeGroupsPlan(p)}); r.Status != fsm.StatusGroupsPlanned {
			t.Fatalf("plan: %v", r.Status)
		}
		return tables
	}
	tables := planned(4)
	rec := restoredGroups(tables, conf)
	if rec.Groups != 4 || rec.Layout != 1 || len(rec.Voters) != 2 || rec.Voters[0].ID != "r1" {
		t.Errorf("record %+v; want 4 groups of layout 1, the restored voters", rec)
	}
	if p, ok := tables[0].GroupsPlan(); !ok || p.Groups != 4 || p.Layout != 1 || len(p.Voters) != 2 || p.Voters[1].Addr != "127.0.0.1:2" {
		t.Errorf("restored plan %+v %v; want the restored voters", p, ok)
	}
	one := planned(1)
	if rec := restoredGroups(one, conf); rec.Groups != 1 || rec.Layout != 1 {
		t.Errorf("a one-group backup with a plan: record %+v", rec)
	}
	if _, ok := one[0].GroupsPlan(); ok {
		t.Error("a one-group backup kept its plan of more groups than it restores")
	}
}
