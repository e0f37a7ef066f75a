package raftnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// lockWait is LOCK key owner lease WAIT wait through LockWait.
func lockWait(ctx context.Context, n *testNode, key, owner string, leaseMs uint64, wait time.Duration) (fsm.Result, bool, error) {
	var saw fsm.Lock
	grant := fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte(owner), LeaseMs: leaseMs, Match: fsm.Match{Kind: fsm.MatchAbsent}, Acquire: true}
	res, err := n.locks.LockWait(ctx, [][]byte{[]byte(key)}, lockEval(key, owner, leaseMs, &saw), []fsm.Command{grant}, wait)
	if err != nil || len(res) == 0 {
		return fsm.Result{}, false, err
	}
	if len(res) != 1 {
		return fsm.Result{}, false, fmt.Errorf("LockWait %s: %d results, want 1", key, len(res))
	}
	return res[0], res[0].Status == fsm.StatusGranted, nil
}

// waitQueued waits until n holds want queued waiters.
func waitQueued(t *testing.T, n *testNode, want int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond(fmt.Sprintf("%d queued waiters", want), func() bool {
		return n.locks.LockWaiters() == want
	}))
}

// entryAt decodes the request on key of the command entry at index of n's log (an entry may
// carry several requests, a group commit, but only one of them on a key).
func entryAt(t *testing.T, n *testNode, index uint64, key string) []fsm.Command {
	t.Helper()
	var l raft.Log
	if err := n.stores.Log.GetLog(index, &l); err != nil {
		t.Fatalf("log entry %d: %v", index, err)
	}
	cmds, ends, err := fsm.DecodeEntries(nil, nil, l.Data)
	if err != nil {
		t.Fatalf("decode entry %d: %v", index, err)
	}
	from := 0
	for _, end := range ends {
		for _, c := range cmds[from:end] {
			if string(c.Key) == key {
				return cmds[from:end]
			}
		}
		from = end
	}
	t.Fatalf("entry %d has no request on %q: %s", index, key, kinds(cmds))
	return nil
}

// kinds lists an entry's commands as kind:key:owner, for comparison.
func kinds(cmds []fsm.Command) string {
	s := ""
	for _, c := range cmds {
		s += fmt.Sprintf("[%s %s %s]", c.Kind, c.Key, c.Owner)
	}
	return s
}

// Waiters are granted in the order they queued, each by the entry that releases the lock before
// it, with tokens that only grow and no two holders at once.
func TestHandoffFIFO(t *testing.T) {
	n := newNode(t)
	holder := mustLock(t, n, "k", "holder", 0)
	const waiters = 20
	type grant struct {
		i   int
		res fsm.Result
		err error
	}
	grants := make(chan grant, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, ok, err := lockWait(t.Context(), n, "k", fmt.Sprint("w", i), 0, 10*time.Second)
			if err == nil && !ok {
				err = fmt.Errorf("not granted: %+v", res)
			}
			if err == nil {
				_, err = propose(context.Background(), n, releaseCmd("k", res.Token))
			}
			grants <- grant{i, res, err}
		}()
		waitQueued(t, n, i+1)
	}
	if r, err := propose(t.Context(), n, releaseCmd("k", holder.Token)); err != nil || r.Status != fsm.StatusReleased {
		t.Fatalf("release = %+v, %v", r, err)
	}
	wg.Wait()
	close(grants)
	// The order of grants is their tokens' (a grant's token comes from its entry's place in the
	// log); the goroutines may report them in another order.
	var all []grant
	for g := range grants {
		if g.err != nil {
			t.Fatalf("waiter %d: %v", g.i, g.err)
		}
		all = append(all, g)
	}
	slices.SortFunc(all, func(a, b grant) int { return cmp.Compare(a.res.Token, b.res.Token) })
	var order []int
	for k, g := range all {
		order = append(order, g.i)
		if k > 0 && g.res.Token == all[k-1].res.Token {
			t.Errorf("waiters %d and %d got the same token %d", all[k-1].i, g.i, g.res.Token)
		}
		// The grant travelled in the entry of the release before it.
		cmds := entryAt(t, n, g.res.LeaseRev, "k")
		if len(cmds) != 2 || cmds[0].Kind != fsm.KindRelease || cmds[1].Kind != fsm.KindGrant || string(cmds[1].Owner) != fmt.Sprint("w", g.i) {
			t.Errorf("waiter %d's grant is in entry %s, want [Release k][Grant k w%d]", g.i, kinds(cmds), g.i)
		}
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want the queue's 0..%d", order, waiters-1)
		}
	}
	if q := n.locks.LockWaiters(); q != 0 {
		t.Errorf("%d waiters left queued", q)
	}
}

