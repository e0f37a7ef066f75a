package fsm_test

import (
	"bytes"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
)

// TestApplyGuards applies setup at indexes 1..n, then cmd at index n+1, and checks the result and
// the whole table afterwards. Tokens and lease revisions are log indexes, so every want below can
// be read off the setup: the k-th setup command is index k, cmd is index len(setup)+1.
func TestApplyGuards(t *testing.T) {
	// held is the setup most cases start from: "a" granted to o1 at index 1 with a 1000 ms lease.
	held := []fsm.Command{grant("a", "o1", 1000, matchAny)}
	heldTable := map[string]fsm.Lock{"a": lock("o1", 1, 1, 1000)}

	tests := []struct {
		name      string
		setup     []fsm.Command
		cmd       fsm.Command
		want      fsm.Result
		wantTable map[string]fsm.Lock
	}{
		// Grant.
		{
			name:      "grant free key: token is the index",
			cmd:       grant("a", "o1", 1000, matchAny),
			want:      fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 1, LeaseMs: 1000},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 1, 1000)},
		},
		{
			name:      "grant NX free key",
			setup:     []fsm.Command{noop(), noop()},
			cmd:       grant("a", "o1", 1000, matchAbsent),
			want:      fsm.Result{Status: fsm.StatusGranted, Token: 3, LeaseRev: 3, LeaseMs: 1000},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 3, 3, 1000)},
		},
		{
			name:      "grant NX held key by another owner is rejected with the holder's token",
			setup:     held,
			cmd:       grant("a", "o2", 5000, matchAbsent),
			want:      fsm.Result{Status: fsm.StatusGrantRejected, Token: 1},
			wantTable: heldTable,
		},
		{
			name:      "grant NX held key by the same owner is rejected too",
			setup:     held,
			cmd:       grant("a", "o1", 5000, matchAbsent),
			want:      fsm.Result{Status: fsm.StatusGrantRejected, Token: 1},
			wantTable: heldTable,
		},
		{
			name:  "plain grant by another owner replaces the holder with a new token",
			setup: held,
			cmd:   grant("a", "o2", 500, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 2, LeaseRev: 2, LeaseMs: 500,
				Existed: true, PrevOwner: []byte("o1"), Ended: 1},
			wantTable: map[string]fsm.Lock{"a": lock("o2", 2, 2, 500)},
		},
		{
			name:  "plain grant by the same owner keeps the token and renews the lease",
			setup: []fsm.Command{grant("a", "o1", 1000, matchAny), noop()},
			cmd:   grant("a", "o1", 2000, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 3, LeaseMs: 2000,
				Existed: true, PrevOwner: []byte("o1")},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 3, 2000)},
		},
		{
			name:  "plain grant by the same owner without a lease drops the lease",
			setup: held,
			cmd:   grant("a", "o1", 0, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 2,
				Existed: true, PrevOwner: []byte("o1")},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 0)},
		},
		{
			name:      "grant with an empty owner",
			cmd:       grant("a", "", 0, matchAbsent),
			want:      fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 1},
			wantTable: map[string]fsm.Lock{"a": lock("", 1, 1, 0)},
		},
		{
			name:  "grant match token, right token, another owner",
			setup: held,
			cmd:   grant("a", "o2", 700, byToken(1)),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 2, LeaseRev: 2, LeaseMs: 700,
				Existed: true, PrevOwner: []byte("o1"), Ended: 1},
			wantTable: map[string]fsm.Lock{"a": lock("o2", 2, 2, 700)},
		},
		{
			name:  "grant match token, right token, same owner keeps the token",
			setup: held,
			cmd:   grant("a", "o1", 700, byToken(1)),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 2, LeaseMs: 700,
				Existed: true, PrevOwner: []byte("o1")},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 700)},
		},
		{
			name:      "grant match token, wrong token",
			setup:     held,
			cmd:       grant("a", "o2", 700, byToken(2)),
			want:      fsm.Result{Status: fsm.StatusGrantRejected, Token: 1},
			wantTable: heldTable,
		},
		{
			name:      "grant match token on a free key is rejected with token 0",
			setup:     []fsm.Command{noop()},
			cmd:       grant("a", "o1", 700, byToken(1)),
			want:      fsm.Result{Status: fsm.StatusGrantRejected},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:  "grant KeepLease on a held key keeps LeaseRev and LeaseMs",
			setup: []fsm.Command{grant("a", "o1", 1000, matchAny), renew("a", matchAny, 3000)},
			cmd:   grantKeep("a", "o2", 99, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 3, LeaseRev: 2, LeaseMs: 3000,
				Existed: true, PrevOwner: []byte("o1"), Ended: 1},
			wantTable: map[string]fsm.Lock{"a": lock("o2", 3, 2, 3000)},
		},
		{
			name:  "grant KeepLease on a held key without a lease stays without one",
			setup: []fsm.Command{grant("a", "o1", 0, matchAny)},
			cmd:   grantKeep("a", "o1", 99, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 1,
				Existed: true, PrevOwner: []byte("o1")},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 1, 0)},
		},
		{
			name:      "grant KeepLease on a free key gives no lease",
			cmd:       grantKeep("a", "o1", 99, matchAny),
			want:      fsm.Result{Status: fsm.StatusGranted, Token: 1, LeaseRev: 1},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 1, 0)},
		},
		{
			name:  "grant on one key leaves the others alone",
			setup: []fsm.Command{grant("a", "o1", 1000, matchAny), grant("b", "o1", 1000, matchAny)},
			cmd:   grant("b", "o2", 1, matchAny),
			want: fsm.Result{Status: fsm.StatusGranted, Token: 3, LeaseRev: 3, LeaseMs: 1,
				Existed: true, PrevOwner: []byte("o1"), Ended: 2},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 1, 1000), "b": lock("o2", 3, 3, 1)},
		},

		// Release.
		{
			name:      "release by token",
			setup:     held,
			cmd:       release("a", byToken(1)),
			want:      fsm.Result{Status: fsm.StatusReleased, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "release by owner",
			setup:     held,
			cmd:       release("a", byOwner("o1")),
			want:      fsm.Result{Status: fsm.StatusReleased, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "release by empty owner",
			setup:     []fsm.Command{grant("a", "", 0, matchAny)},
			cmd:       release("a", byOwner("")),
			want:      fsm.Result{Status: fsm.StatusReleased, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "release any",
			setup:     held,
			cmd:       release("a", matchAny),
			want:      fsm.Result{Status: fsm.StatusReleased, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "release wrong token",
			setup:     held,
			cmd:       release("a", byToken(2)),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: heldTable,
		},
		{
			name:      "release wrong owner",
			setup:     held,
			cmd:       release("a", byOwner("o2")),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: heldTable,
		},
		{
			name:      "release free key",
			cmd:       release("a", matchAny),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "duplicated release is not found",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), release("a", byToken(1))},
			cmd:       release("a", byToken(1)),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: map[string]fsm.Lock{},
		},
		{
			// etcd#22082: a retried UNLOCK must not delete the next holder's lock.
			name: "late release after a re-grant leaves the new holder",
			setup: []fsm.Command{
				grant("a", "o1", 1000, matchAny), release("a", byToken(1)), grant("a", "o2", 1000, matchAbsent),
			},
			cmd:       release("a", byToken(1)),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: map[string]fsm.Lock{"a": lock("o2", 3, 3, 1000)},
		},

		// Renew.
		{
			name:      "renew by token",
			setup:     held,
			cmd:       renew("a", byToken(1), 5000),
			want:      fsm.Result{Status: fsm.StatusRenewed, Token: 1, LeaseRev: 2, LeaseMs: 5000},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 5000)},
		},
		{
			name:      "renew by owner",
			setup:     held,
			cmd:       renew("a", byOwner("o1"), 5000),
			want:      fsm.Result{Status: fsm.StatusRenewed, Token: 1, LeaseRev: 2, LeaseMs: 5000},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 5000)},
		},
		{
			name:      "renew any, shorter lease",
			setup:     held,
			cmd:       renew("a", matchAny, 1),
			want:      fsm.Result{Status: fsm.StatusRenewed, Token: 1, LeaseRev: 2, LeaseMs: 1},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 1)},
		},
		{
			name:      "renew a lock without a lease gives it one",
			setup:     []fsm.Command{grant("a", "o1", 0, matchAny)},
			cmd:       renew("a", byToken(1), math.MaxUint64),
			want:      fsm.Result{Status: fsm.StatusRenewed, Token: 1, LeaseRev: 2, LeaseMs: math.MaxUint64},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, math.MaxUint64)},
		},
		{
			name:      "renew wrong token",
			setup:     held,
			cmd:       renew("a", byToken(7), 5000),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: heldTable,
		},
		{
			name:      "renew wrong owner",
			setup:     held,
			cmd:       renew("a", byOwner("O1"), 5000),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: heldTable,
		},
		{
			name:      "renew free key",
			cmd:       renew("a", matchAny, 5000),
			want:      fsm.Result{Status: fsm.StatusNotFound},
			wantTable: map[string]fsm.Lock{},
		},

		// Expire.
		{
			name:      "expire with the right token and lease rev removes the lock",
			setup:     held,
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired, Existed: true, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "late expire after a re-grant to another owner is a no-op",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), grant("a", "o2", 1000, matchAny)},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{"a": lock("o2", 2, 2, 1000)},
		},
		{
			name: "late expire after release and re-grant is a no-op",
			setup: []fsm.Command{
				grant("a", "o1", 1000, matchAny), release("a", byToken(1)), grant("a", "o1", 1000, matchAbsent),
			},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 3, 3, 1000)},
		},
		{
			name:      "expire after a same-owner re-grant (lease rev changed) is a no-op",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), grant("a", "o1", 1000, matchAny)},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 1000)},
		},
		{
			name:      "expire after renew (lease rev changed) is a no-op",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), renew("a", byToken(1), 1000)},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 2, 1000)},
		},
		{
			name:      "expire with the renewed lease rev removes the lock",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), renew("a", byToken(1), 1000)},
			cmd:       expire("a", 1, 2),
			want:      fsm.Result{Status: fsm.StatusExpired, Existed: true, Token: 1, Ended: 1},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:  "expire after a KeepLease grant to another owner is a no-op (token changed)",
			setup: []fsm.Command{grant("a", "o1", 1000, matchAny), grantKeep("a", "o2", 0, matchAny)},
			cmd:   expire("a", 1, 1),
			want:  fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{
				"a": lock("o2", 2, 1, 1000),
			},
		},
		{
			name:      "expire a lock without a lease is a no-op",
			setup:     []fsm.Command{grant("a", "o1", 0, matchAny)},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{"a": lock("o1", 1, 1, 0)},
		},
		{
			name:      "expire with the wrong token is a no-op",
			setup:     held,
			cmd:       expire("a", 2, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: heldTable,
		},
		{
			name:      "expire with a future lease rev is a no-op",
			setup:     held,
			cmd:       expire("a", 1, 2),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: heldTable,
		},
		{
			name:      "duplicated expire is a no-op",
			setup:     []fsm.Command{grant("a", "o1", 1000, matchAny), expire("a", 1, 1)},
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{},
		},
		{
			name:      "expire free key",
			cmd:       expire("a", 1, 1),
			want:      fsm.Result{Status: fsm.StatusExpired},
			wantTable: map[string]fsm.Lock{},
		},

		// Noop.
		{
			name:      "noop",
			setup:     held,
			cmd:       noop(),
			want:      fsm.Result{Status: fsm.StatusNoop},
			wantTable: heldTable,
		},
		{
			name:      "noop with stray fields",
			setup:     held,
			cmd:       fsm.Command{Kind: fsm.KindNoop, Key: []byte("a"), Match: matchAny, Token: 1, LeaseRev: 1},
			want:      fsm.Result{Status: fsm.StatusNoop},
			wantTable: heldTable,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := fsm.New()
			idx := applyAll(t, m, 1, tt.setup)
			got := m.Apply(idx, tt.cmd)
			if diff := cmpResults(got, tt.want); diff != "" {
				t.Errorf("Apply(%d, %+v) result (-got +want):\n%s", idx, tt.cmd, diff)
			}
			if diff := diffTables(table(m), tt.wantTable); diff != "" {
				t.Errorf("table after Apply (-got +want):\n%s", diff)
			}
			if got := m.Len(); got != len(tt.wantTable) {
				t.Errorf("Len() = %d, want %d", got, len(tt.wantTable))
			}
			if got := m.Applied(); got != idx {
				t.Errorf("Applied() = %d, want %d", got, idx)
			}
			for key, want := range tt.wantTable {
				got, ok := m.Get([]byte(key))
				if !ok {
					t.Errorf("Get(%q) found nothing, want %+v", key, want)
					continue
				}
				if diff := cmp.Diff(got, want, equateEmpty); diff != "" {
					t.Errorf("Get(%q) (-got +want):\n%s", key, diff)
				}
			}
		})
	}
}

