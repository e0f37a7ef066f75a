package raftnode

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// dk is key's table key in database 0: the queues' commands name table keys.
func dk(key string) string { return string(fsm.DBKey(0, []byte(key))) }

// waitHub answers the waiters of one node from its Waited hook, as the server does.
type waitHub struct {
	mu    sync.Mutex
	ch    map[fsm.Token]chan fsm.Token
	early map[fsm.Token]fsm.Token
}

var hubs sync.Map // *testNode -> *waitHub

// hubOf is n's hub, registered as its watchers the first time.
func hubOf(n *testNode) *waitHub {
	h, loaded := hubs.LoadOrStore(n, &waitHub{ch: map[fsm.Token]chan fsm.Token{}, early: map[fsm.Token]fsm.Token{}})
	hub := h.(*waitHub)
	if !loaded {
		n.Watch(node.Watchers{Waited: hub.waited})
	}
	return hub
}

func (h *waitHub) waited(seq fsm.Token, _ []byte, token fsm.Token) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c, ok := h.ch[seq]; ok {
		c <- token
		delete(h.ch, seq)
		return
	}
	h.early[seq] = token
}

// await is the token the waiter at place seq was served (0: it left without a grant).
func (h *waitHub) await(seq fsm.Token) <-chan fsm.Token {
	c := make(chan fsm.Token, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.early[seq]; ok {
		delete(h.early, seq)
		c <- t
		return c
	}
	h.ch[seq] = c
	return c
}

// lockWait is LOCK key lease OWNER owner WAIT wait on n: granted at once, or queued and served
// in its turn (its token), or refused when its wait expired.
func lockWait(ctx context.Context, n *testNode, key, owner string, leaseMs uint64, wait time.Duration) (fsm.Result, bool, error) {
	return requestWait(ctx, n, locks.Request{Key: []byte(key), Owner: []byte(owner), TTL: leaseMs, Explicit: true}, wait)
}

// requestWait is lockWait of any request of one key (a share, a permit).
func requestWait(ctx context.Context, n *testNode, q locks.Request, wait time.Duration) (fsm.Result, bool, error) {
	hub := hubOf(n)
	key := string(q.Key)
	var refused error
	res, err := n.Exec(ctx, [][]byte{q.Key}, locks.WaitEval([]locks.Request{q}, uint64(wait.Milliseconds()), &refused), nil)
	switch {
	case err != nil:
		return fsm.Result{}, false, err
	case refused != nil:
		return fsm.Result{}, false, refused
	case len(res) != 1:
		return fsm.Result{}, false, fmt.Errorf("lockWait %s: %d results, want 1", key, len(res))
	case res[0].Status != fsm.StatusQueued:
		return res[0], res[0].Status == fsm.StatusGranted, nil
	}
	select {
	case t := <-hub.await(res[0].Token):
		if t == 0 {
			return fsm.Result{}, false, nil
		}
		held := []byte(key)
		if q.Shared || q.Permits > 0 {
			held = fsm.HolderKey(held, t)
		}
		var l fsm.Lock
		n.ExecLocal(func(v node.View) { l, _, _ = v.Lookup(held) })
		return fsm.Result{Status: fsm.StatusGranted, Token: t, LeaseRev: l.LeaseRev}, true, nil
	case <-ctx.Done():
		return fsm.Result{}, false, ctx.Err()
	case <-time.After(wait + 10*time.Second):
		return fsm.Result{}, false, node.ErrUncertain
	}
}

// waitQueued waits until key's queue on n holds want waiters.
func waitQueued(t *testing.T, n *testNode, key string, want int) {
	t.Helper()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond(fmt.Sprintf("%d queued waiters", want), func() bool {
		return queueLen(n, key) == want
	}))
}

// queueLen is how many wait in key's queue on n.
func queueLen(n *testNode, key string) int {
	c := 0
	n.ExecLocal(func(v node.View) {
		v.Waiters([]byte(key), func(fsm.Waiter, time.Duration) bool { c++; return true })
	})
	return c
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

// Twenty waiters queue on a held key; each release serves the next in its own entry, in the order
// they queued, and no two get one token.
func TestHandoffFIFO(t *testing.T) {
	n := newNode(t)
	k := dk("k")
	holder := mustLock(t, n, k, "holder", 0)
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
			res, ok, err := lockWait(t.Context(), n, k, fmt.Sprint("w", i), 60000, 10*time.Second)
			if err == nil && !ok {
				err = fmt.Errorf("not granted: %+v", res)
			}
			if err == nil {
				_, err = propose(context.Background(), n, releaseCmd(k, res.Token))
			}
			grants <- grant{i, res, err}
		}()
		waitQueued(t, n, k, i+1)
	}
	if r, err := propose(t.Context(), n, releaseCmd(k, holder.Token)); err != nil || r.Status != fsm.StatusReleased {
		t.Fatalf("release = %+v, %v", r, err)
	}
	wg.Wait()
	close(grants)
	var all []grant
	for g := range grants {
		if g.err != nil {
			t.Fatalf("waiter %d: %v", g.i, g.err)
		}
		all = append(all, g)
	}
	slices.SortFunc(all, func(a, b grant) int { return cmp.Compare(a.res.Token, b.res.Token) })
	for x, g := range all {
		if g.i != x {
			t.Fatalf("waiter %d got the %d-th grant: the queue's order is lost", g.i, x)
		}
		if x > 0 && g.res.Token == all[x-1].res.Token {
			t.Errorf("waiters %d and %d got the same token %d", all[x-1].i, g.i, g.res.Token)
		}
		// Served in the entry of the release before it.
		cmds := entryAt(t, n, g.res.LeaseRev, k)
		if len(cmds) != 2 || cmds[0].Kind != fsm.KindRelease || cmds[1].Kind != fsm.KindServe {
			t.Errorf("waiter %d's grant is in entry %s, want [Release k][Serve k's head]", g.i, kinds(cmds))
		}
	}
	if q := queueLen(n, k); q != 0 {
		t.Errorf("%d waiters left queued", q)
	}
}