// A lease that runs out hands the lock to the head waiter in the Expire's own entry: nobody can
// take the key in between.
func TestHandoffOnExpiry(t *testing.T) {
	n := newNode(t)
	mustLock(t, n, "k", "holder", 200)
	got := make(chan error, 1)
	var res fsm.Result
	go func() {
		var ok bool
		var err error
		res, ok, err = lockWait(t.Context(), n, "k", "next", 0, 5*time.Second)
		if err == nil && !ok {
			err = errors.New("not granted")
		}
		got <- err
	}()
	waitQueued(t, n, 1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter got no answer")
	}
	cmds := entryAt(t, n, res.LeaseRev, "k")
	if len(cmds) != 2 || cmds[0].Kind != fsm.KindExpire || cmds[1].Kind != fsm.KindGrant || string(cmds[1].Owner) != "next" {
		t.Errorf("the hand-off entry is %s, want [Expire k][Grant k next]", kinds(cmds))
	}
}

// A waiter whose client is gone is skipped: the next one gets the lock.
func TestHandoffSkipsGoneWaiter(t *testing.T) {
	n := newNode(t)
	holder := mustLock(t, n, "k", "holder", 0)
	gone, cancel := context.WithCancel(t.Context())
	goneErr := make(chan error, 1)
	go func() {
		_, _, err := lockWait(gone, n, "k", "gone", 0, 10*time.Second)
		goneErr <- err
	}()
	waitQueued(t, n, 1)
	next := make(chan fsm.Result, 1)
	go func() {
		res, _, _ := lockWait(t.Context(), n, "k", "next", 0, 10*time.Second)
		next <- res
	}()
	waitQueued(t, n, 2)
	cancel()
	if err := <-goneErr; !errors.Is(err, context.Canceled) {
		t.Errorf("the gone waiter = %v, want context.Canceled", err)
	}
	if _, err := propose(t.Context(), n, releaseCmd("k", holder.Token)); err != nil {
		t.Fatal(err)
	}
	res := <-next
	if l, _, ok := n.LocalLookup([]byte("k")); !ok || string(l.Owner) != "next" || res.Token != l.Token {
		t.Errorf("after the release k = %+v (%v), want held by next with token %d", l, ok, res.Token)
	}
}

// goneAtGrant is a client that is there when its waiter is taken from the queue and gone by the
// time its grant applied: the race ghost-lock cleanup exists for.
type goneAtGrant struct {
	context.Context
	calls atomic.Int32
}

func (c *goneAtGrant) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.Canceled
}

