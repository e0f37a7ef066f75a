package cluster

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
)

// The peer the frames come from: a member of the node's configuration ("fz"), which passed the
// raft handshake. The node is n1 of the configuration {n1, fz}: without fz's vote it never
// leads, so it handles every frame as a follower or a candidate would.
const fuzzPeer = "fz"

// fuzzTarget is a node on a real network transport and in-memory stores.
type fuzzTarget struct {
	n      *Member
	trans  *Transport
	stores raftnode.Stores
	cfg    Config
}

func startFuzzTarget(t *testing.T, st raftnode.Stores, bootstrap bool) *fuzzTarget {
	t.Helper()
	trans, err := NewTransport(TransportConfig{Bind: "127.0.0.1:0", Logger: testutil.RaftLogger(), HandshakeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("n1")
	cfg.RaftAddr = string(trans.LocalAddr())
	cfg.Bootstrap = bootstrap
	// fz's address takes no connection: n1's votes and appends to it fail at once.
	cfg.Peers = []Peer{{ID: "n1", RaftAddr: cfg.RaftAddr}, {ID: fuzzPeer, RaftAddr: "127.0.0.1:1"}}
	return &fuzzTarget{n: startMember(t, cfg, st, trans), trans: trans, stores: st, cfg: cfg}
}

// send dials the target as fz, says the raft handshake's hello, writes frames and reads
// whatever comes back until the target closes the connection or is silent for a moment.
func (f *fuzzTarget) send(t *testing.T, frames []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", string(f.trans.LocalAddr()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(hello{cluster: f.n.handshakeCluster(), from: fuzzPeer, to: "n1"}.append(nil)); err != nil {
		t.Fatal(err)
	}
	var status [1]byte
	if _, err := io.ReadFull(c, status[:]); err != nil || status[0] != 0 {
		t.Fatalf("hello as member %s: status %v, %v; want accepted", fuzzPeer, status, err)
	}
	for range 2 { // the answer's cluster ID and reason
		if _, err := readShort(c); err != nil {
			t.Fatal(err)
		}
	}
	c.Write(frames)
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	io.Copy(io.Discard, c)
}

// check fails the test if the node stopped, or if its log holds a configuration entry that raft
// could not decode on the next start; then it restarts the node on its stores, as a crash
// would, to prove it.
func (f *fuzzTarget) check(t *testing.T) {
	t.Helper()
	if s := f.n.raft().State(); s == raft.Shutdown {
		t.Fatalf("the node is %v after the frames", s)
	}
	first, err := f.stores.Log.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := f.stores.Log.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := f.stores.Log.GetLog(i, &l); err != nil {
			t.Fatalf("log entry %d of %d..%d: %v", i, first, last, err)
		}
		if l.Type == raft.LogConfiguration {
			if _, err := decodeConfiguration(l.Data); err != nil {
				t.Fatalf("log entry %d: a configuration raft cannot decode was stored: %v", i, err)
			}
		}
	}
	if err := f.n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Logf("close: %v", err)
	}
	again := startFuzzTarget(t, f.stores, false)
	if err := again.n.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Logf("close after the restart: %v", err)
	}
}

// captureFrames returns the bytes hashicorp/raft's own transport writes for the RPCs send makes
// (each answered by nobody: the capture listener only reads).
func captureFrames(t testing.TB, send func(*raft.NetworkTransport, raft.ServerAddress)) []byte {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		var buf bytes.Buffer
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		io.Copy(&buf, c)
		got <- buf.Bytes()
	}()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 200*time.Millisecond, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	send(trans, raft.ServerAddress(ln.Addr().String()))
	return <-got
}

// Frames a member could send n1 right after its bootstrap (its log: the configuration at
// index 1, term 1).
func garbageConfigAppend(t testing.TB) []byte {
	return captureFrames(t, func(tr *raft.NetworkTransport, to raft.ServerAddress) {
		var out raft.AppendEntriesResponse
		tr.AppendEntries("", to, &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(fuzzPeer), Addr: []byte("127.0.0.1:1")},
			Term:      5, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 2,
			Entries: []*raft.Log{{Index: 2, Term: 5, Type: raft.LogConfiguration, Data: []byte("\xffgarbage")}},
		}, &out)
	})
}

func fuzzSeeds(t testing.TB) [][]byte {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(fuzzPeer), Addr: []byte("127.0.0.1:1")}
	goodConf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: fuzzPeer, Address: "127.0.0.1:1"}, {ID: "n1", Address: "127.0.0.1:2"}}})
	return [][]byte{
		garbageConfigAppend(t),
		captureFrames(t, func(tr *raft.NetworkTransport, to raft.ServerAddress) {
			var out raft.AppendEntriesResponse
			tr.AppendEntries("", to, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 5, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 3,
				Entries: []*raft.Log{{Index: 2, Term: 5, Type: raft.LogCommand, Data: []byte("\x07garbage command")},
					{Index: 3, Term: 5, Type: raft.LogConfiguration, Data: goodConf}}}, &out)
		}),
		captureFrames(t, func(tr *raft.NetworkTransport, to raft.ServerAddress) {
			var out raft.RequestVoteResponse
			tr.RequestVote("", to, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 1<<64 - 1, LastLogIndex: 1 << 40, LastLogTerm: 1<<64 - 1, LeadershipTransfer: true}, &out)
		}),
		captureFrames(t, func(tr *raft.NetworkTransport, to raft.ServerAddress) {
			var out raft.InstallSnapshotResponse
			data := []byte("not a snapshot")
			tr.InstallSnapshot("", to, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: 5,
				LastLogIndex: 10, LastLogTerm: 5, Configuration: []byte("\xc1"), ConfigurationIndex: 10, Size: int64(len(data))}, &out, bytes.NewReader(data))
		}),
		captureFrames(t, func(tr *raft.NetworkTransport, to raft.ServerAddress) {
			var out raft.TimeoutNowResponse
			tr.TimeoutNow("", to, &raft.TimeoutNowRequest{RPCHeader: hdr}, &out)
		}),
	}
}

// TestTransportRefusesMalformedConfiguration: an authenticated member's AppendEntries whose
// entry is a configuration raft cannot decode (the "garbage configuration entry") is
// refused before raft sees it: raft stored such an entry and then panicked decoding it, on
// every restart after. So is an InstallSnapshot carrying one, which panicked raft at once.
func TestTransportRefusesMalformedConfiguration(t *testing.T) {
	for name, frames := range map[string][]byte{
		"append":   garbageConfigAppend(t),
		"snapshot": fuzzSeeds(t)[3],
	} {
		t.Run(name, func(t *testing.T) {
			if len(frames) == 0 {
				t.Fatal("no frame captured")
			}
			f := startFuzzTarget(t, newStores(), true)
			f.send(t, frames)
			f.check(t)
		})
	}
}

// FuzzRaftFrames feeds arbitrary bytes, as raft frames from an authenticated member, through the
// network transport to a node: it must neither stop nor store what it cannot start from again.
// Seeded with real frames. An input costs about 10 ms and its coverage depends on timing (raft
// runs on its own goroutines), so make fuzz runs it with -fuzzminimizetime 1x: the default
// minute of minimizing each new input stalls a count-bounded run.
func FuzzRaftFrames(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, frames []byte) {
		target := startFuzzTarget(t, newStores(), true)
		target.send(t, frames)
		target.check(t)
	})
}
