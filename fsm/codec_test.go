package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
)

// validCommands is a table of real commands: every kind and every match kind each kind accepts,
// binary keys and owners, empty owners, and fields at their maximum.
func validCommands() []fsm.Command {
	const maxU = math.MaxUint64
	return []fsm.Command{
		noop(),
		{Kind: fsm.KindNoop, Key: []byte("stray"), Owner: []byte("o"), LeaseMs: 1, KeepLease: true,
			Match: byOwner("x"), Token: 2, LeaseRev: 3},
		grant("lock:a", "owner-1", 30000, matchAny),
		grant("lock:a", "owner-1", 30000, matchAbsent),
		grant("lock:a", "owner-1", 30000, byToken(17)),
		grant("lock:a", "", 0, matchAbsent),
		grantKeep("lock:a", "v", 0, matchAny),
		grantKeep("lock:a", "v", 5, byToken(maxU)),
		grant("\x00", "\x00", 1, matchAny),
		grant("k\r\n*1\r\n$4\r\nPING\r\n", "o\r\n\x00\xff", maxU, matchAbsent),
		grant(string(bytes.Repeat([]byte{0xff}, 300)), string(bytes.Repeat([]byte("ow"), 200)), 1<<32, matchAny),
		release("lock:a", matchAny),
		release("lock:a", byToken(1)),
		release("lock:a", byToken(maxU)),
		release("lock:a", byOwner("owner-1")),
		release("lock:a", byOwner("")),
		release("\x00\r\n", byOwner("\x00\r\n")),
		renew("lock:a", matchAny, 1),
		renew("lock:a", byToken(99), 10000),
		renew("lock:a", byOwner("owner-1"), maxU),
		renew("\r\n", byOwner("\x00"), 128),
		expire("lock:a", 1, 0),
		expire("lock:a", 12345, 12346),
		expire("lock:a", maxU, maxU),
		expire("\x00\x00", 1<<63, 1<<63),
		{Kind: fsm.KindExpire, Key: []byte("k"), Token: 5, LeaseRev: 5, Match: fsm.Match{Kind: 200}},
		{Kind: fsm.KindRelease, Key: []byte("k"), Owner: []byte("unused"), LeaseMs: maxU, KeepLease: true,
			Match: fsm.Match{Kind: fsm.MatchOwner, Token: maxU, Owner: []byte("o")}, Token: maxU, LeaseRev: maxU},
	}
}

// invalidCommands fail Validate, so Decode must reject their encodings.
func invalidCommands() []fsm.Command {
	return []fsm.Command{
		{},
		{Kind: 6, Key: []byte("a"), Match: matchAny},
		{Kind: 255, Key: []byte("a"), Match: matchAny},
		grant("", "o", 1, matchAny),
		grant("a", "o", 1, fsm.Match{}),
		release("", matchAny),
		release("a", matchAbsent),
		renew("a", matchAny, 0),
		renew("a", fsm.Match{Kind: 6}, 1),
		expire("a", 0, 1),
		expire("", 1, 1),
	}
}

// validEntries are entries of several commands: every valid command in one, pairs that depend
// on each other, and a key touched several times.
func validEntries() [][]fsm.Command {
	return [][]fsm.Command{
		validCommands(),
		{grant("k1", "o", 100, matchAbsent), release("k1", byOwner("o"))},
		{release("k1", byToken(3)), release("k2", byToken(4)), release("k3", byToken(5))},
		{grant("k", "o", 1, matchAny), renew("k", byOwner("o"), 5), grant("k", "p", 0, byOwner("o"))},
		{expire("a", 1, 1), expire("b", 2, 2), expire("c", 3, 3)},
		{{Kind: fsm.KindPublish, Key: []byte("ch"), Owner: []byte("released")}, release("k", byToken(3)),
			{Kind: fsm.KindShardPublish, Owner: []byte("empty channel")}},
		{{Kind: fsm.KindStoreScript, Key: []byte("sha"), Owner: []byte("return(1)")}, {Kind: fsm.KindFlushScripts, Key: []byte("scripts")}},
		{{Kind: fsm.KindFlushLibraries}, {Kind: fsm.KindStoreLibrary, Key: []byte("lib"), Owner: []byte("#!lua name=lib\n")},
			{Kind: fsm.KindDeleteLibrary, Key: []byte("old")}, {Kind: fsm.KindNoop, Key: []byte("\xfflibraries")}},
		{write("h", hash("owner", "1", "", ""), matchAbsent), renew("h", byOwner(""), 30000),
			write("z", &fsm.Collection{Type: fsm.TypeZSet, Elems: [][]byte{[]byte("a"), []byte("b")}, Scores: []float64{math.Inf(-1), 3}}, byRev(maxRev)),
			write("s", &fsm.Collection{Type: fsm.TypeSet, Elems: [][]byte{[]byte("\x00")}}, matchAny),
			write("l", &fsm.Collection{Type: fsm.TypeList, Elems: [][]byte{[]byte("x"), []byte("x")}}, byRev(1)),
			write("h", nil, byRev(7))},
	}
}

