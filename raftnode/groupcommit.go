package raftnode

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Group commit (DESIGN.md §3, §12): the leader puts the entries of concurrent requests in one
// raft log entry (fsm.AppendBatchHeader), each request still applied whole or not at all on its own.
// What a batch saves is raft's cost per entry (its future, its log struct, its share of every
// append and replication message) and a goroutine hand-off per request.
//
// A batch is sized by what arrived while the previous one was on its way, never by a timer.
// One batch at a time is sent and not yet written. A request that finds none sends the queue
// itself, at once (alone if nobody else is waiting, so one client waits for nothing but its
// own commit). The ones that arrive meanwhile queue, and once the leader's log store has
// written the batch (writeWatch, which sees the batch's own bytes go by, on raft's leader loop,
// before it looks for work again), the queue goes to raft as the next batch right there, with
// no goroutine to wake: the leader's disk is always writing a full batch, and on a cluster it
// writes the next batch while the followers write this one.
//
// Waiting for the whole commit round instead (the previous batch applied, not only written)
// would make a cluster's batches about twice as large for the same fsyncs on every node, and
// was measured at +24 % pairs/s on 3 nodes (docs/performance.md). It is not done: the one
// long chaos run made with it found a linearizability violation that nobody could explain or
// reproduce (docs/known-issues.md, "The commit-paced violation of 2026-12-02"), and a lock
// server does not keep a speed-up whose safety is in doubt.
// Batches reach raft in the order their requests were queued, so one connection's pipelined
// requests reach the log in that order.

// maxBatchBytes bounds one batch's log entry: requests queued past it wait for the next batch
// (a request larger than the bound goes alone). The log cache keeps the newest entries in
// memory (logCacheEntries, logCacheBytes) and raft sends up to MaxAppendEntries of them in one
// message: small batches keep both bounded, and a batch of a few hundred requests already
// costs one fsync.
const maxBatchBytes = 256 << 10

// groupCommit is the leader's queue of request entries waiting for a batch, and the batches
// given to raft whose requests have not been answered yet.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*groupEntry
	sending bool // a batch is being sent or written: requests queue for the next
	// sent are the batches given to raft and not answered yet, oldest first. The first to mark
	// a batch answered answers its requests and takes it off: ApplyBatch when it applies the
	// batch's own log entry (the leader applies the very bytes it proposed, so the entry is told
	// apart by its first byte's address), or runFinisher with raft's outcome when it did not
	// (an error). finish wakes runFinisher at once (never blocking: a leadership change, or a
	// raft.Apply that may have timed out); otherwise it looks every finishAfter.
	sent   []*sentBatch
	finish chan struct{}
}

// sentBatch is a batch given to raft: its log entry's first byte, its requests, raft's future
// for it (set once raft.Apply returned), and whether its requests were answered; the last two
// are guarded by groupCommit.mu.
type sentBatch struct {
	first    *byte
	entries  []*groupEntry
	at       time.Time // when it was sent
	future   raft.ApplyFuture
	answered bool
}

// finishAfter is how old a batch gets before runFinisher waits for raft's outcome of it unasked.
// Raft answers a batch without applying it only when leadership is lost (which wakes the
// finisher at once), at shutdown (which answers every request), when its queue stayed full for
// ApplyTimeout (sendBatch wakes the finisher), or while a leadership transfer is under way: for
// that last one, and anything unforeseen, the finisher looks at the oldest batch this often.
const finishAfter = 100 * time.Millisecond

// groupEntry is one request's entry in a group commit, and its outcome once the batch's is
// known: the request's own results, or the batch's error.
type groupEntry struct {
	// cmds are the request's commands, whose keys are marked pending until it is answered;
	// they are encoded straight into the batch's entry when it is sent, size bytes
	// (fsm.BatchRequestSize). Their bytes stay put until then: the request's caller waits for
	// its answer before it lets go of them.
	cmds []fsm.Command
	size int
	lead leadership // the leadership it was evaluated in
	// done is closed once the entry is answered; with shared, once every entry of the shared
	// channel is (doneShared).
	done    chan struct{}
	shared  *doneShared
	results []fsm.Result
	err     error
}

