package store

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/tests/testutil"
)

// appendFSM is a trivial state machine: its state is every applied command, concatenated.
type appendFSM struct {
	mu       sync.Mutex
	state    []byte
	restored bool // Restore was called
}

func (f *appendFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = append(f.state, l.Data...)
	return nil
}

func (f *appendFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fsmSnapshot(bytes.Clone(f.state)), nil
}

func (f *appendFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.restored = b, true
	return nil
}

func (f *appendFSM) snapshot() (state []byte, restored bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.state), f.restored
}

type fsmSnapshot []byte

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (fsmSnapshot) Release() {}

// startRaft runs a single-node raft on the store, bootstrapping it when the store is empty,
// and returns it once it leads.
func startRaft(t *testing.T, s *Store, fsm raft.FSM) (*raft.Raft, func()) {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = "n1"
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.SnapshotInterval = time.Hour // snapshots only when the test asks
	conf.SnapshotThreshold = 1 << 30
	conf.TrailingLogs = 5 // so a snapshot truncates the log head
	conf.Logger = hclog.NewNullLogger()

	addr, trans := raft.NewInmemTransport("n1")
	snaps := s.Snapshots(2)
	has, err := raft.HasExistingState(s, s, snaps)
	if err != nil {
		t.Fatalf("HasExistingState: %v", err)
	}
	if !has {
		cluster := raft.Configuration{Servers: []raft.Server{{ID: conf.LocalID, Address: addr}}}
		if err := raft.BootstrapCluster(conf, s, s, snaps, trans, cluster); err != nil {
			t.Fatalf("BootstrapCluster: %v", err)
		}
	}
	r, err := raft.NewRaft(conf, fsm, s, s, snaps, trans)
	if err != nil {
		t.Fatalf("NewRaft: %v", err)
	}
	stop := func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("raft Shutdown: %v", err)
		}
		_ = trans.Close()
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("leadership", func() bool { return r.State() == raft.Leader }))
	return r, stop
}

func apply(t *testing.T, r *raft.Raft, cmd []byte) {
	t.Helper()
	if err := r.Apply(cmd, time.Second).Error(); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

// TestRaftRoundTrip runs real raft on the store: apply, snapshot (which compacts the log
// with DeleteRange), apply more, restart raft on a reopened store, and find the state
// restored from the snapshot plus the log after it.
func TestRaftRoundTrip(t *testing.T) {
	cfg := testConfig(t)
	cfg.SnapshotChunkSize = 16 << 10 // the FSM's snapshot spans several chunks
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fsm := &appendFSM{}
	r, stop := startRaft(t, s, fsm)
	var want []byte
	for i := range 40 {
		cmd := fmt.Appendf(nil, "%04d:%s|", i, bytes.Repeat([]byte{'x'}, 2000))
		apply(t, r, cmd)
		want = append(want, cmd...)
	}
	if err := r.Snapshot().Error(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	for i := 40; i < 45; i++ {
		cmd := fmt.Appendf(nil, "%04d|", i)
		apply(t, r, cmd)
		want = append(want, cmd...)
	}
	lastIndex := r.LastIndex()
	stop()
	if first, _ := s.FirstIndex(); first <= 1 {
		t.Fatalf("FirstIndex = %d after snapshot, want the head compacted", first)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, cfg)
	if metas, err := s.Snapshots(2).List(); err != nil || len(metas) != 1 {
		t.Fatalf("List = %v, %v, want one snapshot", metas, err)
	}
	fsm2 := &appendFSM{}
	r2, stop2 := startRaft(t, s, fsm2)
	defer stop2()
	if _, restored := fsm2.snapshot(); !restored {
		t.Fatal("raft did not restore the FSM from the pebble snapshot")
	}
	// The new leader commits the old entries once its first entry of the new term commits.
	apply(t, r2, []byte("after-restart|"))
	want = append(want, "after-restart|"...)
	got, _ := fsm2.snapshot()
	if !bytes.Equal(got, want) {
		t.Fatalf("restored FSM state is %d bytes, want %d equal bytes", len(got), len(want))
	}
	if r2.LastIndex() <= lastIndex {
		t.Fatalf("LastIndex after restart = %d, want > %d", r2.LastIndex(), lastIndex)
	}
}
