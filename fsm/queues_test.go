package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func enqueue(key string, q fsm.WaiterRequest, waitMs uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindEnqueue, Key: dbk(key), Owner: fsm.EncodeWaiter(q), LeaseMs: waitMs}
}

func serve(key string, seq fsm.Token) fsm.Command {
	return fsm.Command{Kind: fsm.KindServe, Key: fsm.WaiterKey(dbk(key), seq), Token: seq}
}

// serveAll is an MLOCK's Serve: all of its Serves or none.
func serveAll(key string, seq fsm.Token) fsm.Command {
	c := serve(key, seq)
	c.KeepLease = true
	return c
}

// queue lists the places of key's waiters in order.
func queue(m *fsm.Machine, key string) []fsm.Token {
	var out []fsm.Token
	m.Waiters(dbk(key), func(w fsm.Waiter) bool {
		out = append(out, w.Seq)
		return true
	})
	return out
}

// Waiters queue in the order their Enqueues applied; a Serve grants only the head, and only when
// its lock can be granted; a waiter whose wait expired leaves the queue; consecutive shares are
// served in one entry.
func TestQueueOrder(t *testing.T) {
	m := fsm.New()
	holder := apply1(t, m, 10, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("h"), LeaseMs: 1000, Match: matchFree})
	w1 := apply1(t, m, 11, enqueue("k", fsm.WaiterRequest{Mode: fsm.WaitShared, TTL: 500, Owner: []byte("r1")}, 5000))
	w2 := apply1(t, m, 12, enqueue("k", fsm.WaiterRequest{Mode: fsm.WaitShared, TTL: 500, Owner: []byte("r2")}, 5000))
	w3 := apply1(t, m, 13, enqueue("k", fsm.WaiterRequest{Mode: fsm.WaitLock, TTL: 500, Owner: []byte("w")}, 5000))
	if w1.Status != fsm.StatusQueued || !(w1.Token < w2.Token && w2.Token < w3.Token) {
		t.Fatalf("places %+v %+v %+v", w1, w2, w3)
	}
	if k := m.Kinds(dbk("k")); !k.Waiting || k.Blocks() {
		t.Fatalf("Kinds %+v: waiting, not blocked by shares", k)
	}
	if r := apply1(t, m, 14, serve("k", w1.Token)); r.Status != fsm.StatusNoop {
		t.Fatalf("a serve while the key is held: %+v", r)
	}
	apply1(t, m, 15, fsm.Command{Kind: fsm.KindRelease, Key: dbk("k"), Match: byToken(holder.Token)})
	if r := apply1(t, m, 16, serve("k", w2.Token)); r.Status != fsm.StatusNoop {
		t.Fatalf("a serve of the second waiter before the head: %+v", r)
	}
	res := m.ApplyEntry(nil, 17, []fsm.Command{serve("k", w1.Token), serve("k", w2.Token)})
	for i, r := range res {
		if r.Status != fsm.StatusGranted || !r.Holder || r.Served == 0 {
			t.Fatalf("serve %d of the two shares: %+v", i, r)
		}
	}
	if got := queue(m, "k"); len(got) != 1 || got[0] != w3.Token {
		t.Fatalf("queue %v, want the writer alone", got)
	}
	if r := apply1(t, m, 18, serve("k", w3.Token)); r.Status != fsm.StatusNoop {
		t.Fatalf("the writer served while shares are held: %+v", r)
	}
	// The writer gives up: its wait's expiry takes it out.
	if r := apply1(t, m, 19, fsm.Command{Kind: fsm.KindExpire, Key: fsm.WaiterKey(dbk("k"), w3.Token), Token: w3.Token, LeaseRev: 13}); !r.Existed || r.Ended != 0 {
		t.Fatalf("the waiter's expiry: %+v", r)
	}
	if k := m.Kinds(dbk("k")); k.Waiting {
		t.Fatal("still waiting after the only waiter left")
	}
}

