package raftnode

import (
	"context"
	"fmt"
	"hash/maphash"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// benchKeys is the number of distinct keys the benchmarks cycle through.
const benchKeys = 1024

func benchKey(i int) []byte { return []byte(fmt.Sprintf("lock:%04d", i%benchKeys)) }

// benchApplyFSM is a node's apply path without raft: its table, leases and pending marks.
func benchApplyFSM() machineFSM {
	cfg := withLocks(testConfig("n1")).withDefaults()
	n := &Replica{cfg: cfg, log: cfg.Logger, locks: cfg.Locks, epoch: cfg.Now(), cluster: noCluster{}}
	n.mu.machine = fsm.New()
	n.mu.pending = map[uint64]*pendingKey{}
	n.markSeed = maphash.MakeSeed()
	return machineFSM{n}
}

// BenchmarkApplyBatch is the follower's and leader's apply path without raft: batches of 64
// committed entries, half grants of a free key and half releases of it, decoded, applied and
// tracked by the lease timers under the view lock. One op = one entry.
func BenchmarkApplyBatch(b *testing.B) {
	f := benchApplyFSM()
	owner := []byte("owner-0123456789")
	const batch = 64
	logs := make([]*raft.Log, batch)
	for i := range logs {
		logs[i] = &raft.Log{Type: raft.LogCommand}
	}
	// Encoded once: the benchmark measures the apply, not the proposer's encoding.
	grants, releases := make([][]byte, benchKeys), make([][]byte, benchKeys)
	for i := range benchKeys {
		k := benchKey(i)
		grants[i] = benchEntry(fsm.Command{Kind: fsm.KindGrant, Key: k, Owner: owner, LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}})
		releases[i] = benchEntry(fsm.Command{Kind: fsm.KindRelease, Key: k, Match: fsm.Match{Kind: fsm.MatchAny}})
	}
	idx := uint64(0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i += batch {
		for j := 0; j < batch; j += 2 {
			k := (i + j) % benchKeys
			idx++
			logs[j].Index, logs[j].Data = idx, grants[k]
			idx++
			logs[j+1].Index, logs[j+1].Data = idx, releases[k]
		}
		f.ApplyBatch(logs)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/entry")
}

// BenchmarkExecLockUnlock is LOCK then UNLOCK through Exec on a single in-memory node: the
// leader's evaluation, proposal, commit and apply. One op = both requests.
func BenchmarkExecLockUnlock(b *testing.B) {
	n := benchNode(b, false)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lockUnlock(b, n, benchKey(i))
	}
}

// BenchmarkExecLockUnlockParallel is BenchmarkExecLockUnlock from 16 goroutines at once, with
// group commit (several requests per log entry) and without: CPU time per op is the figure.
func BenchmarkExecLockUnlockParallel(b *testing.B) {
	for _, off := range []bool{false, true} {
		b.Run(fmt.Sprintf("group-commit=%v", !off), func(b *testing.B) {
			n := benchNode(b, off)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16 / max(1, runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lockUnlock(b, n, fmt.Appendf(nil, "plock:%d", next.Add(1))) // never two at once
				}
			})
		})
	}
}

// benchNode starts a single in-memory node for a benchmark and waits until it serves in the
// current log format.
func benchNode(b *testing.B, noGroupCommit bool) *Replica {
	cfg := testConfig("n1")
	cfg.NoGroupCommit = noGroupCommit
	addr, trans := raft.NewInmemTransport(raft.ServerAddress(addrOf(cfg.ID)))
	n, err := New(withLocks(cfg), newStores(), trans)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close(); trans.Close() })
	self := raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(cfg.ID), Address: addr}
	if err := n.Raft().BootstrapCluster(raft.Configuration{Servers: []raft.Server{self}}).Error(); err != nil {
		b.Fatal(err)
	}
	testutil.WaitFor(b, 5*time.Second, testutil.Cond("leader ready", n.IsLeader))
	if err := n.SwitchFormat(fsm.FormatCurrent); err != nil {
		b.Fatal(err)
	}
	return n
}

var benchOwner = []byte("owner-0123456789")

// lockUnlock grants k and releases it, as two requests.
func lockUnlock(b *testing.B, n *Replica, k []byte) {
	ctx := context.Background()
	res, err := n.Exec(ctx, [][]byte{k}, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindGrant, Key: k, Owner: benchOwner, LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}}}
	}, nil)
	if err != nil || len(res) != 1 || res[0].Status != fsm.StatusGranted {
		b.Fatalf("LOCK: %v %+v", err, res)
	}
	tok := res[0].Token
	res, err = n.Exec(ctx, [][]byte{k}, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindRelease, Key: k, Match: fsm.Match{Kind: fsm.MatchToken, Token: tok}}}
	}, nil)
	if err != nil || len(res) != 1 || res[0].Status != fsm.StatusReleased {
		b.Fatalf("UNLOCK: %v %+v", err, res)
	}
}

// BenchmarkApplyGroupCommit is the apply path of group commit: one log entry carrying a batch
// of 128 requests of one command each, alternately grants of 128 free keys and their releases.
// One op = one entry (128 requests).
func BenchmarkApplyGroupCommit(b *testing.B) {
	f := benchApplyFSM()
	owner := []byte("owner-0123456789")
	const requests = 128
	var grants, releases [][]byte
	for i := range requests {
		k := benchKey(i)
		grants = append(grants, fsm.EncodeEntry(nil, []fsm.Command{{Kind: fsm.KindGrant, Key: k, Owner: owner, LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}}}))
		releases = append(releases, fsm.EncodeEntry(nil, []fsm.Command{{Kind: fsm.KindRelease, Key: k, Match: fsm.Match{Kind: fsm.MatchAny}}}))
	}
	data := [2][]byte{fsm.AppendBatch(nil, grants), fsm.AppendBatch(nil, releases)}
	logs := []*raft.Log{{Type: raft.LogCommand}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		logs[0].Index, logs[0].Data = uint64(i+1), data[i%2]
		out := f.ApplyBatch(logs)
		if r := out[0].(*entryResponse); len(r.results) != requests {
			b.Fatalf("%d results, want %d", len(r.results), requests)
		}
	}
}
