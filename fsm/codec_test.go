package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
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

func TestCodecRoundTrip(t *testing.T) {
	for i, c := range validCommands() {
		t.Run(fmt.Sprintf("%d-%s", i, c.Kind), func(t *testing.T) {
			enc := c.Encode(nil)
			got, err := fsm.Decode(enc)
			if err != nil {
				t.Fatalf("Decode(Encode(%+v)) error: %v", c, err)
			}
			if diff := cmp.Diff(got, c, equateEmpty); diff != "" {
				t.Errorf("Decode(Encode(c)) (-got +want):\n%s", diff)
			}
			if again := got.Encode(nil); !bytes.Equal(again, enc) {
				t.Errorf("re-encoding = %x, want %x", again, enc)
			}
			// Encode appends.
			prefix := []byte("prefix")
			app := c.Encode(prefix[:len(prefix):len(prefix)])
			if !bytes.Equal(app[:len(prefix)], prefix) || !bytes.Equal(app[len(prefix):], enc) {
				t.Errorf("Encode(prefix) = %x, want %x followed by %x", app, prefix, enc)
			}
		})
	}
}

// TestEncodeLayout pins the layout of one command, byte for byte: a log written today must decode
// the same way in every later version.
func TestEncodeLayout(t *testing.T) {
	c := fsm.Command{Kind: fsm.KindGrant, Key: []byte("k"), Owner: []byte("ow"), LeaseMs: 300, KeepLease: true,
		Match: fsm.Match{Kind: fsm.MatchToken, Token: 2, Owner: []byte("m")}, Token: 1, LeaseRev: 128}
	want := []byte{
		1,      // version
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
	if got := c.Encode(nil); !bytes.Equal(got, want) {
		t.Errorf("Encode = %x, want %x", got, want)
	}
}

func TestDecodeRejects(t *testing.T) {
	valid := grant("lock", "owner", 1000, byToken(7)).Encode(nil)
	with := func(i int, b byte) []byte {
		v := bytes.Clone(valid)
		v[i] = b
		return v
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"version only", []byte{1}},
		{"three bytes", []byte{1, 2, 0}},
		{"version 0", with(0, 0)},
		{"version 2", with(0, 2)},
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
	}
	for i, c := range invalidCommands() {
		tests = append(tests, struct {
			name string
			b    []byte
		}{fmt.Sprintf("invalid command %d (%s)", i, c.Kind), c.Encode(nil)})
	}
	for i, c := range validCommands() {
		enc := c.Encode(nil)
		for n := 0; n < len(enc); n++ {
			tests = append(tests, struct {
				name string
				b    []byte
			}{fmt.Sprintf("command %d truncated to %d of %d bytes", i, n, len(enc)), enc[:n:n]})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fsm.Decode(tt.b)
			if err == nil {
				t.Fatalf("Decode(%x) = %+v, nil; want an error", tt.b, got)
			}
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Errorf("Decode(%x) error = %v, want one wrapping ErrCorrupt", tt.b, err)
			}
			if diff := cmp.Diff(got, fsm.Command{}); diff != "" {
				t.Errorf("Decode(%x) returned a command with its error (-got +want):\n%s", tt.b, diff)
			}
		})
	}
}

// FuzzDecode: Decode never panics; whatever it accepts is a valid command whose encoding is
// canonical (decodes to the same command and re-encodes to the same bytes, never longer than the
// input) and which applies without panicking.
func FuzzDecode(f *testing.F) {
	for _, c := range validCommands() {
		f.Add(c.Encode(nil))
	}
	for _, c := range invalidCommands() {
		f.Add(c.Encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 2, 1, 2, 0x80, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		c, err := fsm.Decode(b)
		if !bytes.Equal(b, in) {
			t.Fatalf("Decode modified its input: %x, was %x", b, in)
		}
		if err != nil {
			if !errors.Is(err, fsm.ErrCorrupt) {
				t.Fatalf("Decode(%x) error = %v, want one wrapping ErrCorrupt", b, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Decode(%x) accepted an invalid command %+v: %v", b, c, err)
		}
		enc := c.Encode(nil)
		if len(enc) > len(b) {
			t.Errorf("canonical encoding is %d bytes, longer than the %d bytes decoded", len(enc), len(b))
		}
		c2, err := fsm.Decode(enc)
		if err != nil {
			t.Fatalf("Decode(Encode(%+v)) error: %v", c, err)
		}
		if diff := cmp.Diff(c2, c, equateEmpty); diff != "" {
			t.Fatalf("Decode(Encode(c)) (-got +want):\n%s", diff)
		}
		if enc2 := c2.Encode(nil); !bytes.Equal(enc2, enc) {
			t.Fatalf("encoding is not canonical: %x re-encodes as %x", enc, enc2)
		}

		// Whatever decodes applies: to a free key and to a held one.
		m := fsm.New()
		m.Apply(1, c)
		m.Apply(2, grant(string(c.Key)+"x", "o", 1, matchAny))
		if len(c.Key) > 0 {
			m.Apply(3, grant(string(c.Key), "o", 1, matchAny))
		}
		m.Apply(4, c)
	})
}