const maxRev = math.MaxUint64

func TestCodecRoundTrip(t *testing.T) {
	var entries [][]fsm.Command
	for _, c := range validCommands() {
		entries = append(entries, []fsm.Command{c})
	}
	entries = append(entries, validEntries()...)
	for i, cmds := range entries {
		t.Run(fmt.Sprintf("%d-%s-%d", i, cmds[0].Kind, len(cmds)), func(t *testing.T) {
			enc := fsm.EncodeEntry(nil, cmds)
			got, err := fsm.DecodeEntry(nil, enc)
			if err != nil {
				t.Fatalf("DecodeEntry(EncodeEntry(%+v)) error: %v", cmds, err)
			}
			if diff := cmp.Diff(got, cmds, equateEmpty); diff != "" {
				t.Errorf("DecodeEntry(EncodeEntry(cmds)) (-got +want):\n%s", diff)
			}
			// entrySize sizes the one allocation EncodeEntry makes: exactly, never short.
			if n := fsm.EntrySize(cmds); n != len(enc) {
				t.Errorf("entrySize = %d, EncodeEntry wrote %d bytes", n, len(enc))
			}
			if again := fsm.EncodeEntry(nil, got); !bytes.Equal(again, enc) {
				t.Errorf("re-encoding = %x, want %x", again, enc)
			}
			// EncodeEntry appends.
			prefix := []byte("prefix")
			app := fsm.EncodeEntry(prefix[:len(prefix):len(prefix)], cmds)
			if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], enc) {
				t.Errorf("EncodeEntry(prefix) = %x, want %x followed by %x", app, prefix, enc)
			}
		})
	}
}

// TestDecodeV1 decodes every command as an older binary wrote it (format version 1): the same
// command, its key in database 0, which re-encodes as an entry of one command.
func TestDecodeV1(t *testing.T) {
	for i, c := range validCommands() {
		got, err := fsm.DecodeEntry(nil, encodeV1(c))
		if err != nil {
			t.Fatalf("command %d: DecodeEntry(v1 %x) error: %v", i, encodeV1(c), err)
		}
		if diff := cmp.Diff(got, []fsm.Command{legacy(c)}, equateEmpty); diff != "" {
			t.Errorf("command %d: DecodeEntry(v1) (-got +want):\n%s", i, diff)
		}
	}
}