// TestApplyInvalid checks that an invalid command changes nothing but Applied and yields Noop.
func TestApplyInvalid(t *testing.T) {
	tests := []struct {
		name string
		cmd  fsm.Command
	}{
		{"grant empty key", grant("", "o1", 1000, matchAny)},
		{"release empty key", release("", matchAny)},
		{"renew empty key", renew("", matchAny, 1000)},
		{"expire empty key", expire("", 1, 1)},
		{"kind 0", fsm.Command{Key: []byte("a"), Match: matchAny}},
		{"kind 6", fsm.Command{Kind: 6, Key: []byte("a"), Match: matchAny}},
		{"set-member address past MaxMemberAddr", fsm.Command{Kind: fsm.KindSetMember, Key: []byte("n1"),
			Owner: bytes.Repeat([]byte("a"), fsm.MaxMemberAddr+1)}},
		{"kind 255", fsm.Command{Kind: 255, Key: []byte("a"), Match: matchAny}},
		{"renew without a lease", renew("a", byToken(1), 0)},
		{"grant match 0", grant("a", "o2", 1000, fsm.Match{})},
		{"grant match 5", grant("a", "o2", 1000, fsm.Match{Kind: 5})},
		{"release match absent", release("a", matchAbsent)},
		{"release match 0", release("a", fsm.Match{})},
		{"renew match absent", renew("a", matchAbsent, 1000)},
		{"renew match 9", renew("a", fsm.Match{Kind: 9}, 1000)},
		{"expire token 0", expire("a", 0, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cmd.Validate(); err == nil {
				t.Errorf("Validate(%+v) = nil, want an error", tt.cmd)
			}
			m := fsm.New()
			applyAll(t, m, 1, []fsm.Command{grant("a", "o1", 1000, matchAny), noop()})
			want := table(m)
			got := m.Apply(10, tt.cmd)
			if diff := cmp.Diff(got, fsm.Result{Status: fsm.StatusNoop}, equateEmpty); diff != "" {
				t.Errorf("Apply result (-got +want):\n%s", diff)
			}
			if diff := diffTables(table(m), want); diff != "" {
				t.Errorf("table changed (-got +want):\n%s", diff)
			}
			if got := m.Applied(); got != 10 {
				t.Errorf("Applied() = %d, want 10", got)
			}
		})
	}
}

