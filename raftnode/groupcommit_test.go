package raftnode

import (
	"errors"
	"fmt"
	"hash/maphash"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// busySender makes n's group commit behave as if a batch were being written: requests queue
// until the test sends the queue, as runSender does next.
func busySender(n *testNode) {
	n.group.mu.Lock()
	n.group.sending = true
	n.group.mu.Unlock()
}

// grantEval grants key to owner.
func grantEval(key, owner string) node.Eval {
	return func(node.View) []fsm.Command { return []fsm.Command{grantCmd(key, owner)} }
}

// While a batch is being given to raft, requests queue, and the next batch carries all of them
// in one log entry, in the order they were proposed (a pipelining connection's order), each
// with its own results and a token above the one before.
func TestGroupCommitCarriesWhatQueued(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	busySender(n)
	const queued = 40
	var ps []*proposal
	for i := range queued {
		key := fmt.Sprint("k", i)
		p, err := n.propose(t.Context(), [][]byte{[]byte(key)}, grantEval(key, "o"))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	n.group.mu.Lock()
	waiting := len(n.group.queue)
	n.group.mu.Unlock()
	if waiting != queued {
		t.Fatalf("%d requests queued behind a send, want %d", waiting, queued)
	}
	n.batchSettled(nil) // as the write of the batch before does: the queue goes as the next batch
	var last fsm.Token
	var index uint64
	for i, p := range ps {
		res, err := p.wait()
		if err != nil || len(res) != 1 || res[0].Status != fsm.StatusGranted {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
		if res[0].Token <= last {
			t.Errorf("request %d got token %d after %d", i, res[0].Token, last)
		}
		if i > 0 && res[0].LeaseRev != index {
			t.Errorf("request %d applied at index %d, request 0 at %d: not one entry", i, res[0].LeaseRev, index)
		}
		last, index = res[0].Token, res[0].LeaseRev
	}
	var l raft.Log
	if err := n.stores.Log.GetLog(index, &l); err != nil {
		t.Fatal(err)
	}
	cmds, ends, err := fsm.DecodeEntries(nil, nil, l.Data)
	if err != nil || fsm.FormatOf(l.Data) != fsm.FormatBatch || len(ends) != queued {
		t.Fatalf("entry %d: format %d, %d requests, %v; want a batch of %d", index, fsm.FormatOf(l.Data), len(ends), err, queued)
	}
	for i, c := range cmds {
		if string(c.Key) != fmt.Sprint("k", i) || ends[i] != i+1 {
			t.Fatalf("request %d of the batch is on %q (ends %v), want k%d: not in proposal order", i, c.Key, ends, i)
		}
	}
	if s := n.Stats().GroupSize; s.Count() == 0 || s.Sum < queued {
		t.Errorf("GroupSize = %+v, want a group of %d counted", s, queued)
	}
}

// Each request of a batch applies whole or not at all on its own: a failed guard aborts its
// own request, never its neighbours'.
func TestGroupCommitRequestsAbortAlone(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	x := mustLock(t, n, "x", "o", 0)
	reqs := [][]fsm.Command{
		{grantCmd("a", "o")},
		{grantCmd("b", "o"), releaseCmd("x", x.Token+1)}, // the wrong token: b must not be granted
		{grantCmd("c", "o")},
	}
	var entries [][]byte
	for _, r := range reqs {
		entries = append(entries, fsm.EncodeEntry(nil, r))
	}
	f := n.raft.Apply(fsm.AppendBatch(nil, entries), 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	resp := f.Response().(*entryResponse)
	want := [][]fsm.Status{{fsm.StatusGranted}, {fsm.StatusAborted, fsm.StatusNotFound}, {fsm.StatusGranted}}
	for i := range reqs {
		got := resp.request(i, len(reqs))
		if len(got) != len(want[i]) {
			t.Fatalf("request %d: %d results, want %d", i, len(got), len(want[i]))
		}
		for j, r := range got {
			if r.Status != want[i][j] {
				t.Errorf("request %d, command %d: %+v, want %s", i, j, r, want[i][j])
			}
		}
	}
	if !held(n, "a") || held(n, "b") || !held(n, "c") || !held(n, "x") {
		t.Errorf("after the batch a=%v b=%v c=%v x=%v, want a, c and x held", held(n, "a"), held(n, "b"), held(n, "c"), held(n, "x"))
	}
	if resp.request(3, 3) != nil || resp.request(0, 2) != nil {
		t.Error("request() answered for a request the entry does not carry")
	}
}

// Requests still queued when the node stops get an answer, and nothing is left waiting.
func TestGroupCommitAnswersAtClose(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	busySender(n)
	var ps []*proposal
	for i := range 8 {
		key := fmt.Sprint("k", i)
		p, err := n.propose(t.Context(), [][]byte{[]byte(key)}, grantEval(key, "o"))
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	done := make(chan error, len(ps))
	for _, p := range ps {
		go func() {
			_, err := p.wait()
			done <- err
		}()
	}
	closeNode(t, n)
	for range ps {
		select {
		case err := <-done:
			if !errors.Is(err, node.ErrUncertain) {
				t.Errorf("a request queued at Close got %v, want ErrUncertain", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a request queued at Close got no answer")
		}
	}
}

// A follower restarted on a snapshot is in the cluster's format again once it applies the next
// entry at the latest: a snapshot of FormatFunctions says so itself, and one of FormatBatch
// (which says only FormatTyped) is followed by batches, as every entry such a cluster writes is
// one, even of one request. (A leader would switch again by itself; a follower must learn it.)
func TestGroupCommitFormatAfterRestart(t *testing.T) {
	nodes := newCluster(t, 3, func(c *Config) { c.TrailingLogs = 1 })
	l := testutil.Leader(t, nodes)
	f := testutil.Others(l, nodes)[0]
	mustLock(t, l, "k1", "o", 0)
	waitConverged(t, l, nodes)
	if err := f.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	f = restart(t, f)
	nodes = append(testutil.Others(f, nodes), f)
	testutil.ConnectAll(nodes)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if s := f.Stats(); s.AppliedIndex < l.raft.AppliedIndex() {
			return fmt.Errorf("the restarted follower applied %d, the leader %d", s.AppliedIndex, l.raft.AppliedIndex())
		}
		return nil
	})
	mustLock(t, l, "k2", "o", 0) // one request alone
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := f.Stats().LogFormat; got != int(fsm.FormatCurrent) {
			return fmt.Errorf("the restarted follower is in log format %d after the next entry, want %d", got, fsm.FormatCurrent)
		}
		return nil
	})
}

// A batch's first request hears last, after every other request of the batch (a pipelining
// connection then writes all their replies at once). Observed through a batch whose second
// request cannot be answered (its channel is closed already: closing it again panics): the
// panic comes before the first request is answered.
func TestAnswerBatchFirstLast(t *testing.T) {
	batch := make([]*groupEntry, 8)
	for i := range batch {
		batch[i] = &groupEntry{cmds: []fsm.Command{{Key: []byte("k")}}, done: make(chan struct{})}
	}
	close(batch[1].done)
	n := &Replica{markSeed: maphash.MakeSeed()}
	n.mu.pending = map[uint64]*pendingKey{}
	var caught any
	func() {
		defer func() { caught = recover() }()
		n.answerBatch(batch, nil, errors.New("answered"))
	}()
	if err, ok := caught.(error); !ok || err.Error() != "close of closed channel" {
		t.Fatalf("answerBatch stopped with %v, want the panic of the second request's closed channel", caught)
	}
	select {
	case <-batch[0].done:
		t.Error("the first request was answered before the second")
	default:
	}
	for i := 2; i < len(batch); i++ {
		if batch[i].err == nil {
			t.Errorf("request %d not answered before the second", i)
		}
	}
}

// ProposeAll evaluates a pipeline's requests in order and queues the ones that need not wait
// together; one with a key in flight waits, after the ones before it are queued, and the rest
// follow it. A request that fails to evaluate fails alone, and a read is a read.
func TestProposeAllKeepsOrderAroundAWait(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	busySender(n)
	first, err := n.propose(t.Context(), [][]byte{[]byte("mid")}, grantEval("mid", "other"))
	if err != nil {
		t.Fatal(err)
	}
	keys := func(k string) [][]byte { return [][]byte{[]byte(k)} }
	invalid := func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindGrant, Key: []byte("bad")}} // no match: Validate refuses it
	}
	var sawMid bool
	reqs := []node.Proposal{
		{Keys: keys("a"), Eval: grantEval("a", "o")},
		{Keys: keys("b"), Eval: grantEval("b", "o")},
		{Keys: keys("bad"), Eval: invalid},
		{Keys: keys("c"), Eval: func(v node.View) []fsm.Command { v.Lookup([]byte("c")); return nil }},
		{Keys: keys("mid"), Eval: func(v node.View) []fsm.Command {
			_, _, sawMid = v.Lookup([]byte("mid"))
			return []fsm.Command{grantCmd("mid", "o")}
		}},
		{Keys: keys("d"), Eval: grantEval("d", "o")},
	}
	proposed := make(chan struct{})
	go func() {
		defer close(proposed)
		n.ProposeAll(t.Context(), reqs)
	}()
	// a and b queue behind the first proposal; the request on mid waits for it.
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("a and b queued", func() bool {
		n.group.mu.Lock()
		defer n.group.mu.Unlock()
		return len(n.group.queue) == 3
	}))
	n.group.mu.Lock()
	var queued []string
	for _, e := range n.group.queue {
		queued = append(queued, string(e.cmds[0].Key))
	}
	n.group.mu.Unlock()
	if fmt.Sprint(queued) != "[mid a b]" {
		t.Fatalf("queued %v, want [mid a b]: the batch's requests in order, after what queued before", queued)
	}
	n.batchSettled(nil) // the queue goes: mid applies, and the waiting request goes on
	<-proposed
	if res, err := first.wait(); err != nil || res[0].Status != fsm.StatusGranted {
		t.Fatalf("the first grant of mid: %+v, %v", res, err)
	}
	if !sawMid {
		t.Error("the request on mid was evaluated before the grant in flight on it applied")
	}
	outcome := make([]string, len(reqs))
	var tokens []fsm.Token
	for i, r := range reqs {
		if r.Err != nil {
			outcome[i] = "error"
			continue
		}
		res, err := r.Pending.Wait()
		switch {
		case err != nil:
			outcome[i] = "error"
		case len(res) == 0:
			outcome[i] = "read"
		case res[0].Status == fsm.StatusGranted:
			outcome[i] = "granted"
			tokens = append(tokens, res[0].Token)
		default:
			outcome[i] = "refused"
		}
	}
	if want := "[granted granted error read refused granted]"; fmt.Sprint(outcome) != want {
		t.Errorf("outcomes %v, want %s", outcome, want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens %v: not in the requests' order", tokens)
		}
	}
}

