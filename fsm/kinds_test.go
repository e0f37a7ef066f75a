package fsm_test

import (
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// dbk is key's table key in database 0.
func dbk(key string) []byte { return fsm.DBKey(0, []byte(key)) }

func acquire(key, owner string, permits, leaseMs, delay uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindAcquire, Key: dbk(key), Owner: []byte(owner), LeaseMs: leaseMs, Permits: permits, Delay: delay}
}

// apply1 applies one command at index and returns its result.
func apply1(t *testing.T, m *fsm.Machine, index uint64, c fsm.Command) fsm.Result {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("command %+v is invalid: %v", c, err)
	}
	return m.Apply(index, c)
}

// holders lists the tokens of key's holders.
func holders(m *fsm.Machine, key string) []fsm.Token {
	var out []fsm.Token
	m.Holders(dbk(key), func(l fsm.Lock) bool {
		out = append(out, l.Token)
		return true
	})
	return out
}

// A semaphore grants one token per permit, refuses past its permits and to another count, and a
// released or expired permit can be taken again; a plain lock is refused while it has holders.
func TestSemaphorePermits(t *testing.T) {
	m := fsm.New()
	a := apply1(t, m, 10, acquire("s", "a", 2, 1000, 0))
	b := apply1(t, m, 11, acquire("s", "b", 2, 1000, 0))
	if a.Status != fsm.StatusGranted || b.Status != fsm.StatusGranted || a.Token >= b.Token {
		t.Fatalf("two permits: %+v %+v", a, b)
	}
	if r := apply1(t, m, 12, acquire("s", "c", 2, 1000, 0)); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("a third permit of two: %+v", r)
	}
	if r := apply1(t, m, 13, acquire("s", "c", 3, 1000, 0)); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("another permit count while held: %+v", r)
	}
	if r := apply1(t, m, 14, fsm.Command{Kind: fsm.KindGrant, Key: dbk("s"), Owner: []byte("x"), Match: matchFree}); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("a plain lock on a held semaphore: %+v", r)
	}
	if k := m.Kinds(dbk("s")); k.Holders != 2 || k.Permits != 2 {
		t.Fatalf("Kinds = %+v, want 2 holders of 2 permits", k)
	}
	// A permit goes back by its token (SEMRELEASE), the other by its lease.
	if r := apply1(t, m, 15, fsm.Command{Kind: fsm.KindRelease, Key: fsm.HolderKey(dbk("s"), a.Token), Match: byToken(a.Token)}); r.Status != fsm.StatusReleased || r.Ended != a.Token {
		t.Fatalf("release of a permit: %+v", r)
	}
	c := apply1(t, m, 16, acquire("s", "c", 2, 1000, 0))
	if c.Status != fsm.StatusGranted || c.Token <= b.Token {
		t.Fatalf("the permit released, taken again: %+v", c)
	}
	if r := apply1(t, m, 17, fsm.Command{Kind: fsm.KindExpire, Key: fsm.HolderKey(dbk("s"), b.Token), Token: b.Token, LeaseRev: 11}); !r.Existed || r.Ended != b.Token {
		t.Fatalf("expiry of a permit: %+v", r)
	}
	if got := holders(m, "s"); len(got) != 1 || got[0] != c.Token {
		t.Fatalf("holders %v, want [%d]", got, c.Token)
	}
	apply1(t, m, 18, fsm.Command{Kind: fsm.KindRelease, Key: fsm.HolderKey(dbk("s"), c.Token), Match: byToken(c.Token)})
	if k := m.Kinds(dbk("s")); k.Holders != 0 || m.Len() != 0 {
		t.Fatalf("the last holder gone: Kinds %+v, %d entries left", k, m.Len())
	}
	// Free again: any kind may take it.
	if r := apply1(t, m, 19, fsm.Command{Kind: fsm.KindGrant, Key: dbk("s"), Owner: []byte("x"), Match: matchFree}); r.Status != fsm.StatusGranted {
		t.Fatalf("a plain lock on a free key: %+v", r)
	}
	if r := apply1(t, m, 20, acquire("s", "d", 0, 1000, 0)); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("a share of a key held plainly: %+v", r)
	}
}