func TestValidateAcceptsValidCommands(t *testing.T) {
	for _, c := range validCommands() {
		if err := c.Validate(); err != nil {
			t.Errorf("Validate(%+v) = %v, want nil", c, err)
		}
	}
}

func TestApplied(t *testing.T) {
	m := fsm.New()
	if got := m.Applied(); got != 0 {
		t.Fatalf("new machine: Applied() = %d, want 0", got)
	}
	steps := []struct {
		name    string
		do      func()
		applied uint64
	}{
		{"grant at 1", func() { m.Apply(1, grant("a", "o", 0, matchAny)) }, 1},
		{"rejected grant at 2", func() { m.Apply(2, grant("a", "o", 0, matchAbsent)) }, 2},
		{"noop at 5 (gap)", func() { m.Apply(5, noop()) }, 5},
		{"invalid at 6", func() { m.Apply(6, fsm.Command{}) }, 6},
		{"advance to 9", func() { m.Advance(9) }, 9},
		{"advance backwards to 3 is ignored", func() { m.Advance(3) }, 9},
		{"not-found release at 10", func() { m.Apply(10, release("b", matchAny)) }, 10},
		{"no-op expire at 11", func() { m.Apply(11, expire("b", 1, 1)) }, 11},
	}
	for _, s := range steps {
		s.do()
		if got := m.Applied(); got != s.applied {
			t.Errorf("after %s: Applied() = %d, want %d", s.name, got, s.applied)
		}
	}
}