// The committed expiry of the holder's lease serves the head in its own entry.
func TestHandoffOnExpiry(t *testing.T) {
	n := newNode(t)
	k := dk("k")
	mustLock(t, n, k, "holder", 200)
	got := make(chan error, 1)
	var res fsm.Result
	go func() {
		var ok bool
		var err error
		res, ok, err = lockWait(t.Context(), n, k, "next", 60000, 5*time.Second)
		if err == nil && !ok {
			err = errors.New("not granted")
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter got no answer")
	}
	cmds := entryAt(t, n, res.LeaseRev, k)
	if len(cmds) != 2 || cmds[0].Kind != fsm.KindExpire || cmds[1].Kind != fsm.KindServe {
		t.Errorf("the hand-off entry is %s, want [Expire k][Serve]", kinds(cmds))
	}
}

// Waiters keep their places through a leader change: queued on the leader, which is then cut
// off, they are served by the next leader in the order they queued, and their clients, waiting
// on the surviving nodes, hear it there.
func TestHandoffSurvivesLeaderLoss(t *testing.T) {
	nodes := newCluster(t, 3)
	l := testutil.Leader(t, nodes)
	k := dk("k")
	mustLock(t, l, k, "holder", 1500)
	const waiters = 4
	var seqs []fsm.Token
	for i := range waiters {
		q := locks.Request{Key: []byte(k), Owner: []byte(fmt.Sprint("w", i)), TTL: 60000, Explicit: true}
		var refused error
		res, err := l.Exec(t.Context(), [][]byte{q.Key}, locks.WaitEval([]locks.Request{q}, 20000, &refused), nil)
		if err != nil || refused != nil || len(res) != 1 || res[0].Status != fsm.StatusQueued {
			t.Fatalf("waiter %d: %+v, %v, %v", i, res, err, refused)
		}
		seqs = append(seqs, res[0].Token)
	}
	var rest []*testNode
	for _, n := range nodes {
		if n != l {
			rest = append(rest, n)
		}
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the queue on the followers", func() bool {
		return queueLen(rest[0], k) == waiters && queueLen(rest[1], k) == waiters
	}))
	hub := hubOf(rest[0])
	served := make([]<-chan fsm.Token, waiters)
	for i, s := range seqs {
		served[i] = hub.await(s)
	}
	testutil.Isolate(l, nodes)
	// The new leader expires the holder's lease and serves the waiters one by one as each
	// release comes: released here as soon as served.
	var last fsm.Token
	for i := range waiters {
		var tok fsm.Token
		select {
		case tok = <-served[i]:
		case <-time.After(15 * time.Second):
			t.Fatalf("waiter %d was not served after the leader change", i)
		}
		if tok == 0 || tok <= last {
			t.Fatalf("waiter %d served token %d after %d", i, tok, last)
		}
		last = tok
		nl := testutil.Leader(t, rest)
		if _, err := propose(t.Context(), nl, releaseCmd(k, tok)); err != nil {
			t.Fatalf("release of waiter %d's lock: %v", i, err)
		}
	}
}