// Shared holders take any number of shares; each has its own token and lease.
func TestSharedHolders(t *testing.T) {
	m := fsm.New()
	var tokens []fsm.Token
	for i := range 5 {
		r := apply1(t, m, uint64(10+i), acquire("r", "reader", 0, uint64(1000+i), 0))
		if r.Status != fsm.StatusGranted {
			t.Fatalf("share %d: %+v", i, r)
		}
		tokens = append(tokens, r.Token)
	}
	if r := apply1(t, m, 20, acquire("r", "x", 3, 1000, 0)); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("a semaphore on a shared lock: %+v", r)
	}
	// The Redis surface does not see the kinds: the database has no key.
	if m.LenDB(0) != 0 {
		t.Fatalf("database 0 has %d keys", m.LenDB(0))
	}
	if r := apply1(t, m, 21, fsm.Command{Kind: fsm.KindRenew, Key: fsm.HolderKey(dbk("r"), tokens[2]), Match: byToken(tokens[2]), LeaseMs: 9000}); r.Status != fsm.StatusRenewed {
		t.Fatalf("renewal of one share: %+v", r)
	}
	l, _ := m.Get(fsm.HolderKey(dbk("r"), tokens[2]))
	if l.LeaseMs != 9000 || l.LeaseRev != 21 {
		t.Fatalf("renewed share %+v", l)
	}
	if got := holders(m, "r"); len(got) != 5 {
		t.Fatalf("holders %v", got)
	}
}

// A lock with a lock-delay keeps its key refused for the delay after its lease expires, to every
// grant; a release starts no delay; the delay ends by its own committed expiry.
func TestLockDelay(t *testing.T) {
	m := fsm.New()
	g := fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("a"), LeaseMs: 100, Match: matchFree, Delay: 500}
	r := apply1(t, m, 10, g)
	if r.Status != fsm.StatusGranted {
		t.Fatalf("grant: %+v", r)
	}
	ex := apply1(t, m, 11, fsm.Command{Kind: fsm.KindExpire, Key: dbk("k"), Token: r.Token, LeaseRev: 10})
	if !ex.Existed || ex.Ended != r.Token || ex.LeaseRev != 11 || ex.LeaseMs != 500 {
		t.Fatalf("expiry with a delay: %+v", ex)
	}
	if got := string(fsm.LeaseKey(fsm.Command{Kind: fsm.KindExpire, Key: dbk("k")}, ex)); got != string(fsm.DelayKey(dbk("k"))) {
		t.Fatalf("LeaseKey %q, want the delay's", got)
	}
	k := m.Kinds(dbk("k"))
	if !k.Delayed || k.Delay.Token != r.Token || k.Delay.LeaseMs != 500 {
		t.Fatalf("Kinds after the expiry: %+v", k)
	}
	for i, c := range []fsm.Command{
		{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("b"), Match: matchFree},
		acquire("k", "b", 0, 1000, 0),
		acquire("k", "b", 2, 1000, 0),
	} {
		if res := apply1(t, m, uint64(12+i), c); res.Status != fsm.StatusGrantRejected || res.Token != r.Token {
			t.Fatalf("grant %d within the delay: %+v", i, res)
		}
	}
	// A plain SET is not a lock's grant: the Redis surface is as it was.
	if m.LenDB(0) != 0 {
		t.Fatalf("the delay shows in the database: %d keys", m.LenDB(0))
	}
	dl := apply1(t, m, 20, fsm.Command{Kind: fsm.KindExpire, Key: fsm.DelayKey(dbk("k")), Token: r.Token, LeaseRev: 11})
	if !dl.Existed || dl.Ended != 0 || dl.LeaseMs != 0 {
		t.Fatalf("the delay's end: %+v (it ends no lock)", dl)
	}
	if res := apply1(t, m, 21, g); res.Status != fsm.StatusGranted {
		t.Fatalf("grant after the delay: %+v", res)
	}
	// A release starts no delay.
	tok, _ := m.Get(dbk("k"))
	apply1(t, m, 22, fsm.Command{Kind: fsm.KindRelease, Key: dbk("k"), Match: byToken(tok.Token)})
	if k := m.Kinds(dbk("k")); k.Blocks() {
		t.Fatalf("a release left %+v", k)
	}
	// A share with a delay leaves one on its key when it expires.
	s := apply1(t, m, 23, acquire("k", "r", 0, 100, 300))
	apply1(t, m, 24, fsm.Command{Kind: fsm.KindExpire, Key: fsm.HolderKey(dbk("k"), s.Token), Token: s.Token, LeaseRev: 23})
	if k := m.Kinds(dbk("k")); !k.Delayed || k.Holders != 0 || k.Delay.LeaseMs != 300 {
		t.Fatalf("Kinds after a share's expiry: %+v", k)
	}
}