// TestEncodeLayout pins the layouts byte for byte: a log written today must decode the same way
// in every later version. The version 1 bytes are what binaries before multi-command entries
// wrote (Command.Encode then); they must keep decoding.
func TestEncodeLayout(t *testing.T) {
	c := fsm.Command{Kind: fsm.KindGrant, Key: []byte("k"), Owner: []byte("ow"), LeaseMs: 300, KeepLease: true,
		Match: fsm.Match{Kind: fsm.MatchToken, Token: 2, Owner: []byte("m")}, Token: 1, LeaseRev: 128}
	body := []byte{
		2,      // kind grant
		1,      // flags: keep lease
		3,      // match token
		1, 'k', // key
		2, 'o', 'w', // owner
		0xac, 0x02, // lease ms 300
		2,      // match token
		1, 'm', // match owner
		1,          // token
		0x80, 0x01, // lease rev 128
	}
	v1 := append([]byte{1}, body...) // version 1: one command, no count
	if got, err := fsm.DecodeEntry(nil, v1); err != nil || cmp.Diff(got, []fsm.Command{legacy(c)}) != "" {
		t.Errorf("DecodeEntry(v1 %x) = %+v, %v; want [%+v]", v1, got, err, legacy(c))
	}
	rel := release("k", byToken(7))
	relBody := []byte{3, 0, 3, 1, 'k', 0, 0, 7, 0, 0, 0}
	v2 := append(append([]byte{
		2, // version 2: keys without their database
		2, // two commands
	}, body...), relBody...)
	if got, err := fsm.DecodeEntry(nil, v2); err != nil || cmp.Diff(got, []fsm.Command{legacy(c), legacy(rel)}, equateEmpty) != "" {
		t.Errorf("DecodeEntry(v2 %x) = %+v, %v; want database 0's keys", v2, got, err)
	}
	v3 := append(append([]byte{
		3, // version 3: table keys, as given
		2, // two commands
	}, body...), relBody...)
	if got, err := fsm.DecodeEntry(nil, v3); err != nil || cmp.Diff(got, []fsm.Command{c, rel}, equateEmpty) != "" {
		t.Errorf("DecodeEntry(v3 %x) = %+v, %v; want the keys as given", v3, got, err)
	}
	v4 := slices.Concat([]byte{
		4, // version 4: Match.Rev and Value after each body
		2, // two commands
	}, body, []byte{0, 0}, relBody, []byte{0, 0})
	if got := fsm.EncodeEntry(nil, []fsm.Command{c, rel}); !bytes.Equal(got, v4) {
		t.Errorf("EncodeEntry = %x, want %x", got, v4)
	}
	w := fsm.Command{Kind: fsm.KindWrite, Key: []byte("h"), Match: fsm.Match{Kind: fsm.MatchRev, Rev: 9},
		Value: &fsm.Collection{Type: fsm.TypeZSet, Elems: [][]byte{[]byte("m")}, Scores: []float64{1.5}}}
	wv4 := []byte{4, 1,
		13, 0, 6, // kind write, no flags, match rev
		1, 'h', 0, 0, 0, 0, 0, 0, // key, then owner, lease, match token and owner, token, lease rev: empty
		9,                                          // match rev
		3, 1, 1, 'm', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, // a zset of one member "m", score 1.5
	}
	if got := fsm.EncodeEntry(nil, []fsm.Command{w}); !bytes.Equal(got, wv4) {
		t.Errorf("EncodeEntry(write) = %x, want %x", got, wv4)
	}
	if got, err := fsm.DecodeEntry(nil, wv4); err != nil || cmp.Diff(got, []fsm.Command{w}, equateEmpty) != "" {
		t.Errorf("DecodeEntry(%x) = %+v, %v; want [%+v]", wv4, got, err, w)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := encodeV1(grant("lock", "owner", 1000, byToken(7)))
	with := func(i int, b byte) []byte {
		v := bytes.Clone(valid)
		v[i] = b
		return v
	}
	pair := encode(grant("lock", "owner", 1000, byToken(7)), release("lock", byToken(8)))
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"version only", []byte{1}},
		{"three bytes", []byte{1, 2, 0}},
		{"version 0", with(0, 0)},
		{"version 3", with(0, 3)},
		{"version 255", with(0, 255)},
		{"flags 2", with(2, 2)},
		{"flags 3", with(2, 3)},
		{"flags 0x80", with(2, 0x80)},
		{"flags 0xff", with(2, 0xff)},
		{"trailing zero", append(bytes.Clone(valid), 0)},
		{"trailing bytes", append(bytes.Clone(valid), 1, 2, 3)},
		{"twice", append(bytes.Clone(valid), valid...)},
		{"key length past the end", []byte{1, 2, 0, 1, 100, 'a', 'b', 'c'}},
		{"huge key length", append([]byte{1, 2, 0, 1}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"varint overflow", append([]byte{1, 2, 0, 1}, bytes.Repeat([]byte{0xff}, 11)...)},
		{"header only", []byte{1, 1, 0, 0}},
		{"v2 version only", []byte{2}},
		{"v2 no commands", []byte{2, 0}},
		{"v2 bad count", append([]byte{2}, bytes.Repeat([]byte{0xff}, 11)...)},
		{"v2 count past the end", append([]byte{2, 3}, pair[2:]...)},
		{"v2 huge count", append([]byte{2, 0xff, 0xff, 0xff, 0xff, 0x0f}, pair[2:]...)},
		{"v2 count 1 of 2", append([]byte{2, 1}, pair[2:]...)},
		{"v2 trailing bytes", append(bytes.Clone(pair), 0)},
		{"v2 second command invalid", encode(grant("lock", "o", 1, matchAny), release("lock", matchAbsent))},
		{"v2 first command invalid", encode(renew("a", matchAny, 0), grant("lock", "o", 1, matchAny))},
		{"v2 second command bad flags", func() []byte {
			b := bytes.Clone(pair)
			b[len(pair)-len(encode(release("lock", byToken(8))))+2+1] = 4
			return b
		}()},
	}
	for i, c := range invalidCommands() {
		tests = append(tests, struct {
			name string
			b    []byte
		}{fmt.Sprintf("invalid command %d (%s)", i, c.Kind), encodeV1(c)}, struct {
			name string
			b    []byte
		}{fmt.Sprintf("invalid command %d (%s) in v2", i, c.Kind), encode(c)})
	}
	for i, c := range validCommands() {
		enc := encodeV1(c)
		for n := 0; n < len(enc); n++ {
			tests = append(tests, struct {
				name string
				b    []byte
			}{fmt.Sprintf("command %d truncated to %d of %d bytes", i, n, len(enc)), enc[:n:n]})
		}
	}
	for i, cmds := range validEntries() {
		enc := fsm.EncodeEntry(nil, cmds)
		for n := 0; n < len(enc); n++ {
			tests = append(tests, struct {
				name string
				b    []byte
			}{fmt.Sprintf("entry %d truncated to %d of %d bytes", i, n, len(enc)), enc[:n:n]})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fsm.DecodeEntry(nil, tt.b)
			if err == nil {
				t.Fatalf("DecodeEntry(%x) = %+v, nil; want an error", tt.b, got)
			}
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Errorf("DecodeEntry(%x) error = %v, want one wrapping ErrCorrupt", tt.b, err)
			}
			if got != nil {
				t.Errorf("DecodeEntry(%x) returned commands with its error: %+v", tt.b, got)
			}
		})
	}
}

