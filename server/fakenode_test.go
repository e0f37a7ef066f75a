package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
)

// fakeNode is an in-memory Replica for the server's unit tests: a leader that evaluates a request
// and applies what it yields at once, with no raft, no elections and no timers, so pipeline,
// tracking and waiter tests do not depend on raft's timing. Leases never end by themselves: a
// test ends one with expire. A test may hold commits back (holdCommits) to see how many of a
// connection's requests are in flight together.
type fakeNode struct {
	mu struct {
		sync.Mutex
		table *fsm.Machine
		index uint64
		// hold > 0: proposals wait until hold of them are queued (or holdTimeout passes), then
		// commit together.
		hold   int
		queued []*fakeProposal
		timer  *time.Timer
		// interfere, when set, is applied as an entry of its own after the next request was
		// evaluated and before its entry applies, once (see interfereNext).
		interfere []fsm.Command
	}
	watchers atomic.Pointer[node.Watchers]
	// follower: the node is not the leader and knows none (until setLeader).
	follower atomic.Bool
	leaderMu sync.Mutex
	leaderCh chan struct{} // closed at the next setLeader
	keys     atomic.Int64  // the table's key count, stored after every commit
	// waiting is how many requests wait for their commit now; most is the most there were.
	waiting, most atomic.Int32
	// execHook, when set, runs at the start of every Exec (before evaluation), with the
	// request's keys.
	execHook func(ctx context.Context, keys [][]byte)
	// locks is the lock policy the fake runs, through the same hooks as raftnode's core: its
	// lock queue serves LOCK ... WAIT (startLocks).
	locks *locks.Policy
	// logEnd, when set, is what LogEnd says (setLogEnd).
	logEnd atomic.Pointer[node.LogEnd]
}

// fakeProposal is one request's commands waiting to commit.
type fakeProposal struct {
	f       *fakeNode
	cmds    []fsm.Command
	at      node.LogPosition // its entry's, once committed
	results []fsm.Result
	done    chan struct{}
	// own is how many of cmds are the request's: the lock policy's hand-off grants follow, and
	// answer tells it their outcome.
	own    int
	answer func([]fsm.Result, error)
}

// holdTimeout bounds how long held commits wait for the rest of their batch, so a server that
// fails to pipeline makes a test fail instead of hang.
const holdTimeout = 10 * time.Second

var (
	_ Replica      = (*fakeNode)(nil)
	_ Admin        = (*fakeNode)(nil)
	_ node.Replica = (*fakeNode)(nil)
)

func newFakeNode() *fakeNode { return newFakeNodeIn(fsm.FormatCurrent) }

// newFakeNodeIn is a fake whose cluster is in log format format.
func newFakeNodeIn(format byte) *fakeNode {
	f := &fakeNode{locks: locks.New(locks.Config{Logger: quiet})}
	f.mu.table = fsm.New()
	f.mu.table.NoteFormat(format)
	return f
}

// startLocks starts the fake's lock policy, a leader's from the start, until the test ends.
func (f *fakeNode) startLocks(t testing.TB) {
	f.locks.Start(f)
	f.mu.Lock()
	if !f.follower.Load() {
		f.locks.Promote()
	}
	f.mu.Unlock()
	t.Cleanup(f.locks.Close)
}

func (f *fakeNode) VerifyLeader(context.Context) error {
	if f.follower.Load() {
		return &node.NotLeaderError{}
	}
	return nil
}
func (f *fakeNode) NotLeader() error { return &node.NotLeaderError{} }

// LeaseNow stands still: the fake's leases never end by themselves (expire ends one).
func (f *fakeNode) LeaseNow() int64 { return 0 }

// noneInFlight: the fake applies each batch whole under its lock, so the table a proposal sees
// is the one its entry applies to.
func noneInFlight([]byte) bool { return false }

// interfereNext applies cmds, as an entry of their own, between the next request's evaluation
// and its apply: the table changing under a request, as a leader change between the two can
// make it (the pending marks rule it out on a stable leader).
func (f *fakeNode) interfereNext(cmds ...fsm.Command) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.interfere = cmds
}

// holdCommits makes the next n proposals commit together, once all n are queued.
func (f *fakeNode) holdCommits(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.hold = n
}

func (f *fakeNode) Exec(ctx context.Context, keys [][]byte, eval node.Eval, around func(wait func())) ([]fsm.Result, error) {
	p, err := f.Propose(ctx, keys, eval)
	if err != nil {
		return nil, err
	}
	var results []fsm.Result
	if around == nil {
		return p.Wait()
	}
	around(func() { results, err = p.Wait() })
	return results, err
}