// An entry whose guard fails puts the kinds' entries back as they were: the holder it added
// goes, the marker's count and a lock-delay it ended come back.
func TestKindsRollback(t *testing.T) {
	m := fsm.New()
	a := apply1(t, m, 10, acquire("s", "a", 3, 1000, 0))
	before := table(m)
	res := m.ApplyEntry(nil, 11, []fsm.Command{
		acquire("s", "b", 3, 1000, 0),
		{Kind: fsm.KindRelease, Key: fsm.HolderKey(dbk("s"), a.Token), Match: byToken(a.Token)},
		{Kind: fsm.KindRelease, Key: dbk("nobody"), Match: byToken(99)}, // fails
	})
	if res[2].Status != fsm.StatusNotFound || res[0].Status != fsm.StatusAborted {
		t.Fatalf("results %+v", res)
	}
	if d := diffTables(table(m), before); d != "" {
		t.Fatalf("the aborted entry changed the table:\n%s", d)
	}
	if r := apply1(t, m, 12, acquire("s", "b", 3, 1000, 0)); r.Status != fsm.StatusGranted {
		t.Fatalf("after the rollback: %+v", r)
	}
}

// FLUSHDB takes a database's shares, permits and lock-delays with its keys, and no other's.
func TestFlushKinds(t *testing.T) {
	m := fsm.New()
	apply1(t, m, 10, acquire("s", "a", 2, 1000, 0))
	other := fsm.Command{Kind: fsm.KindAcquire, Key: fsm.DBKey(1, []byte("s")), Owner: []byte("a"), LeaseMs: 1000}
	apply1(t, m, 11, other)
	if r := apply1(t, m, 12, fsm.Command{Kind: fsm.KindFlush, Key: []byte{0}}); !r.Existed {
		t.Fatalf("flush of database 0: %+v", r)
	}
	if k := m.Kinds(dbk("s")); k.Holders != 0 {
		t.Fatalf("database 0 after FLUSHDB: %+v", k)
	}
	if k := m.Kinds(fsm.DBKey(1, []byte("s"))); k.Holders != 1 {
		t.Fatalf("database 1 after database 0's FLUSHDB: %+v", k)
	}
}

// Snapshots carry the kinds' entries and the lock-delays of locks, and the log carries
// Acquire's permits and a Grant's delay.
func TestKindsTravel(t *testing.T) {
	m := fsm.New()
	m.NoteFormat(fsm.FormatFunctions)
	apply1(t, m, 10, acquire("s", "a", 2, 1000, 250))
	apply1(t, m, 11, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("a"), LeaseMs: 100, Match: matchFree, Delay: 700})
	r := restore(t, snapshotBytes(t, m))
	if d := diffTables(table(r), table(m)); d != "" {
		t.Fatalf("restored table differs:\n%s", d)
	}
	if l, _ := r.Get(dbk("k")); l.Delay != 700 {
		t.Fatalf("restored lock-delay %d", l.Delay)
	}
	for _, c := range []fsm.Command{
		acquire("s", "a", 2, 1000, 250),
		acquire("s", "a", 0, 1000, 0),
		{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("a"), LeaseMs: 100, Match: matchFree, Delay: 700},
	} {
		if fsm.NeedsFormat([]fsm.Command{c}) != fsm.FormatFunctions {
			t.Fatalf("%+v needs format %d", c, fsm.NeedsFormat([]fsm.Command{c}))
		}
		got, err := decodeOne(encode(c))
		if err != nil || got.Permits != c.Permits || got.Delay != c.Delay || got.Kind != c.Kind {
			t.Fatalf("decoded %+v, %v; want %+v", got, err, c)
		}
	}
	for _, c := range []fsm.Command{
		acquire("s", "a", fsm.MaxPermits+1, 1000, 0),
		acquire("s", "a", 1, 0, 0),
		acquire("s", "a", 1, 10, fsm.MaxDelayMs+1),
		{Kind: fsm.KindRelease, Key: dbk("k"), Match: matchAny, Delay: 5},
		{Kind: fsm.KindGrant, Key: dbk("k"), Match: matchAny, Permits: 5},
	} {
		if c.Validate() == nil {
			t.Fatalf("%+v is valid", c)
		}
	}
}