// checkBatch: a batch that decodes holds requests of valid commands, each request non-empty,
// whose canonical encoding decodes to the same requests; one that does not decodes to nothing.
func checkBatch(t *testing.T, b []byte) {
	in := bytes.Clone(b)
	cmds, ends, err := fsm.DecodeEntries(nil, nil, b)
	if !bytes.Equal(b, in) {
		t.Fatalf("DecodeEntries modified its input: %x, was %x", b, in)
	}
	if err != nil {
		if !errors.Is(err, fsm.ErrCorrupt) || cmds != nil || ends != nil {
			t.Fatalf("DecodeEntries(%x) = %d commands, %v, %v; want ErrCorrupt and nothing", b, len(cmds), ends, err)
		}
		return
	}
	var entries [][]byte
	from := 0
	for _, end := range ends {
		if end <= from {
			t.Fatalf("DecodeEntries(%x) accepted a request of no commands (ends %v)", b, ends)
		}
		for _, c := range cmds[from:end] {
			if err := c.Validate(); err != nil {
				t.Fatalf("DecodeEntries(%x) accepted an invalid command %+v: %v", b, c, err)
			}
		}
		entries = append(entries, fsm.EncodeEntry(nil, cmds[from:end]))
		from = end
	}
	batch := fsm.AppendBatch(nil, entries)
	cmds2, ends2, err := fsm.DecodeEntries(nil, nil, batch)
	if err != nil || cmp.Diff(cmds2, cmds, equateEmpty) != "" || !slices.Equal(ends2, ends) {
		t.Fatalf("the batch's canonical encoding decodes to %d commands, ends %v, %v; want %d, %v", len(cmds2), ends2, err, len(cmds), ends)
	}
	// Built request by request, with the sizes said up front, it is the same bytes.
	size := fsm.BatchHeaderSize(len(ends))
	direct := fsm.AppendBatchHeader(nil, len(ends))
	from = 0
	for _, end := range ends {
		size += fsm.BatchRequestSize(cmds[from:end])
		direct = fsm.AppendBatchRequest(direct, cmds[from:end])
		from = end
	}
	if !bytes.Equal(direct, batch) || len(direct) != size {
		t.Fatalf("AppendBatchHeader and AppendBatchRequest made %x (%d bytes said), AppendBatch %x", direct, size, batch)
	}
}