// The requests of one ProposeAll share a done channel, closed once the last is answered, even
// when they do not fit one batch: here three of 100 KB go as two batches (maxBatchBytes).
func TestProposeAllAcrossBatches(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	busySender(n)
	big := string(make([]byte, 100<<10))
	var reqs []node.Proposal
	for i := range 3 {
		key := fmt.Sprint("big", i)
		reqs = append(reqs, node.Proposal{Keys: [][]byte{[]byte(key)}, Eval: grantEval(key, big)})
	}
	n.ProposeAll(t.Context(), reqs)
	from := n.raft.LastIndex()
	n.batchSettled(nil)
	for i, r := range reqs {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
		select {
		case <-r.Pending.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("request %d not answered", i)
		}
		if res, err := r.Pending.Wait(); err != nil || res[0].Status != fsm.StatusGranted {
			t.Fatalf("request %d: %+v, %v", i, res, err)
		}
	}
	last := n.raft.LastIndex()
	var sizes []int
	for i := from + 1; i <= last; i++ {
		var l raft.Log
		if err := n.stores.Log.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if _, ends, err := fsm.DecodeEntries(nil, nil, l.Data); l.Type == raft.LogCommand && err == nil {
			sizes = append(sizes, len(ends))
		}
	}
	if fmt.Sprint(sizes) != "[2 1]" {
		t.Errorf("batches of %v requests carried the three, want [2 1]", sizes)
	}
}