// A grant handed to a client that hung up meanwhile is a ghost: released at once, and that
// release hands the lock on to the next waiter.
func TestHandoffGhostContinuesChain(t *testing.T) {
	n := newNode(t)
	holder := mustLock(t, n, "k", "holder", 0)
	ghost := &goneAtGrant{Context: context.Background()}
	ghostDone := make(chan fsm.Result, 1)
	go func() {
		res, _, _ := lockWait(ghost, n, "k", "ghost", 0, 10*time.Second)
		ghostDone <- res
	}()
	waitQueued(t, n, 1)
	next := make(chan fsm.Result, 1)
	go func() {
		res, _, _ := lockWait(t.Context(), n, "k", "next", 0, 10*time.Second)
		next <- res
	}()
	waitQueued(t, n, 2)
	if _, err := propose(t.Context(), n, releaseCmd("k", holder.Token)); err != nil {
		t.Fatal(err)
	}
	g := <-ghostDone
	select {
	case res := <-next:
		if res.Status != fsm.StatusGranted || res.Token <= g.Token {
			t.Errorf("next = %+v, want granted after the ghost's token %d", res, g.Token)
		}
		cmds := entryAt(t, n, res.LeaseRev, "k")
		if len(cmds) != 2 || cmds[0].Kind != fsm.KindRelease || cmds[0].Match.Token != g.Token || string(cmds[1].Owner) != "next" {
			t.Errorf("next's grant is in entry %s, want the ghost's release", kinds(cmds))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter after a ghost was never granted")
	}
}

// A leader that loses leadership answers every waiter queued on it at once, with the
// not-leader error: none waits for its deadline.
func TestHandoffLeaderLossAnswersWaiters(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	mustLock(t, l, "k", "holder", 0)
	const waiters = 5
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, _, err := lockWait(t.Context(), l, "k", fmt.Sprint("w", i), 0, 30*time.Second)
			errs <- err
		}()
	}
	waitQueued(t, l, waiters)
	testutil.Isolate(l, nodes)
	lost := time.Now()
	for range waiters {
		select {
		case err := <-errs:
			if notLeaderErr(err) == nil && !errors.Is(err, node.ErrUncertain) {
				t.Errorf("a waiter on the deposed leader = %v, want not leader", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("a waiter on the deposed leader still waits %v after the partition", time.Since(lost))
		}
	}
	t.Logf("waiters answered %v after the partition", time.Since(lost))
	if q := l.locks.LockWaiters(); q != 0 {
		t.Errorf("%d waiters left queued on the old leader", q)
	}
}

// A waiter whose deadline passes gets nothing and leaves the queue.
func TestHandoffDeadline(t *testing.T) {
	n := newNode(t)
	mustLock(t, n, "k", "holder", 0)
	start := time.Now()
	res, ok, err := lockWait(t.Context(), n, "k", "late", 0, 300*time.Millisecond)
	if err != nil || ok {
		t.Fatalf("LockWait on a held key = %+v, %v, %v; want a refusal", res, ok, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("gave up after %v, want 300ms", d)
	}
	if q := n.locks.LockWaiters(); q != 0 {
		t.Errorf("%d waiters left queued", q)
	}
}

// An entry that frees a key it touches twice (two deleting Writes here, as a MULTI can make)
// hands the key to one waiter: the kick's entry holds one grant, and the next waiter keeps its
// place. (With a grant per mention the second failed its guard and aborted the kick.)
func TestHandoffKickOnceForAKeyTouchedTwice(t *testing.T) {
	n := newNode(t)
	mustLock(t, n, "k", "holder", 0)
	type grant struct {
		res fsm.Result
		err error
	}
	got := make([]chan grant, 2)
	for i := range got {
		got[i] = make(chan grant, 1)
		go func() {
			res, ok, err := lockWait(t.Context(), n, "k", fmt.Sprint("w", i), 0, 10*time.Second)
			if err == nil && !ok {
				err = fmt.Errorf("not granted: %+v", res)
			}
			got[i] <- grant{res, err}
		}()
		waitQueued(t, n, i+1)
	}
	del := fsm.Command{Kind: fsm.KindWrite, Key: []byte("k"), Match: fsm.Match{Kind: fsm.MatchAny}}
	if _, err := execCmds(t.Context(), n, del, del); err != nil {
		t.Fatal(err)
	}
	var g grant
	select {
	case g = <-got[0]:
	case <-time.After(5 * time.Second):
		t.Fatal("the first waiter was not granted the freed key")
	}
	if g.err != nil {
		t.Fatal(g.err)
	}
	if cmds := entryAt(t, n, g.res.LeaseRev, "k"); len(cmds) != 1 || cmds[0].Kind != fsm.KindGrant || string(cmds[0].Owner) != "w0" {
		t.Fatalf("the kick's entry is %s, want one [Grant k w0]", kinds(cmds))
	}
	if q := n.locks.LockWaiters(); q != 1 {
		t.Fatalf("%d waiters queued after the first grant, want the second still there", q)
	}
}

// A Release whose guard fails (a stale token) frees nothing, so it hands nothing off: the head
// waiter keeps its place and is the one the real release grants.
func TestHandoffNotOnAFailedRelease(t *testing.T) {
	n := newNode(t)
	holder := mustLock(t, n, "k", "holder", 0)
	first := make(chan string, 2) // the waiters, in the order they were granted
	for i := range 2 {
		go func() {
			res, ok, err := lockWait(t.Context(), n, "k", fmt.Sprint("w", i), 0, 10*time.Second)
			if err != nil || !ok {
				first <- fmt.Sprintf("w%d not granted: %+v, %v", i, res, err)
				return
			}
			first <- fmt.Sprint("w", i)
			propose(context.Background(), n, releaseCmd("k", res.Token))
		}()
		waitQueued(t, n, i+1)
	}
	if r, err := propose(t.Context(), n, releaseCmd("k", holder.Token+100)); err != nil || r.Status == fsm.StatusReleased {
		t.Fatalf("release with a stale token = %+v, %v; want refused", r, err)
	}
	if q := n.locks.LockWaiters(); q != 2 {
		t.Fatalf("%d waiters queued after a failed release, want 2", q)
	}
	if _, err := propose(t.Context(), n, releaseCmd("k", holder.Token)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"w0", "w1"} {
		select {
		case w := <-first:
			if w != want {
				t.Fatalf("%s granted, want %s: the queue's order", w, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not granted", want)
		}
	}
}