// doneShared is one done channel for the entries of a connection's pipeline proposed together
// (Replica.ProposeAll): one channel to make and close instead of one each. Each entry still waits
// for its own answer, since the channel closes only once the last of them is answered; they
// are consecutive in the queue, so almost always answered together.
type doneShared struct {
	left atomic.Int32 // entries not answered yet
}

// answered closes e's done channel if e was the last of its channel's entries to be answered.
func (e *groupEntry) answered() {
	if e.shared == nil || e.shared.left.Add(-1) == 0 {
		close(e.done)
	}
}

// wait returns the entry's outcome, or raft.ErrRaftShutdown once the node stops: a batch
// given to raft as it shut down may never be answered (awaitFuture).
func (e *groupEntry) wait(stop <-chan struct{}) ([]fsm.Result, error) {
	// Mostly answered already (a pipeline waits for Done first): a receive from a closed
	// channel alone takes no lock, where a select also locks stop, which every request of the
	// node shares: a pipelined node's requests would contend on it.
	select {
	case <-e.done:
		return e.results, e.err
	default:
	}
	select {
	case <-e.done:
		return e.results, e.err
	case <-stop:
		return nil, raft.ErrRaftShutdown
	}
}

// newGroupEntry is a request's entry for the group commit: its commands, the leadership it was
// evaluated in, and the channel its answer closes (shared: with others, doneShared).
func newGroupEntry(cmds []fsm.Command, lead leadership, done chan struct{}, shared *doneShared) groupEntry {
	return groupEntry{cmds: cmds, size: fsm.BatchRequestSize(cmds), lead: lead, done: done, shared: shared}
}

// leadership is when a request was evaluated: in which of this node's leaderships (gen,
// Replica.leaderGen) and in which raft term (the term whose barrier completed the table it was
// evaluated against, Replica.readyTerm).
type leadership struct {
	gen, term uint64
}

// submitGroupedAll queues filled entries for the next group commit, in order, and sends the
// queue if nobody is sending. It runs without Replica.mu.
func (n *Replica) submitGroupedAll(entries []*groupEntry) {
	if len(entries) == 0 {
		return
	}
	n.stats.proposals.Add(uint64(len(entries)))
	g := &n.group
	g.mu.Lock()
	g.queue = append(g.queue, entries...)
	if g.sending {
		g.mu.Unlock()
		return
	}
	g.sending = true
	batch := g.takeLocked()
	g.mu.Unlock()
	n.sendBatch(batch)
}