// A request waits for a FLUSHDB or FLUSHALL in flight (marked on its database's byte, on "")
// whatever its key; with none in flight it looks up its own keys alone (Replica.mu.wideMarks).
func TestPendingWideMarks(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	for _, wide := range []string{"\x00", ""} {
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("no batch in flight", func() bool {
			n.group.mu.Lock()
			defer n.group.mu.Unlock()
			return !n.group.sending
		}))
		busySender(n)
		flush, err := n.propose(t.Context(), [][]byte{[]byte(wide)}, func(node.View) []fsm.Command {
			return []fsm.Command{{Kind: fsm.KindFlush, Key: []byte(wide)}}
		})
		if err != nil {
			t.Fatal(err)
		}
		n.mu.Lock()
		marks := n.mu.wideMarks
		n.mu.Unlock()
		if marks != 1 {
			t.Fatalf("%q in flight: %d wide marks, want 1", wide, marks)
		}
		proposed, answered := make(chan error, 1), make(chan error, 1)
		go func() {
			p, err := n.propose(t.Context(), [][]byte{[]byte("\x00k")}, grantEval("\x00k", "o"))
			proposed <- err
			if err == nil {
				_, err = p.wait()
			}
			answered <- err
		}()
		select {
		case err := <-proposed:
			t.Fatalf("a request on a key of database 0 went ahead of the flush of %q in flight (%v)", wide, err)
		case <-time.After(100 * time.Millisecond):
		}
		n.batchSettled(nil) // the flush goes: the request waiting on it goes on
		if _, err := flush.wait(); err != nil {
			t.Fatal(err)
		}
		if err := <-proposed; err != nil {
			t.Fatal(err)
		}
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 5*time.Second, testutil.Cond("no wide marks left", func() bool {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.mu.wideMarks == 0
		}))
	}
}