// A waiter whose wait passes leaves the queue by its committed expiry, with no grant.
func TestHandoffDeadline(t *testing.T) {
	n := newNode(t)
	k := dk("k")
	mustLock(t, n, k, "holder", 0)
	start := time.Now()
	res, ok, err := lockWait(t.Context(), n, k, "late", 60000, 300*time.Millisecond)
	if err != nil || ok {
		t.Fatalf("lockWait on a held key = %+v, %v, %v; want a refusal", res, ok, err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("gave up after %v, want 300ms", d)
	}
	if q := queueLen(n, k); q != 0 {
		t.Errorf("%d waiters left queued", q)
	}
}

// A Release whose guard fails (a stale token) frees nothing, so it serves nobody: the head keeps
// its place and is the one the real release serves.
func TestHandoffNotOnAFailedRelease(t *testing.T) {
	n := newNode(t)
	k := dk("k")
	holder := mustLock(t, n, k, "holder", 0)
	first := make(chan string, 2) // the waiters, in the order they were granted
	for i := range 2 {
		go func() {
			res, ok, err := lockWait(t.Context(), n, k, fmt.Sprint("w", i), 60000, 10*time.Second)
			if err != nil || !ok {
				first <- fmt.Sprintf("w%d not granted: %+v, %v", i, res, err)
				return
			}
			first <- fmt.Sprint("w", i)
			propose(context.Background(), n, releaseCmd(k, res.Token))
		}()
		waitQueued(t, n, k, i+1)
	}
	if r, err := propose(t.Context(), n, releaseCmd(k, holder.Token+100)); err != nil || r.Status == fsm.StatusReleased {
		t.Fatalf("release with a stale token = %+v, %v; want refused", r, err)
	}
	if q := queueLen(n, k); q != 2 {
		t.Fatalf("%d waiters queued after a failed release, want 2", q)
	}
	if _, err := propose(t.Context(), n, releaseCmd(k, holder.Token)); err != nil {
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

// Consecutive shares at the head of a queue are served together, in one entry, and a writer
// behind them is not overtaken by a share that queued after it: it has the key once the shares
// are gone, and the later share waits for it.
func TestHandoffBatchesShares(t *testing.T) {
	n := newNode(t)
	k := dk("k")
	holder := mustLock(t, n, k, "holder", 0)
	type grant struct {
		name string
		res  fsm.Result
		err  error
	}
	grants := make(chan grant, 5)
	queue := []struct {
		name   string
		shared bool
	}{{"r1", true}, {"r2", true}, {"r3", true}, {"w", false}, {"r4", true}}
	for i, q := range queue {
		go func() {
			req := locks.Request{Key: []byte(k), Owner: []byte(q.name), TTL: 60000, Explicit: true, Shared: q.shared}
			res, ok, err := requestWait(t.Context(), n, req, 20*time.Second)
			if err == nil && !ok {
				err = fmt.Errorf("not granted: %+v", res)
			}
			grants <- grant{q.name, res, err}
		}()
		waitQueued(t, n, k, i+1)
	}
	next := func() grant {
		t.Helper()
		select {
		case g := <-grants:
			if g.err != nil {
				t.Fatalf("%s: %v", g.name, g.err)
			}
			return g
		case <-time.After(5 * time.Second):
			t.Fatal("no grant")
		}
		return grant{}
	}
	if _, err := propose(t.Context(), n, releaseCmd(k, holder.Token)); err != nil {
		t.Fatal(err)
	}
	shares := map[string]fsm.Result{}
	for range 3 {
		g := next()
		shares[g.name] = g.res
	}
	if len(shares) != 3 || shares["r1"].Token == 0 || shares["r2"].Token == 0 || shares["r3"].Token == 0 {
		t.Fatalf("granted %v, want the three shares at the head", shares)
	}
	rev := shares["r1"].LeaseRev
	if shares["r2"].LeaseRev != rev || shares["r3"].LeaseRev != rev {
		t.Fatalf("the head's shares were granted in entries %d %d %d, want one", rev, shares["r2"].LeaseRev, shares["r3"].LeaseRev)
	}
	if !(shares["r1"].Token < shares["r2"].Token && shares["r2"].Token < shares["r3"].Token) {
		t.Errorf("tokens %d %d %d, want them in the queue's order", shares["r1"].Token, shares["r2"].Token, shares["r3"].Token)
	}
	var l raft.Log
	if err := n.stores.Log.GetLog(rev, &l); err != nil {
		t.Fatal(err)
	}
	cmds, _, err := fsm.DecodeEntries(nil, nil, l.Data)
	if err != nil {
		t.Fatal(err)
	}
	serves := 0
	for _, c := range cmds {
		if base, _, ok := fsm.WaiterOf(c.Key); ok && c.Kind == fsm.KindServe && string(base) == k {
			serves++
		}
	}
	if serves != 3 {
		t.Errorf("entry %d serves %d of k's waiters (%s), want the three shares", rev, serves, kinds(cmds))
	}
	if q := queueLen(n, k); q != 2 {
		t.Fatalf("%d left queued, want the writer and the later share", q)
	}
	select {
	case g := <-grants:
		t.Fatalf("%s was granted while the shares hold the key", g.name)
	case <-time.After(100 * time.Millisecond):
	}
	for _, name := range []string{"r1", "r2", "r3"} {
		h := fsm.HolderKey([]byte(k), shares[name].Token)
		if _, err := propose(t.Context(), n, fsm.Command{Kind: fsm.KindRelease, Key: h, Match: locks.ByToken(shares[name].Token)}); err != nil {
			t.Fatal(err)
		}
	}
	w := next()
	if w.name != "w" {
		t.Fatalf("%s was granted before the writer that queued ahead of it", w.name)
	}
	select {
	case g := <-grants:
		t.Fatalf("%s was granted while the writer holds the key", g.name)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := propose(t.Context(), n, releaseCmd(k, w.res.Token)); err != nil {
		t.Fatal(err)
	}
	if r4 := next(); r4.name != "r4" || r4.res.Token <= w.res.Token {
		t.Errorf("last granted %s with %d, want r4 above the writer's %d", r4.name, r4.res.Token, w.res.Token)
	}
}