// An MLOCK waits once, at one place in each of its keys' queues; it is served in one entry, all
// keys or none, and only once it heads every queue.
func TestQueueMLock(t *testing.T) {
	m := fsm.New()
	q := fsm.WaiterRequest{TTL: 500, Owner: []byte("m"), Keys: [][]byte{dbk("a"), dbk("b")}}
	res := m.ApplyEntry(nil, 10, []fsm.Command{enqueue("a", q, 5000), {Kind: fsm.KindEnqueue, Key: dbk("b"), Owner: fsm.EncodeWaiter(q), LeaseMs: 5000, KeepLease: true}})
	if res[0].Token == 0 || res[0].Token != res[1].Token {
		t.Fatalf("an MLOCK's places %+v", res)
	}
	seq := res[0].Token
	apply1(t, m, 11, fsm.Command{Kind: fsm.KindGrant, Key: dbk("b"), Owner: []byte("x"), Match: matchFree})
	got := m.ApplyEntry(nil, 12, []fsm.Command{serveAll("a", seq), serveAll("b", seq)})
	if !fsm.Aborted(got) {
		t.Fatalf("an MLOCK served with one key held: %+v", got)
	}
	if l, held := m.Get(dbk("a")); held {
		t.Fatalf("the aborted serve took a: %+v", l)
	}
	if len(queue(m, "a")) != 1 || len(queue(m, "b")) != 1 {
		t.Fatal("the aborted serve took the waiter out")
	}
	apply1(t, m, 13, fsm.Command{Kind: fsm.KindRelease, Key: dbk("b"), Match: matchAny})
	got = m.ApplyEntry(nil, 14, []fsm.Command{serveAll("a", seq), serveAll("b", seq)})
	if got[0].Status != fsm.StatusGranted || got[1].Status != fsm.StatusGranted || got[0].Token == got[1].Token {
		t.Fatalf("the MLOCK served: %+v", got)
	}
	var keys []string
	m.QueuedKeys(func(k []byte) bool { keys = append(keys, string(k)); return true })
	if len(keys) != 0 {
		t.Fatalf("queued keys %q after the serve", keys)
	}
	// A lone Enqueue that joins nothing is refused.
	if r := apply1(t, m, 15, fsm.Command{Kind: fsm.KindEnqueue, Key: dbk("c"), Owner: fsm.EncodeWaiter(q), LeaseMs: 10, KeepLease: true}); r.Status != fsm.StatusNotFound {
		t.Fatalf("a joining Enqueue alone: %+v", r)
	}
}

// Queues travel in snapshots and in the log; a malformed request is refused.
func TestQueueTravels(t *testing.T) {
	m := fsm.New()
	m.NoteFormat(fsm.FormatFunctions)
	apply1(t, m, 10, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("h"), Match: matchFree})
	c := enqueue("k", fsm.WaiterRequest{Mode: fsm.WaitPermit, Permits: 3, TTL: 500, Delay: 20, Owner: []byte("p")}, 5000)
	apply1(t, m, 11, c)
	r := restore(t, snapshotBytes(t, m))
	if got := queue(r, "k"); len(got) != 1 {
		t.Fatalf("restored queue %v", got)
	}
	if fsm.NeedsFormat([]fsm.Command{c}) != fsm.FormatFunctions {
		t.Fatal("Enqueue needs FormatFunctions")
	}
	got, err := decodeOne(encode(c))
	if err != nil || string(got.Owner) != string(c.Owner) || got.LeaseMs != 5000 {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {9}, fsm.EncodeWaiter(fsm.WaiterRequest{Mode: fsm.WaitPermit, TTL: 5}), fsm.EncodeWaiter(fsm.WaiterRequest{TTL: 0, Owner: []byte("x")})} {
		if (fsm.Command{Kind: fsm.KindEnqueue, Key: dbk("k"), Owner: bad, LeaseMs: 10}).Validate() == nil {
			t.Errorf("an Enqueue of request %x is valid", bad)
		}
	}
}

// A Serve that cannot serve (its waiter withdrew or expired in the same round) is a no-op: the
// release or expiry it rides with still applies.
func TestServeOfAGoneWaiterSparesItsEntry(t *testing.T) {
	m := fsm.New()
	h := apply1(t, m, 10, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("h"), LeaseMs: 100, Match: matchFree})
	w := apply1(t, m, 11, enqueue("k", fsm.WaiterRequest{TTL: 500, Owner: []byte("w")}, 100))
	res := m.ApplyEntry(nil, 12, []fsm.Command{
		{Kind: fsm.KindExpire, Key: dbk("k"), Token: h.Token, LeaseRev: 10},
		{Kind: fsm.KindExpire, Key: fsm.WaiterKey(dbk("k"), w.Token), Token: w.Token, LeaseRev: 11},
		serve("k", w.Token),
	})
	if fsm.Aborted(res) || !res[0].Existed || !res[1].Existed || res[2].Status != fsm.StatusNoop {
		t.Fatalf("results %+v: the expiries must apply, the Serve be a no-op", res)
	}
	if _, held := m.Get(dbk("k")); held {
		t.Fatal("the key is still held")
	}
}
