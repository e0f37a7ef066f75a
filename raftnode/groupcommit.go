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
// What a batch saves is raft's cost per entry (its future, its log struct, its share of every
// append and replication message) and a goroutine per request waiting on that future.
//
// A batch is sized by what arrived while the previous one was being written, never by a timer.
// raft's apply channel is unbuffered (Config.raftConfig), so raft.Apply returns only when the
// leader loop takes the entry, and the leader loop takes the next one only after it has written
// (and fsynced) the one before. One request at a time sends: a request that finds nobody
// sending sends the queue itself, at once (alone if nobody else is waiting, so one client waits
// for nothing but its own commit); the ones that arrive meanwhile queue behind it and go
// together in the next batch, sent by a goroutine that keeps sending while the queue is not
// empty. Batches reach raft in the order their requests were queued, so one connection's
// pipelined requests reach the log in the order it sent them.

// maxBatchBytes bounds one batch's log entry: requests queued past it wait for the next batch
// (a request larger than the bound goes alone).
const maxBatchBytes = 1 << 20

// groupCommit is the leader's queue of request entries waiting for a batch.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*groupEntry
	sending bool // a goroutine is giving raft a batch, and sends the queue after it
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
// given to raft as it shut down may never be answered (awaitFuture).
func (e *groupEntry) wait(stop <-chan struct{}) ([]fsm.Result, error) {
	select {
	case <-e.done:
		return e.results, e.err
	case <-stop:
		return nil, raft.ErrRaftShutdown
	}
}

// submitGrouped queues a request's commands for the next group commit, and sends the queue if
// nobody is sending. It runs without Node.mu.
func (n *Node) submitGrouped(cmds []fsm.Command) *groupEntry {
	e := &groupEntry{data: fsm.EncodeEntry(nil, cmds), cmds: len(cmds), done: make(chan struct{})}
	n.stats.proposals.Add(1)
	g := &n.group
	g.mu.Lock()
	g.queue = append(g.queue, e)
	if g.sending {
		g.mu.Unlock()
		return e
	}
	g.sending = true
	batch := g.takeLocked()
	g.mu.Unlock()
	n.sendBatch(batch)
	// What queued while raft took the batch goes next, from a goroutine of its own: this
	// request's reply must not wait behind other requests' sends.
	g.mu.Lock()
	more := len(g.queue) > 0
	g.sending = more
	g.mu.Unlock()
	if more {
		go n.sendQueued()
	}
	return e
}

// sendQueued sends batches until the queue is empty.
func (n *Node) sendQueued() {
	g := &n.group
	for {
		g.mu.Lock()
		if len(g.queue) == 0 {
			g.sending = false
			g.mu.Unlock()
			return
		}
		batch := g.takeLocked()
		g.mu.Unlock()
		n.sendBatch(batch)
	}
}

// takeLocked removes the queue's first entries, up to maxBatchBytes, and returns them.
func (g *groupCommit) takeLocked() []*groupEntry {
	size, count := 0, 0
	for count < len(g.queue) && (count == 0 || size+len(g.queue[count].data) <= maxBatchBytes) {
		size += len(g.queue[count].data)
		count++
	}
	if count == len(g.queue) {
		batch := g.queue
		g.queue = nil
		return batch
	}
	batch := slices.Clone(g.queue[:count])
	g.queue = slices.Delete(g.queue, 0, count) // which clears the tail: no sent entry stays referenced
	return batch
}

// sendBatch gives raft the batch as one log entry (a lone request's entry as it is), waiting
// until raft's leader loop takes it, and starts the goroutine that hands out its outcome.
func (n *Node) sendBatch(batch []*groupEntry) {
	var data []byte
	if len(batch) == 1 {
		data = batch[0].data
	} else {
		size := 0
		entries := make([][]byte, len(batch))
		for i, e := range batch {
			entries[i] = e.data
			size += len(e.data)
		}
		data = fsm.AppendBatch(make([]byte, 0, size+8), entries)
	}
	n.stats.group.Observe(uint64(len(batch)))
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	go n.finishBatch(f, batch)
}

// finishBatch waits for a batch's outcome and gives each request its results. It is not one of
// the node's goroutines (goFunc): Close does not wait for it, and if raft never answers a batch
// dropped at shutdown, its requests are answered by the node's stop instead (groupEntry.wait).
func (n *Node) finishBatch(f raft.ApplyFuture, batch []*groupEntry) {
	err := f.Error()
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