// ProposeAll proposes each request in turn.
func (f *fakeNode) ProposeAll(ctx context.Context, reqs []node.Proposal) {
	for i := range reqs {
		reqs[i].Pending, reqs[i].Err = f.Propose(ctx, reqs[i].Keys, reqs[i].Eval)
	}
}

// Propose evaluates and queues, as raftnode's does; the proposal counts as waiting for its
// commit (waiting, most) from then until its Wait returns.
func (f *fakeNode) Propose(ctx context.Context, keys [][]byte, eval node.Eval) (node.Pending, error) {
	if f.execHook != nil {
		f.execHook(ctx, keys)
	}
	f.mu.Lock()
	cmds := eval(fakeView{f.mu.table})
	if len(cmds) == 0 {
		f.mu.Unlock()
		return fakeRead{}, nil
	}
	for _, c := range cmds {
		if err := c.Validate(); err != nil {
			f.mu.Unlock()
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	p := &fakeProposal{f: f, own: len(cmds), done: make(chan struct{})}
	p.cmds, p.answer = f.locks.Handoffs(f.mu.table, noneInFlight, cmds, f.mu.table.Format())
	f.mu.queued = append(f.mu.queued, p)
	var batch []*fakeProposal
	switch {
	case len(f.mu.queued) >= f.mu.hold:
		batch = f.takeQueuedLocked()
	case f.mu.timer == nil:
		f.mu.timer = time.AfterFunc(holdTimeout, func() {
			f.mu.Lock()
			batch := f.takeQueuedLocked()
			f.mu.Unlock()
			f.commit(batch)
		})
	}
	n := f.waiting.Add(1)
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	f.mu.Unlock()
	f.commit(batch)
	return p, nil
}

func (p *fakeProposal) Done() <-chan struct{} { return p.done }

func (p *fakeProposal) Wait() ([]fsm.Result, error) {
	<-p.done
	p.f.waiting.Add(-1)
	if p.answer != nil {
		p.answer(p.results, nil)
	}
	return p.results[:p.own:p.own], nil
}

// fakeRead is the outcome of a request that yielded no commands: nothing to wait for.
type fakeRead struct{}

func (fakeRead) Done() <-chan struct{}       { return nil }
func (fakeRead) Wait() ([]fsm.Result, error) { return nil, nil }

// takeQueuedLocked takes every queued proposal and ends any hold.
func (f *fakeNode) takeQueuedLocked() []*fakeProposal {
	batch := f.mu.queued
	f.mu.queued, f.mu.hold = nil, 0
	if f.mu.timer != nil {
		f.mu.timer.Stop()
		f.mu.timer = nil
	}
	return batch
}

// commit applies a batch in order, each request's commands as one entry (all or nothing), tells
// the change hook, and only then lets the requests hear their results: what raftnode does.
func (f *fakeNode) commit(batch []*fakeProposal) {
	if len(batch) == 0 {
		return
	}
	var changed [][]byte
	f.mu.Lock()
	for _, p := range batch {
		if cmds := f.mu.interfere; cmds != nil {
			f.mu.interfere = nil
			f.mu.index++
			for i, r := range f.mu.table.ApplyEntry(nil, f.mu.index, cmds) {
				f.locks.Applied(f.mu.table, fsm.LeaseKey(cmds[i], r), f.mu.index, r)
				if changesKey(r) {
					changed = append(changed, fsm.LeaseKey(cmds[i], r))
				}
			}
		}
		f.mu.index++
		p.at = node.LogPosition{Index: f.mu.index, Term: 1}
		p.results = f.mu.table.ApplyEntry(nil, f.mu.index, p.cmds)
		for i, r := range p.results {
			f.locks.Applied(f.mu.table, fsm.LeaseKey(p.cmds[i], r), f.mu.index, r)
			if changesKey(r) {
				changed = append(changed, fsm.LeaseKey(p.cmds[i], r))
			}
		}
	}
	flushed := false
	for _, p := range batch {
		for _, r := range p.results {
			flushed = flushed || r.Status == fsm.StatusFlushed && r.Existed
		}
	}
	if len(changed) > 0 || flushed {
		f.locks.Changed(f.mu.table, changed, flushed)
	}
	f.keys.Store(int64(f.mu.table.Len()))
	f.mu.Unlock()
	w := f.watched()
	if w.UsersChanged != nil {
		w.UsersChanged() // cheap enough to say after every batch in tests
	}
	if visible := slices.DeleteFunc(slices.Clone(changed), fsm.Hidden); w.Changed != nil && len(visible) > 0 {
		w.Changed(visible)
	}
	for _, p := range batch {
		for i, c := range p.cmds {
			f.waited(w, c, p.results[i])
			switch ev := node.KeyEventOf(c, p.results[i]); {
			case p.results[i].Status == fsm.StatusPublished && w.Published != nil:
				p.results[i].Receivers = w.Published(p.at, c.Key, c.Owner, c.Kind == fsm.KindShardPublish)
			case ev != 0 && w.KeyEvent != nil:
				w.KeyEvent(p.at, c.Key, ev)
			}
		}
	}
	for _, p := range batch {
		close(p.done)
	}
}

func changesKey(r fsm.Result) bool {
	return r.Status == fsm.StatusGranted || r.Status == fsm.StatusReleased || r.Status == fsm.StatusRenewed ||
		r.Status == fsm.StatusExpired && r.Existed || r.Status == fsm.StatusQueued
}

// expire ends the lease of key (database 0's) through a committed Expire, as the leader's lease
// loop would.
func (f *fakeNode) expire(t testing.TB, key string) {
	t.Helper()
	f.mu.Lock()
	tk := fsm.DBKey(0, []byte(key))
	l, ok := f.mu.table.Get(tk)
	f.mu.Unlock()
	if !ok {
		t.Fatalf("expire %q: not held", key)
	}
	p := &fakeProposal{cmds: []fsm.Command{{Kind: fsm.KindExpire, Key: tk, Token: l.Token, LeaseRev: l.LeaseRev}}, done: make(chan struct{})}
	f.commit([]*fakeProposal{p})
	if r := p.results[0]; r.Status != fsm.StatusExpired || !r.Existed {
		t.Fatalf("expire %q = %+v", key, r)
	}
}

func (f *fakeNode) ExecLocal(eval func(node.View)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	eval(fakeView{f.mu.table})
}

func (f *fakeNode) IsLeader() bool { return !f.follower.Load() }

func (f *fakeNode) Leadership() node.Leadership {
	changed := f.leaderChanged()
	if f.follower.Load() {
		return node.Leadership{Changed: changed}
	}
	return node.Leadership{ID: "n1", Changed: changed}
}

// setLeader makes the fake the ready leader (true) or a node that knows no leader (false).
func (f *fakeNode) setLeader(leader bool) {
	f.mu.Lock()
	f.follower.Store(!leader)
	if leader {
		f.locks.Promote()
	} else {
		f.locks.Demote(&node.NotLeaderError{})
	}
	f.mu.Unlock()
	f.leaderMu.Lock()
	defer f.leaderMu.Unlock()
	if f.leaderCh != nil {
		close(f.leaderCh)
		f.leaderCh = nil
	}
}

// leaderChanged returns a channel closed at the next setLeader.
func (f *fakeNode) leaderChanged() <-chan struct{} {
	f.leaderMu.Lock()
	defer f.leaderMu.Unlock()
	if f.leaderCh == nil {
		f.leaderCh = make(chan struct{})
	}
	return f.leaderCh
}

func (f *fakeNode) Watch(w node.Watchers) { f.watchers.Store(&w) }

// watched returns the hooks registered (none before Watch).
func (f *fakeNode) watched() node.Watchers {
	if w := f.watchers.Load(); w != nil {
		return *w
	}
	return node.Watchers{}
}

func (f *fakeNode) Members() ([]node.Member, error) {
	return []node.Member{{ID: "n1", RaftAddr: "fake:1", Voter: true, Leader: true}}, nil
}

// Keys, like raftnode's, takes no lock: scripts ask it while their evaluation holds the view.
func (f *fakeNode) Keys() int { return int(f.keys.Load()) }

// LogEnd is the fake's log's end (one term, everything committed), or what setLogEnd set.
func (f *fakeNode) LogEnd() node.LogEnd {
	if end := f.logEnd.Load(); end != nil {
		return *end
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return node.LogEnd{Last: node.LogPosition{Index: f.mu.index, Term: 1}, Committed: f.mu.index}
}

// setLogEnd makes LogEnd say end from now on: a log with entries not known committed yet.
func (f *fakeNode) setLogEnd(end node.LogEnd) { f.logEnd.Store(&end) }

func (f *fakeNode) Stats() node.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return node.Stats{ID: "n1", State: "Leader", Ready: true, LeaderID: "n1", Voters: 1, Locks: f.mu.table.Len(),
		AppliedIndex: f.mu.index, LastIndex: f.mu.index, CommitIndex: f.mu.index}
}

func (f *fakeNode) AddServer(context.Context, string, string, string, bool) (uint64, error) {
	return 0, node.ErrNoSuchMember
}
func (f *fakeNode) Promote(context.Context, string) error                  { return node.ErrNoSuchMember }
func (f *fakeNode) RemoveServer(context.Context, string, bool) error       { return node.ErrNoSuchMember }
func (f *fakeNode) Transfer(string) error                                  { return &node.NotLeaderError{} }
func (f *fakeNode) SetMemberAddr(context.Context, string, string) error    { return nil }
func (f *fakeNode) Announce(context.Context, string, string, string) error { return node.ErrNotMember }
func (f *fakeNode) Snapshot() error                                        { return nil }
func (f *fakeNode) Digest() (uint64, string)                               { return f.Stats().AppliedIndex, "" }
func (f *fakeNode) Membership(string) node.Membership                      { return node.Membership{} }
func (f *fakeNode) ReadIndex(context.Context) (uint64, error)              { return f.Stats().AppliedIndex, nil }

// PlanGroups refuses: the fake has no raft configuration to take voters from (cluster's tests
// and tests/groupsplan_test.go plan groups on real members).
func (f *fakeNode) PlanGroups(context.Context, fsm.GroupsPlan, int) (fsm.GroupsPlan, error) {
	return fsm.GroupsPlan{}, errors.New("the fake node plans no groups")
}

// Backup is the fake's table in the backup format, as raftnode's leader takes it.
func (f *fakeNode) Backup(context.Context) ([]byte, error) {
	f.mu.Lock()
	snap := f.mu.table.Snapshot()
	f.mu.Unlock()
	return backup.Encode(backup.Header{SourceNode: "n1"}, snap)
}

// fakeView is the fake node's table seen as a view: a lease has all of its length left.
type fakeView struct{ m *fsm.Machine }

func (v fakeView) Lookup(key []byte) (fsm.Lock, time.Duration, bool) {
	l, ok := v.m.Get(key)
	return l, time.Duration(l.LeaseMs) * time.Millisecond, ok
}

func (v fakeView) Slots() fsm.Slots { return v.m.Slots() }

func (v fakeView) Kinds(key []byte) (fsm.Kinds, time.Duration) {
	k := v.m.Kinds(key)
	return k, time.Duration(k.Delay.LeaseMs) * time.Millisecond
}

func (v fakeView) Holders(key []byte, fn func(fsm.Lock, time.Duration) bool) {
	v.m.Holders(key, func(l fsm.Lock) bool { return fn(l, time.Duration(l.LeaseMs)*time.Millisecond) })
}

func (v fakeView) Waiters(key []byte, fn func(fsm.Waiter, time.Duration) bool) {
	v.m.Waiters(key, func(w fsm.Waiter) bool { return fn(w, time.Duration(w.Lock.LeaseMs)*time.Millisecond) })
}

func (v fakeView) QueuedKeys(fn func([]byte) bool) { v.m.QueuedKeys(fn) }

func (v fakeView) Len(db int) int { return v.m.LenDB(db) }
func (v fakeView) Ascend(from []byte, fn func(key []byte, l fsm.Lock) bool) {
	v.m.Ascend(string(from), func(key string, l fsm.Lock) bool { return fn([]byte(key), l) })
}
func (v fakeView) Script(sha string) (string, bool) { return v.m.Script(sha) }
func (v fakeView) ScriptCache() (int, int)          { return v.m.Scripts(), v.m.ScriptBytes() }

func (v fakeView) User(name string) (string, bool) { return v.m.User(name) }
func (v fakeView) Users() map[string]string        { return v.m.Users() }
func (v fakeView) Format() byte                    { return v.m.Format() }
func (v fakeView) Libraries() *fsm.Libraries       { return v.m.Libraries() }

// waited tells w of a waiter's end that c (with result r) made, as raftnode's apply does: a
// Serve's grant, or a release or expiry of its entry.
func (f *fakeNode) waited(w node.Watchers, c fsm.Command, r fsm.Result) {
	if w.Waited == nil {
		return
	}
	switch {
	case c.Kind == fsm.KindServe && r.Status == fsm.StatusGranted:
		w.Waited(r.Served, fsm.BaseKey(c.Key), r.Token)
	case c.Kind == fsm.KindRelease && r.Status == fsm.StatusReleased, c.Kind == fsm.KindExpire && r.Existed:
		if key, seq, ok := fsm.WaiterOf(c.Key); ok {
			w.Waited(seq, key, 0)
		}
	}
}