// Two keys whose marks collide share one: a FLUSHALL's mark ("") that lands on a plain key's
// still counts as wide while either is in flight, so requests keep waiting for the flush.
func TestPendingWideMarkSharedWithAKey(t *testing.T) {
	n := newNode(t)
	n.mu.Lock()
	defer n.mu.Unlock()
	at := n.markOf(nil)
	n.mu.pending[at] = &pendingKey{n: 1} // a plain key's mark, as if its hash were ""'s
	n.markKeyLocked(nil)
	if n.mu.wideMarks != 1 || n.mu.pending[at].n != 2 {
		t.Fatalf("after marking \"\" on a shared mark: %d wide marks, %d in flight; want 1, 2", n.mu.wideMarks, n.mu.pending[at].n)
	}
	if n.pendingOnLocked([][]byte{[]byte("\x00k")}) == nil {
		t.Fatal("a request on a key of database 0 does not wait for the FLUSHALL in flight")
	}
	n.clearKeyLocked(nil) // one of the two applied: the other still flies
	if n.mu.wideMarks != 1 {
		t.Fatalf("with the shared mark still in flight: %d wide marks, want 1", n.mu.wideMarks)
	}
	n.clearKeyLocked(nil)
	if n.mu.wideMarks != 0 || len(n.mu.pending) != 0 {
		t.Fatalf("after both applied: %d wide marks, %d marks; want 0, 0", n.mu.wideMarks, len(n.mu.pending))
	}
}

// A request evaluated in one raft term never reaches the log in another, even before this node's
// leadership watcher has seen the change (its generation is the same): the batch that would
// carry it refuses it, unwritten, and the request hears that this node is not the leader.
func TestGroupCommitRefusesAnotherTermsRequest(t *testing.T) {
	n := newNode(t)
	settle(t, []*testNode{n})
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("no batch in flight", func() bool {
		n.group.mu.Lock()
		defer n.group.mu.Unlock()
		return !n.group.sending
	}))
	busySender(n)
	p, err := n.propose(t.Context(), [][]byte{[]byte("k")}, grantEval("k", "o"))
	if err != nil {
		t.Fatal(err)
	}
	before := n.Stats().LastIndex
	n.group.mu.Lock()
	p.grouped.lead.term-- // as if evaluated in the term before: a loss and a win the watcher missed
	n.group.mu.Unlock()
	n.batchSettled(nil)
	if _, err := p.wait(); notLeaderErr(err) == nil {
		t.Fatalf("a request of an earlier term: %v, want a NotLeaderError", err)
	}
	if after := n.Stats().LastIndex; after != before {
		t.Fatalf("the log went from index %d to %d: the request reached it", before, after)
	}
	if held(n, "k") {
		t.Fatal("the request of an earlier term was applied")
	}
}
