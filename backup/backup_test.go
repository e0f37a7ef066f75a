package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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
	data, err := Encode(Header{SourceNode: "n2", ClusterID: "c0ffee", Part: Part{Term: 7}, Created: time.Unix(1700000000, 0).UTC()}, m.Snapshot())
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
	want := Header{ClusterID: "c0ffee", SourceNode: "n2", Created: time.Unix(1700000000, 0).UTC(), Part: Part{AppliedIndex: 4, Term: 7,
		Keys: 2, LastToken: uint64(m.LastToken()), BodyBytes: int64(body.Len()), BodySHA256: hex.EncodeToString(sum[:])}}
	if !reflect.DeepEqual(h, want) {
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
		{"newer version", newer, "format version 3"},
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
	if _, ms, err := ReadFile(path); err != nil || len(ms) != 1 || ms[0].Len() != 2 {
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

// FuzzDecode: no input makes DecodeGroups panic, and whatever it accepts re-encodes to a file
// it accepts again with the same figures.
func FuzzDecode(f *testing.F) {
	_, data := sample(f)
	_, grouped := sampleGroups(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add(grouped)
	f.Add([]byte(Magic + "\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, ms, err := DecodeGroups(in)
		if err != nil {
			return
		}
		snaps := make([]*fsm.Snapshot, len(ms))
		for g, m := range ms {
			snaps[g] = m.Snapshot()
		}
		again, err := EncodeGroups(h, snaps)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		h2, _, err := DecodeGroups(again)
		if err != nil || !reflect.DeepEqual(h2.Parts(), h.Parts()) {
			t.Fatalf("re-decode: %+v, %v; want %+v", h2, err, h)
		}
	})
}

// sampleGroups returns the tables of three raft groups (group 0 with the cluster ID and a
// member, as cmd/raftlock's) and their backup file.
func sampleGroups(t testing.TB) ([]*fsm.Machine, []byte) {
	t.Helper()
	m0, _ := sample(t)
	var ms []*fsm.Machine
	var snaps []*fsm.Snapshot
	h := Header{SourceNode: "n3", ClusterID: "c0ffee", Created: time.Unix(1700000000, 0).UTC()}
	for g := range 3 {
		m := m0
		if g > 0 {
			m = fsm.New()
			for i := range g * 5 {
				m.Apply(uint64(i+1), fsm.Command{Kind: fsm.KindGrant, Key: fmt.Appendf(nil, "\x00g%d-%d", g, i), Owner: []byte("o"), LeaseMs: 1000, Match: fsm.Match{Kind: fsm.MatchAbsent}})
			}
		}
		ms = append(ms, m)
		snaps = append(snaps, m.Snapshot())
		h.Groups = append(h.Groups, Part{Term: uint64(10 + g)})
	}
	data, err := EncodeGroups(h, snaps)
	if err != nil {
		t.Fatalf("EncodeGroups: %v", err)
	}
	return ms, data
}

// A backup of several groups holds each group's table with its own figures, in group order;
// Decode, which wants one table, refuses it.
func TestGroupsRoundTrip(t *testing.T) {
	ms, data := sampleGroups(t)
	if data[len(Magic)] != Version {
		t.Errorf("version byte %d, want %d", data[len(Magic)], Version)
	}
	h, got, err := DecodeGroups(data)
	if err != nil {
		t.Fatalf("DecodeGroups: %v", err)
	}
	if h.ClusterID != "c0ffee" || h.SourceNode != "n3" || h.Part != (Part{}) || len(h.Groups) != 3 || len(got) != 3 {
		t.Fatalf("header %+v, %d tables", h, len(got))
	}
	for g, m := range ms {
		p := h.Groups[g]
		if p.Term != uint64(10+g) || p.Keys != m.Len() || p.AppliedIndex != m.Applied() || p.LastToken != uint64(m.LastToken()) {
			t.Errorf("group %d: part %+v, table of %d keys applied %d token %d", g, p, m.Len(), m.Applied(), m.LastToken())
		}
		if got[g].Len() != m.Len() || got[g].Applied() != m.Applied() || got[g].LastToken() != m.LastToken() {
			t.Errorf("group %d decoded: %d keys applied %d token %d", g, got[g].Len(), got[g].Applied(), got[g].LastToken())
		}
	}
	if _, ok := got[2].Get([]byte("\x00g2-9")); !ok {
		t.Error("group 2's last key is missing")
	}
	if _, _, err := Decode(data); !errors.Is(err, ErrGroups) {
		t.Errorf("Decode of a file of three groups: %v, want ErrGroups", err)
	}
	path := filepath.Join(t.TempDir(), "g.rlbackup")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ms, err := ReadFile(path); err != nil || len(ms) != 3 {
		t.Errorf("ReadFile: %d tables, %v", len(ms), err)
	}
	if _, err := EncodeGroups(Header{}, []*fsm.Snapshot{ms[0].Snapshot(), ms[1].Snapshot()}); err == nil {
		t.Error("EncodeGroups of two snapshots with a header of no groups succeeded")
	}
}

// Every flipped byte and every truncation of a file of several groups is refused.
func TestGroupsDamageRefused(t *testing.T) {
	_, data := sampleGroups(t)
	for i := range data {
		bad := append([]byte(nil), data...)
		bad[i] ^= 0x20
		if _, _, err := DecodeGroups(bad); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d of %d flipped: err = %v, want ErrCorrupt", i, len(data), err)
		}
	}
	for n := range len(data) {
		if _, _, err := DecodeGroups(data[:n]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrCorrupt", n, len(data), err)
		}
	}
}

// reseal replaces a file's closing SHA-256 with that of its (altered) contents, so that the
// checks behind the whole-file checksum are reached.
func reseal(b []byte) []byte {
	body := b[:len(b)-sha256.Size]
	sum := sha256.Sum256(body)
	return append(append([]byte(nil), body...), sum[:]...)
}

// The structure of a file of several groups is checked behind its checksum too: a file whose
// checksum matches but whose header or bodies do not is refused, never read in part.
func TestGroupsStructureRefused(t *testing.T) {
	_, data := sampleGroups(t)
	end := len(data) - sha256.Size
	hlen := int(binary.BigEndian.Uint32(data[len(Magic)+1:]))
	headAt := len(Magic) + 1 + 4
	var head headerV2
	if err := json.Unmarshal(data[headAt:headAt+hlen], &head); err != nil {
		t.Fatal(err)
	}
	withHeader := func(h headerV2, bodies []byte) []byte {
		j, _ := json.Marshal(h)
		out := append([]byte(Magic), Version)
		out = binary.BigEndian.AppendUint32(out, uint32(len(j)))
		out = append(out, j...)
		out = append(out, bodies...)
		return reseal(append(out, make([]byte, sha256.Size)...))
	}
	bodies := data[headAt+hlen : end]
	oneGroup := head
	oneGroup.Groups = head.Groups[:1]
	twoOfThree := head
	twoOfThree.Groups = head.Groups[:2]
	fourOfThree := head
	fourOfThree.Groups = append(append([]Part(nil), head.Groups...), head.Groups[2])
	wrap := append([]byte(nil), bodies...)
	binary.BigEndian.PutUint64(wrap, ^uint64(0)-3)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"resealed as is", withHeader(head, bodies), ""},
		{"one group in a version-2 file", withHeader(oneGroup, bodies), "version-2 header of 1 raft groups"},
		{"a body more than the header lists", withHeader(twoOfThree, bodies), "after the last body"},
		{"a body fewer than the header lists", withHeader(fourOfThree, bodies), "group 3's body length is cut off"},
		{"a body length that would wrap", withHeader(head, wrap), "group 0's body of"},
		{"a byte after the last body", withHeader(head, append(append([]byte(nil), bodies...), 0)), "after the last body"},
		{"a header length past the file", reseal(append(append([]byte(Magic), Version, 0xff, 0xff, 0xff, 0xff), data[headAt:]...)), "header length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ms, err := DecodeGroups(tc.in)
			if tc.want == "" {
				if err != nil || len(ms) != 3 {
					t.Fatalf("DecodeGroups: %d tables, %v", len(ms), err)
				}
				return
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeGroups: %v, want ErrCorrupt saying %q", err, tc.want)
			}
		})
	}
}
