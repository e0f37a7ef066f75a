package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// The raft floor: the same server with its log replicated by hashicorp/raft, the library
// raftlock is built on. It is the least a lock server built on hashicorp/raft does per
// request, so that a target it misses on this machine is out of reach for raftlock too,
// whatever raftlock does above raft.
//
// Writes go through a group commit as raftlock's do (raftnode/groupcommit.go): the records
// that queue while a batch is on its way travel as the next batch, in one raft log entry,
// sent when the previous one settles: once the leader's store has written it (paceWrite, as
// raftlock does), or once it has committed and applied (paceCommit: larger batches on a
// cluster, which raftlock gave up, raftnode/groupcommit.go says why; -pace commit shows what
// it would be worth). A batch's replies go out once the leader has applied its entry, that
// is once a majority wrote it. Every node's FSM applies the records to a table of its own.
// The raft settings are raftlock's (raftnode/config.go).
//
// What it leaves out of a real server: leadership changes (a leader that loses leadership
// fails every write in flight and refuses the rest: the benchmark has no faults), reads of
// the log after a restart, and everything raftlock does above raft (the leader's view checked
// against the committed table, leases, scripts, ACLs, metrics, logging).

// raftJournal is the group commit over raft, on the node that leads.
type raftJournal struct {
	r          *raft.Raft
	paceCommit bool

	mu   sync.Mutex
	next *batch   // what queues now goes in the next batch
	busy bool     // a batch is on its way and has not settled
	sent []*batch // given to raft, not applied yet, oldest first
	lost error    // leadership was lost: every write fails with it

	want atomic.Pointer[batch] // with paceWrite: the batch whose write settles it
}

// enqueue queues rec for the next batch, sending it now if no batch is on its way.
func (j *raftJournal) enqueue(rec []byte) *batch {
	j.mu.Lock()
	if j.lost != nil {
		b := &batch{synced: make(chan struct{}), err: j.lost}
		close(b.synced)
		j.mu.Unlock()
		return b
	}
	b := j.next
	b.buf = append(b.buf, rec...)
	if j.busy {
		j.mu.Unlock()
		return b
	}
	j.busy = true
	j.takeLocked()
	j.mu.Unlock()
	j.send(b)
	return b
}

// takeLocked moves the next batch to sent and starts a new one.
func (j *raftJournal) takeLocked() {
	j.sent = append(j.sent, j.next)
	j.next = newBatch()
}

// send gives b to raft as one entry. raft's apply channel is buffered (BatchApplyCh), so
// this returns at once, also on raft's own goroutines.
func (j *raftJournal) send(b *batch) {
	if !j.paceCommit {
		j.want.Store(b)
	}
	j.r.Apply(b.buf, 0) // its outcome arrives through the FSM, or leadership's loss
}

// settled sends what queued since the last batch, now that it no longer holds it back.
func (j *raftJournal) settled() {
	j.mu.Lock()
	if len(j.next.buf) == 0 || j.lost != nil {
		j.busy = false
		j.mu.Unlock()
		return
	}
	b := j.next
	j.takeLocked()
	j.mu.Unlock()
	j.send(b)
}

// written is the log store's word that logs are durable on the leader: with paceWrite, the
// batch awaited among them settles.
func (j *raftJournal) written(logs []*raft.Log) {
	b := j.want.Load()
	if b == nil {
		return
	}
	for _, l := range logs {
		if len(l.Data) > 0 && &l.Data[0] == &b.buf[0] && j.want.CompareAndSwap(b, nil) {
			j.settled()
			return
		}
	}
}

// applied answers the batch whose entry the leader applied (the leader applies the very
// bytes it proposed), and with paceCommit sends the next.
func (j *raftJournal) applied(data []byte) {
	j.mu.Lock()
	var b *batch
	for i, s := range j.sent {
		if &s.buf[0] == &data[0] {
			b = s
			j.sent = append(j.sent[:i], j.sent[i+1:]...)
			break
		}
	}
	j.mu.Unlock()
	if b == nil {
		return // a follower's entry, or one answered already
	}
	close(b.synced)
	if j.paceCommit {
		j.settled()
	}
}

