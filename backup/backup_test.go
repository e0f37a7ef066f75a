package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// sample returns a table of a few locks, a cluster ID and a member, and its backup file.
func sample(t testing.TB) (*fsm.Machine, []byte) {
	t.Helper()
	m := fsm.New()
	cmds := []fsm.Command{
		{Kind: fsm.KindSetCluster, Key: []byte("c0ffee")},
		{Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("127.0.0.1:6379")},
		{Kind: fsm.KindGrant, Key: []byte("\x00a"), Owner: []byte("alice"), LeaseMs: 30000, Match: fsm.Match{Kind: fsm.MatchAbsent}},
		{Kind: fsm.KindGrant, Key: []byte("\x00b"), Owner: []byte("bob"), Match: fsm.Match{Kind: fsm.MatchAbsent}},
	}
	for i, c := range cmds {
		m.Apply(uint64(i+1), c)
	}
	data, err := Encode(Header{SourceNode: "n2", ClusterID: "c0ffee", Term: 7, Created: time.Unix(1700000000, 0).UTC()}, m.Snapshot())
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return m, data
}

func TestRoundTrip(t *testing.T) {
	m, data := sample(t)
	h, got, err := Decode(data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	// The body is the table's snapshot encoding: its length and digest are computed apart here.
	var body bytes.Buffer
	if _, err := m.Snapshot().WriteTo(&body); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body.Bytes())
	want := Header{ClusterID: "c0ffee", SourceNode: "n2", AppliedIndex: 4, Term: 7, Created: time.Unix(1700000000, 0).UTC(),
		Keys: 2, LastToken: uint64(m.LastToken()), BodyBytes: int64(body.Len()), BodySHA256: hex.EncodeToString(sum[:])}
	if h != want {
		t.Errorf("header = %+v, want %+v", h, want)
	}
	for _, key := range []string{"\x00a", "\x00b"} {
		g, ok1 := got.Get([]byte(key))
		w, ok2 := m.Get([]byte(key))
		if !ok1 || !ok2 || string(g.Owner) != string(w.Owner) || g.Token != w.Token || g.LeaseMs != w.LeaseMs || g.LeaseRev != w.LeaseRev {
			t.Errorf("%q: got %+v (%v), want %+v", key, g, ok1, w)
		}
	}
	if got.ClusterID() != "c0ffee" || got.LastToken() != m.LastToken() || got.Applied() != 4 {
		t.Errorf("decoded cluster %q, last token %d, applied %d", got.ClusterID(), got.LastToken(), got.Applied())
	}
	if !strings.HasPrefix(string(data), Magic+"\x01") {
		t.Errorf("file begins %q, want the magic and version 1", data[:9])
	}
}

// Every single flipped byte and every truncation is refused with ErrCorrupt.
func TestDamageRefused(t *testing.T) {
	_, data := sample(t)
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x20
		if _, _, err := Decode(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d of %d flipped: err = %v, want ErrCorrupt", i, len(data), err)
		}
	}
	for n := range len(data) {
		if _, _, err := Decode(data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrCorrupt", n, len(data), err)
		}
	}
	if _, _, err := Decode(append(append([]byte(nil), data...), 0)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a byte appended: err = %v, want ErrCorrupt", err)
	}
}

// The errors say what is wrong.
func TestDamageMessages(t *testing.T) {
	_, data := sample(t)
	flip := func(i int) []byte {
		b := append([]byte(nil), data...)
		b[i] ^= 1
		return b
	}
	newer := append([]byte(nil), data...)
	newer[len(Magic)] = Version + 1
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "not a raftlock backup"},
		{"not a backup", []byte("*1\r\n$4\r\nPING\r\n"), "not a raftlock backup"},
		{"newer version", newer, "format version 2"},
		{"truncated", data[:len(data)-10], "checksum does not match"},
		{"flipped body byte", flip(len(data) - 40), "checksum does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	_, data := sample(t)
	path := filepath.Join(t.TempDir(), "b.rlbackup")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, m, err := ReadFile(path); err != nil || m.Len() != 2 {
		t.Fatalf("ReadFile: %v", err)
	}
	if err := os.WriteFile(path, data[:len(data)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(path); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile of a truncated file: %v, want ErrCorrupt naming the file", err)
	}
	if _, _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v", err)
	}
}

// A table whose encoding passes MaxBody is refused, not written.
func TestLimitWriter(t *testing.T) {
	var sink strings.Builder
	w := &limitWriter{w: &sink, left: 4}
	if _, err := w.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("de")); !errors.Is(err, ErrTooLarge) || sink.String() != "abc" {
		t.Errorf("past the limit: %v, wrote %q", err, sink.String())
	}
}

// FuzzDecode: no input makes Decode panic, and whatever it accepts re-encodes to a file it
// accepts again with the same header figures.
func FuzzDecode(f *testing.F) {
	_, data := sample(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add([]byte(Magic + "\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, m, err := Decode(in)
		if err != nil {
			return
		}
		again, err := Encode(h, m.Snapshot())
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		h2, _, err := Decode(again)
		if err != nil || h2.Keys != h.Keys || h2.AppliedIndex != h.AppliedIndex {
			t.Fatalf("re-decode: %+v, %v; want %+v", h2, err, h)
		}
	})
}
