package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// commandVersion is the first byte of every encoded command. A future layout gets a new version;
// Decode keeps reading the old ones, because a log written by an older binary must still apply.
const commandVersion = 1

// ErrCorrupt means bytes that are not a command or a snapshot of any version we know.
var ErrCorrupt = errors.New("fsm: corrupt encoding")

// Encode appends the binary form of c to dst: version, kind, flags, match kind, then the fields as
// uvarints and length-prefixed bytes. Only our own encoding goes into the log, never raw RESP.
func (c Command) Encode(dst []byte) []byte {
	var flags byte
	if c.KeepLease {
		flags |= 1
	}
	dst = append(dst, commandVersion, byte(c.Kind), flags, byte(c.Match.Kind))
	dst = appendBytes(dst, c.Key)
	dst = appendBytes(dst, c.Owner)
	dst = binary.AppendUvarint(dst, c.LeaseMs)
	dst = binary.AppendUvarint(dst, uint64(c.Match.Token))
	dst = appendBytes(dst, c.Match.Owner)
	dst = binary.AppendUvarint(dst, uint64(c.Token))
	dst = binary.AppendUvarint(dst, c.LeaseRev)
	return dst
}

// Decode parses an encoded command and validates it. The returned byte slices alias b.
func Decode(b []byte) (Command, error) {
	if len(b) < 4 {
		return Command{}, fmt.Errorf("%w: command of %d bytes", ErrCorrupt, len(b))
	}
	if b[0] != commandVersion {
		return Command{}, fmt.Errorf("%w: command version %d", ErrCorrupt, b[0])
	}
	if b[2]&^1 != 0 {
		return Command{}, fmt.Errorf("%w: command flags %#x", ErrCorrupt, b[2])
	}
	c := Command{Kind: Kind(b[1]), KeepLease: b[2]&1 != 0, Match: Match{Kind: MatchKind(b[3])}}
	d := decoder{b: b[4:]}
	c.Key = d.bytes()
	c.Owner = d.bytes()
	c.LeaseMs = d.uvarint()
	c.Match.Token = Token(d.uvarint())
	c.Match.Owner = d.bytes()
	c.Token = Token(d.uvarint())
	c.LeaseRev = d.uvarint()
	if d.err != nil {
		return Command{}, d.err
	}
	if len(d.b) != 0 {
		return Command{}, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	if err := c.Validate(); err != nil {
		return Command{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return c, nil
}

func appendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// decoder reads uvarints and length-prefixed bytes, remembering the first error so callers can
// read a whole record and check once.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: length %d past the end", ErrCorrupt, n)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}