// fail answers every write in flight or queued with err, and every later one.
func (j *raftJournal) fail(err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lost != nil {
		return
	}
	j.lost = err
	for _, b := range append(j.sent, j.next) {
		b.err = err
		close(b.synced)
	}
	j.sent, j.next = nil, newBatch()
}

// watchLeadership fails the journal's writes once this node, having led, stops leading.
func (j *raftJournal) watchLeadership() {
	led := false
	for leads := range j.r.LeaderCh() {
		if leads {
			led = true
		} else if led {
			j.fail(errors.New("ERR the floor lost leadership"))
		}
	}
}

// replicaTable is what every node's FSM applies the records to: key → token.
type replicaTable struct {
	mu    sync.Mutex
	locks map[string]uint64
	j     *raftJournal
}

func (t *replicaTable) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	err := t.applyRecords(l.Data)
	t.j.applied(l.Data)
	return err
}

// applyRecords applies a batch of records (record).
func (t *replicaTable) applyRecords(data []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(data) > 0 {
		kind := data[0]
		key, rest, ok := cutBytes(data[1:])
		if !ok {
			return errors.New("floor: torn record")
		}
		_, rest, ok = cutBytes(rest)
		if !ok {
			return errors.New("floor: torn record")
		}
		token, n := binary.Uvarint(rest)
		if n <= 0 {
			return errors.New("floor: torn record")
		}
		_, m := binary.Varint(rest[n:])
		if m <= 0 {
			return errors.New("floor: torn record")
		}
		data = rest[n+m:]
		switch kind {
		case 'L', 'S':
			t.locks[string(key)] = token
		default:
			delete(t.locks, string(key))
		}
	}
	return nil
}

// cutBytes splits a uvarint-length-prefixed byte string off b.
func cutBytes(b []byte) (s, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

func (t *replicaTable) Snapshot() (raft.FSMSnapshot, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var buf []byte
	for k, tok := range t.locks {
		buf = append(buf, record('L', []byte(k), nil, tok, 0)...)
	}
	return tableSnapshot(buf), nil
}

func (t *replicaTable) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.locks = map[string]uint64{}
	t.mu.Unlock()
	return t.applyRecords(data)
}

type tableSnapshot []byte

func (s tableSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (tableSnapshot) Release() {}

// raftNode is this process's raft: its journal and whether it leads.
type raftNode struct {
	r     *raft.Raft
	j     *raftJournal
	table *replicaTable // what this node applied
}

func (n *raftNode) leads() bool { return n.r.State() == raft.Leader }

// startRaft starts this node's raft in dir: id among peers ("id=host:port,...", this node
// included), bootstrapping the cluster they make (every node bootstraps the same one).
func startRaft(dir, id, raftAddr, peers string, paceCommit bool) (*raftNode, error) {
	var servers []raft.Server
	for _, p := range strings.Split(peers, ",") {
		pid, paddr, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("-peers: %q is not id=host:port", p)
		}
		servers = append(servers, raft.Server{ID: raft.ServerID(pid), Address: raft.ServerAddress(paddr)})
	}
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(id)
	cfg.HeartbeatTimeout = 500 * time.Millisecond
	cfg.ElectionTimeout = 500 * time.Millisecond
	cfg.LeaderLeaseTimeout = 250 * time.Millisecond
	cfg.CommitTimeout = 25 * time.Millisecond
	cfg.MaxAppendEntries = 512
	cfg.BatchApplyCh = true
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: os.Stderr})

	logs, err := openLogStore(dir)
	if err != nil {
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	if err != nil {
		return nil, err
	}
	advertise, err := net.ResolveTCPAddr("tcp", raftAddr)
	if err != nil {
		return nil, err
	}
	trans, err := raft.NewTCPTransport(raftAddr, advertise, 3, 10*time.Second, io.Discard)
	if err != nil {
		return nil, err
	}
	j := &raftJournal{paceCommit: paceCommit && len(servers) > 1, next: newBatch()}
	written := j.written
	logs.written.Store(&written)
	fsm := &replicaTable{locks: map[string]uint64{}, j: j}
	r, err := raft.NewRaft(cfg, fsm, logs, newStableStore(dir), snaps, trans)
	if err != nil {
		return nil, err
	}
	j.r = r
	if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	go j.watchLeadership()
	return &raftNode{r: r, j: j, table: fsm}, nil
}
