package raftnode

import (
	"slices"
	"sync"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Group commit (DESIGN.md §3, §12): the leader puts the entries of concurrent requests in one
// raft log entry (fsm.AppendBatch), each request still applied whole or not at all on its own.
// hashicorp/raft already writes the entries queued together in one append and one fsync; what
// a batch saves is raft's cost per entry (its future, its log struct, its share of every
// append and replication message) and one goroutine per request waiting on that future.
//
// A batch is sized by what arrived while the previous ones were in flight, never by a timer:
// the leader keeps at most Config.BatchesInFlight batches in raft, and a request that finds
// a free place goes at once, alone if nobody else is waiting. So one client waits for nothing
// but its own commit, and under load each commit carries everything that queued behind the
// ones before it. Batches reach raft in the order their requests were queued, so one
// connection's pipelined requests reach the log in the order it sent them.

// maxBatchBytes bounds one batch's log entry: requests queued past it wait for the next batch
// (a request larger than the bound goes alone).
const maxBatchBytes = 1 << 20

// groupCommit is the leader's queue of request entries waiting for a batch.
type groupCommit struct {
	mu       sync.Mutex
	queue    []*groupEntry
	inflight int // batches given to raft whose outcome is not known yet
}

// groupEntry is one request's entry in a group commit, and its outcome once the batch's is
// known: the request's own results, or the batch's error.
type groupEntry struct {
	data    []byte // the request's entry (fsm.EncodeEntry)
	cmds    int    // how many commands it holds
	done    chan struct{}
	results []fsm.Result
	err     error
}

// wait returns the entry's outcome, or raft.ErrRaftShutdown once the node stops: a batch
// queued as raft shut down may never be answered (awaitFuture).
func (e *groupEntry) wait(stop <-chan struct{}) ([]fsm.Result, error) {
	select {
	case <-e.done:
		return e.results, e.err
	case <-stop:
		return nil, raft.ErrRaftShutdown
	}
}

// submitGrouped queues a request's commands for the next group commit and sends a batch at
// once if fewer than BatchesInFlight are in raft. It runs without Node.mu.
func (n *Node) submitGrouped(cmds []fsm.Command) *groupEntry {
	e := &groupEntry{data: fsm.EncodeEntry(nil, cmds), cmds: len(cmds), done: make(chan struct{})}
	n.stats.proposals.Add(1)
	g := &n.group
	g.mu.Lock()
	g.queue = append(g.queue, e)
	if g.inflight < n.cfg.BatchesInFlight {
		g.inflight++
		n.sendBatchLocked()
	}
	g.mu.Unlock()
	return e
}

// sendBatchLocked gives raft the queued entries, up to maxBatchBytes, as one log entry (a
// lone request's entry as it is), and starts the goroutine that hands out its outcome. It
// holds group.mu while raft.Apply enqueues, so batches reach the log in queue order; raft's
// queue is drained by its leader loop, which never takes group.mu.
func (n *Node) sendBatchLocked() {
	g := &n.group
	size, count := 0, 0
	for count < len(g.queue) && (count == 0 || size+len(g.queue[count].data) <= maxBatchBytes) {
		size += len(g.queue[count].data)
		count++
	}
	batch := slices.Clone(g.queue[:count])
	g.queue = slices.Delete(g.queue, 0, count) // which clears the tail: no sent entry stays referenced
	var data []byte
	if len(batch) == 1 {
		data = batch[0].data
	} else {
		entries := make([][]byte, len(batch))
		for i, e := range batch {
			entries[i] = e.data
		}
		data = fsm.AppendBatch(make([]byte, 0, size+8), entries)
	}
	n.stats.group.Observe(uint64(len(batch)))
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	go n.finishBatch(f, batch)
}

// finishBatch waits for a batch's outcome, sends the next batch if requests queued meanwhile,
// then gives each request its results. It is not one of the node's goroutines (goFunc): Close
// does not wait for it, and if raft never answers a batch dropped at shutdown, its requests
// are answered by the node's stop instead (groupEntry.wait).
func (n *Node) finishBatch(f raft.ApplyFuture, batch []*groupEntry) {
	err := f.Error()
	g := &n.group
	g.mu.Lock()
	if len(g.queue) > 0 {
		n.sendBatchLocked() // this batch's place in raft passes to the next
	} else {
		g.inflight--
	}
	g.mu.Unlock()
	var resp *entryResponse
	if err == nil {
		resp, _ = f.Response().(*entryResponse)
	}
	for i, e := range batch {
		switch {
		case err != nil:
			e.err = err
		case resp == nil:
			e.err = node.ErrUncertain // the entry did not decode on this node (ApplyBatch logged it)
		default:
			if r := resp.request(i, len(batch)); len(r) == e.cmds {
				e.results = r
			} else {
				e.err = node.ErrUncertain
			}
		}
		close(e.done)
	}
}