// batchSettled is told, once per batch, that sb no longer holds the next batch back: the
// leader's store wrote it (writeWatch, on raft's leader loop), or raft answered it unapplied
// (runFinisher; sb nil: a batch was dropped unsent). If requests queued meanwhile, it sends them
// as the next batch right there: raft's apply channel is buffered, so raft.Apply returns at once
// and the leader loop finds the batch as soon as it is back, with no goroutine to wake first.
// (The channel holds MaxAppendEntries entries; with group commit on, raftlock has at most one
// batch and a few of the node's own proposals in it, so the leader loop never waits on itself
// here.) If nothing queued, sending ends and the next request sends its own.
func (n *Replica) batchSettled(sb *sentBatch) {
	if sb != nil && !n.writes.want.CompareAndSwap(sb, nil) {
		return // already told, or a later batch is awaited
	}
	g := &n.group
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

// takeLocked removes the queue's first entries, up to maxBatchBytes, and returns them.
func (g *groupCommit) takeLocked() []*groupEntry {
	size, count := 0, 0
	for count < len(g.queue) && (count == 0 || size+g.queue[count].size <= maxBatchBytes) {
		size += g.queue[count].size
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
// until raft's leader loop takes it, and hands it to runFinisher for its outcome. The next
// batch goes once this one has settled (batchSettled).
func (n *Replica) sendBatch(batch []*groupEntry) {
	// A request evaluated while this node led in an earlier term must not reach the log in a
	// later one: it is refused, certainly unapplied (the view it was evaluated against was
	// rebuilt since). The generation says so once watchLeadership has seen the change; raft's
	// term says so at once, even when this node lost and won leadership again before the
	// watcher ran (it would not have to have been ready in between). What is left is the
	// instant between this check and raft.Apply, which the apply-time guards cover.
	now := leadership{gen: n.leaderGen.Load(), term: n.raft.CurrentTerm()}
	var stale []*groupEntry
	batch = slices.DeleteFunc(batch, func(e *groupEntry) bool {
		if e.lead == now {
			return false
		}
		stale = append(stale, e)
		return true
	})
	if len(stale) > 0 {
		n.answerBatch(stale, nil, n.notLeader())
	}
	if len(batch) == 0 {
		n.batchSettled(nil)
		return
	}
	if err := n.diskFailed(); err != nil {
		// raft is stopping for the failed disk, and a batch it took into its queue now might
		// never be answered: refused here, certainly unwritten.
		n.answerBatch(batch, nil, err)
		n.batchSettled(nil)
		return
	}
	// Even a batch of one is written as a batch: every entry a cluster in FormatBatch writes
	// says so, and a node that restarts or restores a snapshot learns the format again from the
	// next entry it applies.
	size := fsm.BatchHeaderSize(len(batch))
	for _, e := range batch {
		size += e.size
	}
	data := fsm.AppendBatchHeader(make([]byte, 0, size), len(batch))
	for _, e := range batch {
		data = fsm.AppendBatchRequest(data, e.cmds)
	}
	n.stats.group.Observe(uint64(len(batch)))
	// In sent before raft has it: the leader may apply it before raft.Apply returns.
	sb := &sentBatch{first: &data[0], entries: batch, at: time.Now()}
	g := &n.group
	g.mu.Lock()
	g.sent = append(g.sent, sb)
	g.mu.Unlock()
	n.writes.want.Store(sb)
	f := n.raft.Apply(data, n.cfg.ApplyTimeout)
	g.mu.Lock()
	sb.future = f
	g.mu.Unlock()
	// Only an Apply that waited ApplyTimeout can have timed out unqueued: then its outcome is
	// known already, and the next batch waits on it (batchSettled). Every other batch is
	// answered where the leader applies it, with no goroutine woken to wait for its future
	// (that was two hand-offs per batch).
	if time.Since(sb.at) >= n.cfg.ApplyTimeout {
		n.group.wakeFinisher()
	}
}

// wakeFinisher has runFinisher wait for the outcome of every batch not answered yet.
func (g *groupCommit) wakeFinisher() {
	select {
	case g.finish <- struct{}{}:
	default: // runFinisher has a signal pending
	}
}

// writeWatch is raft's log store with one addition for the group commit: when it has written
// the entry of the batch the leader awaits (want), it tells batchSettled. It
// tells the entry apart by its first byte's address: the leader's raft stores the very bytes it
// was given. On followers want is nil and it only forwards.
type writeWatch struct {
	raft.LogStore
	want    atomic.Pointer[sentBatch]
	written func(*sentBatch)
	// failed is told of every error of a write (disk.go).
	failed func(error)
}

func (w *writeWatch) StoreLog(l *raft.Log) error { return w.StoreLogs([]*raft.Log{l}) }

func (w *writeWatch) StoreLogs(logs []*raft.Log) error {
	err := w.LogStore.StoreLogs(logs)
	if err != nil {
		w.failed(err)
	}
	if sb := w.want.Load(); sb != nil {
		for _, l := range logs {
			if len(l.Data) > 0 && &l.Data[0] == sb.first {
				w.written(sb) // a failed write too: raft answers its entries, and the next goes on
				break
			}
		}
	}
	return err
}

func (w *writeWatch) DeleteRange(lo, hi uint64) error {
	err := w.LogStore.DeleteRange(lo, hi)
	if err != nil {
		w.failed(err)
	}
	return err
}

// runFinisher gives the requests of a batch that raft answered without applying it raft's
// error (or results, if it did apply). When woken (wakeFinisher) it waits, batch after batch in
// the order they were sent (the order raft answers them), for the outcome of every batch not
// answered yet; every finishAfter it does so for the batches older than that. A batch the
// leader applied was answered there (answerApplied) and is not waited for. It is not one of the
// node's goroutines (goFunc): Close does not wait for it, since raft may never answer a batch
// dropped at shutdown; the requests of such a batch are answered by the node's stop instead
// (groupEntry.wait), and the finisher is left waiting.
func (n *Replica) runFinisher() {
	g := &n.group
	tick := time.NewTicker(finishAfter)
	defer tick.Stop()
	for {
		all := false
		select {
		case <-g.finish:
			all = true
		case <-tick.C:
		case <-n.stop:
			return
		}
		for {
			g.mu.Lock()
			var sb *sentBatch
			for _, b := range g.sent {
				if b.future != nil && !b.answered {
					sb = b
					break
				}
			}
			g.mu.Unlock()
			if sb == nil || !all && time.Since(sb.at) < finishAfter {
				break
			}
			err := sb.future.Error()
			n.batchSettled(sb) // if raft answered it unapplied, the next batch must not wait on it
			g.mu.Lock()
			mine := !sb.answered
			sb.answered = true
			g.sent = slices.DeleteFunc(g.sent, func(b *sentBatch) bool { return b == sb })
			g.mu.Unlock()
			if !mine {
				continue
			}
			var resp *entryResponse
			if err == nil {
				resp, _ = sb.future.Response().(*entryResponse)
			}
			n.answerBatch(sb.entries, resp, err)
		}
	}
}

// answerApplied answers the requests of the sent batches among logs, which ApplyBatch applied,
// with out's responses. ApplyBatch calls it once every hook of the batch has run.
func (n *Replica) answerApplied(logs []*raft.Log, out []interface{}) {
	g := &n.group
	g.mu.Lock()
	// Almost always one batch: raft applies what it committed together.
	var mineBuf [1]*sentBatch
	var respBuf [1]*entryResponse
	mine, resps := mineBuf[:0], respBuf[:0]
	for i, l := range logs {
		if l.Type != raft.LogCommand || len(l.Data) == 0 {
			continue
		}
		for _, sb := range g.sent {
			if sb.first == &l.Data[0] && !sb.answered {
				sb.answered = true
				resp, _ := out[i].(*entryResponse)
				mine, resps = append(mine, sb), append(resps, resp)
				break
			}
		}
	}
	if len(mine) > 0 {
		g.sent = slices.DeleteFunc(g.sent, func(b *sentBatch) bool { return b.answered })
	}
	g.mu.Unlock()
	for i, sb := range mine {
		n.answerBatch(sb.entries, resps[i], nil) // without g.mu: it takes Replica.mu
	}
}

// answerBatch gives each request of a batch its results, or err, clears the pending marks of
// their keys, and wakes them, last first.
//
// The marks clear here, once the batch applied or failed, and not when each request's caller
// collects its outcome: a pipelining connection proposes its next request before it collects
// the first's (server/stage.go), and that proposal may wait on a key another such connection
// marked; were the marks theirs to clear, the two would wait on each other for ever.
//
// Last first: a connection's pipelined requests sit in a batch in the order it sent them, and
// it writes their replies in that order once the first has finished (server/pipeline.go):
// woken last, the first finds the others of its batch done, and the connection writes them all
// in one write instead of one or two per wake-up.
func (n *Replica) answerBatch(batch []*groupEntry, resp *entryResponse, err error) {
	for i, e := range batch {
		switch {
		case err != nil:
			e.err = err
		case resp == nil || resp.results == nil:
			e.err = node.ErrUncertain // the entry did not decode on this node (ApplyBatch logged it)
		default:
			if r := resp.request(i, len(batch)); len(r) == len(e.cmds) {
				e.results = r
			} else {
				e.err = node.ErrUncertain
			}
		}
	}
	n.mu.Lock()
	for _, e := range batch {
		n.clearPendingLocked(e.cmds)
	}
	n.mu.Unlock()
	for i := len(batch) - 1; i >= 0; i-- {
		batch[i].answered()
	}
}