// A shorter lock-delay after a longer one (two shares expiring) never ends the longer early: the
// delay in force goes on at least as long, from the later expiry.
func TestLockDelayNotShortened(t *testing.T) {
	m := fsm.New()
	a := apply1(t, m, 10, acquire("k", "a", 2, 100, 60000))
	b := apply1(t, m, 11, acquire("k", "b", 2, 100, 10))
	apply1(t, m, 12, fsm.Command{Kind: fsm.KindExpire, Key: fsm.HolderKey(dbk("k"), a.Token), Token: a.Token, LeaseRev: 10})
	ex := apply1(t, m, 13, fsm.Command{Kind: fsm.KindExpire, Key: fsm.HolderKey(dbk("k"), b.Token), Token: b.Token, LeaseRev: 11})
	if ex.LeaseMs != 60000 || ex.LeaseRev != 13 {
		t.Fatalf("the second expiry's delay: %+v, want 60000 ms from index 13", ex)
	}
	k := m.Kinds(dbk("k"))
	if !k.Delayed || k.Delay.LeaseMs != 60000 || k.Delay.LeaseRev != 13 {
		t.Fatalf("Kinds %+v: the 60 s delay was shortened", k)
	}
	// The first delay's own expiry is stale now: it ends nothing.
	if r := apply1(t, m, 14, fsm.Command{Kind: fsm.KindExpire, Key: fsm.DelayKey(dbk("k")), Token: a.Token, LeaseRev: 12}); r.Existed {
		t.Fatalf("a stale expiry ended the delay: %+v", r)
	}
	if r := apply1(t, m, 15, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("x"), Match: fsm.Match{Kind: fsm.MatchFree}}); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("a lock within the delay: %+v", r)
	}
}

// MatchFree is the guard of a grant that takes a lock: it waits out shares and lock-delays,
// where MatchAbsent (a write creating a key: MSET, INCR) looks at the key alone. A format older
// than FormatFunctions has no kinds, and carries it as MatchAbsent.
func TestMatchFree(t *testing.T) {
	m := fsm.New()
	apply1(t, m, 10, acquire("k", "a", 0, 1000, 0))
	if r := apply1(t, m, 11, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("x"), Match: fsm.Match{Kind: fsm.MatchFree}}); r.Status != fsm.StatusGrantRejected {
		t.Fatalf("MatchFree over a share: %+v", r)
	}
	if r := apply1(t, m, 12, fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("1"), Match: matchAbsent}); r.Status != fsm.StatusGranted {
		t.Fatalf("MatchAbsent (INCR creating the key) beside a share: %+v", r)
	}
	cmds := []fsm.Command{{Kind: fsm.KindGrant, Key: dbk("j"), Match: fsm.Match{Kind: fsm.MatchFree}}}
	if fsm.NeedsFormat(cmds) != fsm.FormatKeyed {
		t.Fatalf("MatchFree needs format %d", fsm.NeedsFormat(cmds))
	}
	fsm.ForFormat(cmds, fsm.FormatFunctions)
	if cmds[0].Match.Kind != fsm.MatchFree {
		t.Fatal("ForFormat changed a FormatFunctions command")
	}
	fsm.ForFormat(cmds, fsm.FormatBatch)
	if cmds[0].Match.Kind != fsm.MatchAbsent {
		t.Fatalf("ForFormat(FormatBatch) left %d", cmds[0].Match.Kind)
	}
}