// FuzzDecode: DecodeEntry never panics; whatever it accepts is valid commands whose encoding is
// canonical (decodes to the same commands and re-encodes to the same bytes, never longer than
// the input but for the count a version 1 entry lacks), and applies without panicking and
// atomically: all of it, or nothing (the table exactly as before) with one failed guard and the
// other commands aborted.
func FuzzDecode(f *testing.F) {
	for _, c := range validCommands() {
		f.Add(encodeV1(c))
		f.Add(encode(c))
	}
	for _, c := range invalidCommands() {
		f.Add(encodeV1(c))
	}
	for _, cmds := range validEntries() {
		f.Add(fsm.EncodeEntry(nil, cmds))
	}
	entries := validEntries()
	for i := range entries {
		var batch [][]byte
		for _, cmds := range entries[i:min(i+3, len(entries))] {
			batch = append(batch, fsm.EncodeEntry(nil, cmds))
		}
		f.Add(fsm.AppendBatch(nil, batch))
		f.Add(fsm.AppendBatchIn(nil, batch, fsm.FormatFunctions))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 2, 1, 2, 0x80, 0x00})
	f.Add([]byte{2, 1, 2, 1, 2, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		if fsm.FormatOf(b) == fsm.FormatBatch {
			checkBatch(t, b)
			return
		}
		in := bytes.Clone(b)
		cmds, err := fsm.DecodeEntry(nil, b)
		if !bytes.Equal(b, in) {
			t.Fatalf("DecodeEntry modified its input: %x, was %x", b, in)
		}
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Fatalf("DecodeEntry(%x) error = %v, want one wrapping ErrCorrupt", b, err)
			}
			return
		}
		if len(cmds) == 0 {
			t.Fatalf("DecodeEntry(%x) accepted an entry of no commands", b)
		}
		for _, c := range cmds {
			if err := c.Validate(); err != nil {
				t.Fatalf("DecodeEntry(%x) accepted an invalid command %+v: %v", b, c, err)
			}
		}
		enc := fsm.EncodeEntry(nil, cmds)
		limit := len(b) + int(b[0]&1) // a version 1 entry has no count
		if b[0] < 4 {
			limit += 2 * len(cmds) // an older entry has no Match.Rev nor Value (a byte each at least)
		}
		if b[0] < 3 {
			for _, c := range cmds {
				switch c.Kind {
				case fsm.KindGrant, fsm.KindRelease, fsm.KindRenew, fsm.KindExpire, fsm.KindWrite:
					limit++ // and its keys no database byte
				}
			}
		}
		if len(enc) > limit {
			t.Errorf("canonical encoding is %d bytes, longer than the %d bytes decoded", len(enc), len(b))
		}
		cmds2, err := fsm.DecodeEntry(nil, enc)
		if err != nil {
			t.Fatalf("DecodeEntry(EncodeEntry(%+v)) error: %v", cmds, err)
		}
		if diff := cmp.Diff(cmds2, cmds, equateEmpty); diff != "" {
			t.Fatalf("DecodeEntry(EncodeEntry(cmds)) (-got +want):\n%s", diff)
		}
		if enc2 := fsm.EncodeEntry(nil, cmds2); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not canonical: %x re-encodes as %x", enc, enc2)
		}

		// Whatever decodes applies, atomically: to free keys and to held ones.
		m := fsm.New()
		checkAtomic(t, m, 1, cmds)
		for i, c := range cmds {
			if len(c.Key) > 0 {
				m.Apply(uint64(2+i), grant(string(c.Key), "o", 1, matchAny))
			}
		}
		checkAtomic(t, m, uint64(3+len(cmds)), cmds)
	})
}

// checkAtomic applies cmds as the entry at index and checks it applied whole, or not at all:
// then one result is a failed guard, the others are aborted, and the machine writes the same
// snapshot as one that applied nothing at index.
func checkAtomic(t *testing.T, m *fsm.Machine, index uint64, cmds []fsm.Command) {
	t.Helper()
	before := m.Snapshot()
	res := m.ApplyEntry(nil, index, cmds)
	if len(res) != len(cmds) {
		t.Fatalf("ApplyEntry: %d results for %d commands", len(res), len(cmds))
	}
	failed, aborted := 0, 0
	for _, r := range res {
		switch {
		case r.GuardFailed():
			failed++
		case r.Status == fsm.StatusAborted:
			aborted++
		}
	}
	switch {
	case failed == 0 && aborted == 0:
		return
	case failed != 1 || aborted != len(cmds)-1:
		t.Fatalf("ApplyEntry(%+v) = %+v: %d failed guards, %d aborted; want all applied, or 1 and %d", cmds, res, failed, aborted, len(cmds)-1)
	}
	ref := restore(t, writeSnapshot(t, before))
	ref.Advance(index)
	if got, want := snapshotBytes(t, m), snapshotBytes(t, ref); !bytes.Equal(got, want) {
		t.Fatalf("aborted entry %+v changed the machine:\n got %x\nwant %x", cmds, got, want)
	}
}