// TestTokensIncreaseAcrossKeys grants many keys, in an order unrelated to key order and with gaps
// in the log, and checks that each token is its index, so tokens grow across all keys.
func TestTokensIncreaseAcrossKeys(t *testing.T) {
	m := fsm.New()
	keys := []string{"m", "b", "z", "a", "m2", "\x00", "y", "b"}
	var last fsm.Token
	idx := uint64(1)
	for i, k := range keys {
		owner := "owner" + string(rune('0'+i))
		r := m.Apply(idx, grant(k, owner, 1000, matchAny))
		if r.Status != fsm.StatusGranted {
			t.Fatalf("grant %q at %d: status %v, want granted", k, idx, r.Status)
		}
		if r.Token != fsm.Token(idx) {
			t.Errorf("grant %q at %d: token %d, want %d", k, idx, r.Token, idx)
		}
		if r.Token <= last {
			t.Errorf("grant %q at %d: token %d, not above the previous token %d", k, idx, r.Token, last)
		}
		last = r.Token
		idx += uint64(i) + 1 // leave gaps, as raft's own entries do
	}
}

// TestApplyDoesNotAliasCommand checks that the table keeps no reference into the command: Decode
// returns slices that alias the log entry's buffer, which raft may reuse.
func TestApplyDoesNotAliasCommand(t *testing.T) {
	m := fsm.New()
	buf := encode(grant("key", "owner", 1000, matchAny))
	c, err := decodeOne(buf)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	m.Apply(1, c)
	for i := range buf {
		buf[i] = 'X'
	}
	want := map[string]fsm.Lock{"key": lock("owner", 1, 1, 1000)}
	if diff := diffTables(table(m), want); diff != "" {
		t.Errorf("table after the command's buffer was overwritten (-got +want):\n%s", diff)
	}
}

