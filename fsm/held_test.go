package fsm_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// held returns key's grant time and origin as the table keeps them.
func held(t *testing.T, m *fsm.Machine, key []byte) (int64, string) {
	t.Helper()
	l, ok := m.Get(key)
	if !ok {
		t.Fatalf("%q is not in the table", key)
	}
	return l.Since, string(l.Origin)
}

// A lock keeps when and through which node its holder was granted it: a renewal and the same
// holder's grant again keep them, a new holder brings its own; a share, a permit and a waiter
// keep theirs; a served waiter's lock is granted at the Serve's time through the node the waiter
// queued through. The table's entries, the log and a snapshot carry them.
func TestHeldSinceAndOrigin(t *testing.T) {
	m := fsm.New()
	m.NoteFormat(fsm.FormatFunctions)
	lockCmd := func(owner string, since int64, origin string) fsm.Command {
		return fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte(owner), LeaseMs: 1000, Match: matchFree,
			Since: since, Origin: []byte(origin)}
	}
	a := apply1(t, m, 10, lockCmd("a", 1000, "n1"))
	if since, origin := held(t, m, dbk("k")); since != 1000 || origin != "n1" {
		t.Fatalf("granted at %d through %q, want 1000 through n1", since, origin)
	}
	if r := apply1(t, m, 11, renew(string(dbk("k")), byToken(a.Token), 2000)); r.Status != fsm.StatusRenewed {
		t.Fatalf("renew: %+v", r)
	}
	again := lockCmd("a", 3000, "n2")
	again.Match = byOwner("a")
	if r := apply1(t, m, 12, again); r.Token != a.Token {
		t.Fatalf("the same holder's grant again changed the token: %+v", r)
	}
	if since, origin := held(t, m, dbk("k")); since != 1000 || origin != "n1" {
		t.Fatalf("after a renewal and the same holder's grant again: %d through %q, want 1000 through n1", since, origin)
	}
	apply1(t, m, 13, fsm.Command{Kind: fsm.KindRelease, Key: dbk("k"), Match: byToken(a.Token)})
	apply1(t, m, 14, lockCmd("b", 4000, "n3"))
	if since, origin := held(t, m, dbk("k")); since != 4000 || origin != "n3" {
		t.Fatalf("a new holder: %d through %q, want 4000 through n3", since, origin)
	}

	share := acquire("s", "r", 0, 1000, 0)
	share.Since, share.Origin = 5000, []byte("n2")
	sr := apply1(t, m, 15, share)
	if since, origin := held(t, m, fsm.HolderKey(dbk("s"), sr.Token)); since != 5000 || origin != "n2" {
		t.Fatalf("a share: %d through %q, want 5000 through n2", since, origin)
	}

	// A waiter queues through n3 behind b's lock; served at 7000, its lock says so.
	wait := enqueue("k", fsm.WaiterRequest{Mode: fsm.WaitLock, TTL: 500, Owner: []byte("w")}, 5000)
	wait.Since, wait.Origin = 6000, []byte("n3")
	w := apply1(t, m, 16, wait)
	if since, origin := held(t, m, fsm.WaiterKey(dbk("k"), w.Token)); since != 6000 || origin != "n3" {
		t.Fatalf("a waiter: %d through %q, want 6000 through n3", since, origin)
	}
	l, _ := m.Get(dbk("k"))
	apply1(t, m, 17, fsm.Command{Kind: fsm.KindRelease, Key: dbk("k"), Match: byToken(l.Token)})
	sv := serve("k", w.Token)
	sv.Since = 7000
	if r := apply1(t, m, 18, sv); r.Status != fsm.StatusGranted {
		t.Fatalf("serve: %+v", r)
	}
	if since, origin := held(t, m, dbk("k")); since != 7000 || origin != "n3" {
		t.Fatalf("a served waiter: %d through %q, want 7000 through n3", since, origin)
	}

	// A snapshot keeps them (and the restored table is the same, byte for byte).
	b := snapshotBytes(t, m)
	r := restore(t, b)
	if d := diffTables(table(r), table(m)); d != "" {
		t.Fatalf("restored table differs (-got +want):\n%s", d)
	}
	if !bytes.Equal(snapshotBytes(t, r), b) {
		t.Fatal("a restored table's snapshot differs from the one it was restored from")
	}
	if since, origin := held(t, r, dbk("k")); since != 7000 || origin != "n3" {
		t.Fatalf("restored: %d through %q", since, origin)
	}

	// A version 7 snapshot, as builds before grant times wrote it, restores with none.
	var v7 bytes.Buffer
	if _, err := m.Snapshot().WriteVersion(&v7, 7); err != nil {
		t.Fatal(err)
	}
	old := restore(t, v7.Bytes())
	want := table(m)
	for k, l := range want {
		l.Since, l.Origin = 0, nil
		want[k] = l
	}
	if d := diffTables(table(old), want); d != "" {
		t.Fatalf("a version 7 snapshot restored (-got +want):\n%s", d)
	}
}

// Grant times and origins travel in the log only from FormatFunctions on: ForFormat strips them
// for an older cluster, NeedsFormat asks for FormatFunctions, and an entry carries them exactly.
func TestHeldFieldsInTheLog(t *testing.T) {
	c := fsm.Command{Kind: fsm.KindGrant, Key: dbk("k"), Owner: []byte("a"), LeaseMs: 1000, Match: matchFree,
		Since: 1_765_000_000_000, Origin: []byte("node-2")}
	got, err := decodeOne(encode(c))
	if err != nil {
		t.Fatal(err)
	}
	if got.Since != c.Since || string(got.Origin) != "node-2" {
		t.Fatalf("decoded %d %q, want %d %q", got.Since, got.Origin, c.Since, c.Origin)
	}
	serveOnly := serve("k", 5)
	serveOnly.Since = 7
	if got, err := decodeOne(encode(serveOnly)); err != nil || got.Since != 7 || got.Origin != nil {
		t.Fatalf("a Serve's time alone: %+v, %v", got, err)
	}
	if need := fsm.NeedsFormat([]fsm.Command{c}); need != fsm.FormatFunctions {
		t.Fatalf("NeedsFormat = %d, want FormatFunctions", need)
	}
	old := []fsm.Command{c}
	fsm.ForFormat(old, fsm.FormatBatch)
	if old[0].Since != 0 || old[0].Origin != nil || fsm.NeedsFormat(old) >= fsm.FormatFunctions {
		t.Fatalf("ForFormat(FormatBatch) left %+v", old[0])
	}

	for _, bad := range []fsm.Command{
		{Kind: fsm.KindRelease, Key: dbk("k"), Match: byToken(1), Since: 1},
		{Kind: fsm.KindGrant, Key: dbk("k"), Since: -1},
		{Kind: fsm.KindGrant, Key: dbk("k"), Since: 1, Origin: []byte(strings.Repeat("n", fsm.MaxOrigin+1))},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate accepted %+v", bad)
		}
	}
	// The flag set with neither field is a corrupt entry, not a command.
	b := encode(serveOnly)
	i := bytes.LastIndex(b, []byte{7, 0}) // Since 7, an empty Origin: the last two bytes
	if i != len(b)-2 {
		t.Fatalf("layout changed: %x", b)
	}
	b[i] = 0
	if _, err := decodeOne(b); !errors.Is(err, fsm.ErrCorrupt) {
		t.Fatalf("a flag with no fields decoded: %v", err)
	}
}
