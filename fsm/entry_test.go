package fsm_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
)

func setMember(id, addr string) fsm.Command {
	return fsm.Command{Kind: fsm.KindSetMember, Key: []byte(id), Owner: []byte(addr)}
}

func storeScript(sha, src string) fsm.Command {
	return fsm.Command{Kind: fsm.KindStoreScript, Key: []byte(sha), Owner: []byte(src)}
}

func flushScripts() fsm.Command {
	return fsm.Command{Kind: fsm.KindFlushScripts, Key: []byte("scripts")}
}

// entryBase is the table the entry tests start from, at applied index 10: a held by o1 (token 1,
// a lease), b by o2 (token 2, none), a member and a script.
func entryBase(t *testing.T) *fsm.Machine {
	t.Helper()
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		grant("a", "o1", 1000, matchAbsent),
		grant("b", "o2", 0, matchAbsent),
		setMember("n1", "h:1"),
		storeScript("s1", "return(1)"),
	})
	m.Advance(10)
	return m
}

// TestEntryAllOrNothing applies entries one of whose guards fails, at every position: the
// machine must write exactly the snapshot of one that applied nothing at that index (table,
// members, scripts, token counter; Applied advanced), the failed command keeps its own result
// and every other one is aborted.
func TestEntryAllOrNothing(t *testing.T) {
	tests := []struct {
		name   string
		cmds   []fsm.Command
		failed int
		status fsm.Status
	}{
		{"3rd of 3 fails: release by a stale token", []fsm.Command{
			grant("c", "o3", 100, matchAbsent), release("a", byToken(1)), release("b", byToken(99)),
		}, 2, fsm.StatusNotFound},
		{"1st fails: grant if absent on a held key", []fsm.Command{
			grant("a", "x", 5, matchAbsent), release("b", matchAny),
		}, 0, fsm.StatusGrantRejected},
		{"renew of a key an earlier command released", []fsm.Command{
			release("a", byOwner("o1")), renew("a", byOwner("o1"), 500),
		}, 1, fsm.StatusNotFound},
		{"grant by a token the entry's own grant replaced", []fsm.Command{
			grant("b", "new", 0, byToken(2)), grant("b", "newer", 0, byToken(2)),
		}, 1, fsm.StatusGrantRejected},
		{"every kind undone: members, scripts, flush, renew, expire", []fsm.Command{
			setMember("n1", "h:9"), setMember("n2", "h:2"), {Kind: fsm.KindRemoveMember, Key: []byte("n1")},
			storeScript("s2", "return(2)"), flushScripts(), storeScript("s3", "return(3)"),
			renew("a", byToken(1), 9999), expire("a", 1, 11), grant("z", "oz", 1, matchAny), noop(),
			{Kind: fsm.KindPublish, Key: []byte("ch"), Owner: []byte("msg")}, release("z", byOwner("not-oz")),
		}, 11, fsm.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := entryBase(t)
			want := entryBase(t)
			want.Advance(11)
			res := m.ApplyEntry(nil, 11, tt.cmds)
			for i, r := range res {
				switch {
				case i == tt.failed && (r.Status != tt.status || !r.GuardFailed()):
					t.Errorf("result %d = %+v, want status %s (a failed guard)", i, r, tt.status)
				case i != tt.failed && r.Status != fsm.StatusAborted:
					t.Errorf("result %d = %+v, want aborted", i, r)
				}
			}
			if got, want := snapshotBytes(t, m), snapshotBytes(t, want); !bytes.Equal(got, want) {
				t.Errorf("the aborted entry changed the machine:\n got %x\nwant %x", got, want)
			}
			if diff := cmp.Diff(m.Members(), map[string]string{"n1": "h:1"}); diff != "" {
				t.Errorf("members (-got +want):\n%s", diff)
			}
			if src, ok := m.Script("s1"); !ok || src != "return(1)" || m.Scripts() != 1 {
				t.Errorf("scripts: s1 = %q, %v; %d scripts; want only s1", src, ok, m.Scripts())
			}
			if m.Applied() != 11 || m.LastToken() != 2 {
				t.Errorf("Applied() = %d, LastToken() = %d; want 11, 2", m.Applied(), m.LastToken())
			}
			// It goes on as if the entry had been a no-op.
			if got, want := m.Apply(12, grant("c", "o", 0, matchAbsent)), want.Apply(12, grant("c", "o", 0, matchAbsent)); cmpResults(got, want) != "" {
				t.Errorf("next grant after the aborted entry (-got +want):\n%s", cmpResults(got, want))
			}
		})
	}
}