// TestGrantNilOwner: a nil owner is stored as an empty one, which is also what a restored table
// holds, so a lock compares equal (reflect.DeepEqual) before and after a snapshot.
func TestGrantNilOwner(t *testing.T) {
	m := fsm.New()
	m.Apply(1, fsm.Command{Kind: fsm.KindGrant, Key: []byte("a"), Match: matchAny})
	got, ok := m.Get([]byte("a"))
	if !ok || got.Owner == nil || len(got.Owner) != 0 {
		t.Fatalf("Get(a) = %+v, %v; want a lock with an empty, non-nil owner", got, ok)
	}
	r, _ := restore(t, snapshotBytes(t, m)).Get([]byte("a"))
	if diff := cmp.Diff(r, got); diff != "" {
		t.Errorf("restored lock (-got +want):\n%s", diff)
	}
}

func TestScanStopsEarly(t *testing.T) {
	m := fsm.New()
	applyAll(t, m, 1, []fsm.Command{
		grant("c", "o", 0, matchAny), grant("a", "o", 0, matchAny), grant("b", "o", 0, matchAny),
	})
	var got []string
	m.Scan(func(key string, _ fsm.Lock) bool {
		got = append(got, key)
		return len(got) < 2
	})
	if diff := cmp.Diff(got, []string{"a", "b"}); diff != "" {
		t.Errorf("Scan keys (-got +want):\n%s", diff)
	}
	if _, ok := m.Get([]byte("d")); ok {
		t.Errorf("Get(d) found a lock on a free key")
	}
}

func TestStrings(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{fsm.KindNoop.String(), "noop"},
		{fsm.KindGrant.String(), "grant"},
		{fsm.KindRelease.String(), "release"},
		{fsm.KindRenew.String(), "renew"},
		{fsm.KindExpire.String(), "expire"},
		{fsm.Kind(0).String(), "kind(0)"},
		{fsm.Kind(200).String(), "kind(200)"},
		{fsm.StatusNoop.String(), "noop"},
		{fsm.StatusGranted.String(), "granted"},
		{fsm.StatusGrantRejected.String(), "grant-rejected"},
		{fsm.StatusReleased.String(), "released"},
		{fsm.StatusNotFound.String(), "not-found"},
		{fsm.StatusRenewed.String(), "renewed"},
		{fsm.StatusExpired.String(), "expired"},
		{fsm.Status(0).String(), "status(0)"},
		{fsm.Status(99).String(), "status(99)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

// TestEnumValues pins the numbers that are part of the log and result encodings.
func TestEnumValues(t *testing.T) {
	got := []uint8{
		uint8(fsm.KindNoop), uint8(fsm.KindGrant), uint8(fsm.KindRelease), uint8(fsm.KindRenew), uint8(fsm.KindExpire),
		uint8(fsm.MatchAny), uint8(fsm.MatchAbsent), uint8(fsm.MatchToken), uint8(fsm.MatchOwner),
		uint8(fsm.StatusNoop), uint8(fsm.StatusGranted), uint8(fsm.StatusGrantRejected), uint8(fsm.StatusReleased),
		uint8(fsm.StatusNotFound), uint8(fsm.StatusRenewed), uint8(fsm.StatusExpired),
	}
	want := []uint8{1, 2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4, 5, 6, 7}
	if !bytes.Equal(got, want) {
		t.Errorf("enum values = %v, want %v", got, want)
	}
}