// TestEntryDependencies: each command sees the table as the earlier commands of its entry left
// it, so an entry may set a key and delete it again, or free a key and take it.
func TestEntryDependencies(t *testing.T) {
	tests := []struct {
		name  string
		cmds  []fsm.Command
		want  []fsm.Status
		table map[string]fsm.Lock
	}{
		{"set then delete", []fsm.Command{grant("c", "o3", 100, matchAbsent), release("c", byOwner("o3"))},
			[]fsm.Status{fsm.StatusGranted, fsm.StatusReleased},
			map[string]fsm.Lock{"a": lock("o1", 1, 1, 1000), "b": lock("o2", 2, 2, 0)}},
		{"delete then set", []fsm.Command{release("a", byToken(1)), grant("a", "o9", 7, matchAbsent)},
			[]fsm.Status{fsm.StatusReleased, fsm.StatusGranted},
			map[string]fsm.Lock{"a": lock("o9", 11, 11, 7), "b": lock("o2", 2, 2, 0)}},
		{"set, replace by owner, renew by owner", []fsm.Command{
			grant("c", "o3", 100, matchAbsent), grant("c", "o4", 0, byOwner("o3")), renew("c", byOwner("o4"), 50),
		}, []fsm.Status{fsm.StatusGranted, fsm.StatusGranted, fsm.StatusRenewed},
			map[string]fsm.Lock{"a": lock("o1", 1, 1, 1000), "b": lock("o2", 2, 2, 0), "c": lock("o4", 12, 11, 50)}},
		{"expires, stale ones included, never abort", []fsm.Command{
			expire("a", 1, 1), expire("b", 2, 2), expire("a", 1, 1), expire("zz", 5, 5),
		}, []fsm.Status{fsm.StatusExpired, fsm.StatusExpired, fsm.StatusExpired, fsm.StatusExpired},
			map[string]fsm.Lock{"b": lock("o2", 2, 2, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := entryBase(t)
			res := m.ApplyEntry(nil, 11, tt.cmds)
			var got []fsm.Status
			for _, r := range res {
				got = append(got, r.Status)
			}
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("statuses (-got +want):\n%s", diff)
			}
			if diff := diffTables(table(m), tt.table); diff != "" {
				t.Errorf("table (-got +want):\n%s", diff)
			}
		})
	}
}

// TestEntryTokens: the counter hands out one token per new holder, two in one entry included,
// never below the entry's index, strictly increasing across entries, snapshots and restores.
func TestEntryTokens(t *testing.T) {
	m := fsm.New()
	var last fsm.Token
	check := func(r fsm.Result, want fsm.Token) {
		t.Helper()
		if r.Status != fsm.StatusGranted || r.Token != want || r.Token <= last {
			t.Fatalf("grant = %+v, want token %d above %d", r, want, last)
		}
		last = r.Token
	}
	res := m.ApplyEntry(nil, 5, []fsm.Command{grant("a", "o", 0, matchAbsent), grant("b", "o", 0, matchAbsent), grant("c", "o", 0, matchAbsent)})
	check(res[0], 5)
	check(res[1], 6)
	check(res[2], 7)
	for _, r := range res {
		if r.LeaseRev != 5 {
			t.Errorf("lease rev %d, want the entry's index 5", r.LeaseRev)
		}
	}
	// The next entries are below the counter: it goes on from 7, not from their index.
	check(m.Apply(6, grant("d", "o", 0, matchAbsent)), 8)
	check(m.Apply(7, grant("a", "p", 0, matchAny)), 9) // a new holder
	if r := m.Apply(8, grant("a", "p", 0, matchAny)); r.Token != 9 {
		t.Errorf("same holder again: token %d, want 9 kept", r.Token)
	}
	// An aborted entry hands out nothing.
	m.ApplyEntry(nil, 9, []fsm.Command{grant("e", "o", 0, matchAbsent), grant("a", "x", 0, matchAbsent)})
	if m.LastToken() != 9 {
		t.Errorf("LastToken() = %d after an aborted entry, want 9", m.LastToken())
	}
	// Through a snapshot and a restore the counter survives.
	r := restore(t, snapshotBytes(t, m))
	if r.LastToken() != 9 {
		t.Fatalf("restored LastToken() = %d, want 9", r.LastToken())
	}
	check(r.Apply(10, grant("f", "o", 0, matchAbsent)), 10)
	// Far later in the log, the index is the floor.
	check(r.ApplyEntry(nil, 100, []fsm.Command{grant("g", "o", 0, matchAbsent), grant("h", "o", 0, matchAbsent)})[0], 100)
	if r.LastToken() != 101 {
		t.Errorf("LastToken() = %d, want 101", r.LastToken())
	}
}

// TestGuardFailed names the results that are failed guards, and the outcomes that are not.
func TestGuardFailed(t *testing.T) {
	for s := fsm.Status(1); s <= fsm.StatusAborted; s++ {
		want := s == fsm.StatusGrantRejected || s == fsm.StatusNotFound
		if got := (fsm.Result{Status: s}).GuardFailed(); got != want {
			t.Errorf("Result{%s}.GuardFailed() = %v, want %v", s, got, want)
		}
	}
	if (fsm.Result{Status: fsm.StatusExpired, Existed: false}).GuardFailed() {
		t.Errorf("an Expire of a renewed lease is an outcome, not a failed guard")
	}
}
