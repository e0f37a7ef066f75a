package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// The first byte of every log entry is its format version. A future layout gets a new version;
// DecodeEntry keeps reading the old ones, because a log written by an older binary must still
// apply. Never reuse a version.
const (
	// commandVersion is an entry of exactly one command, the only layout before entries could
	// hold several: version, then the command's body. Only read, for logs written by then.
	commandVersion = 1
	// multiVersion is an entry of one or more commands, one request's: version, the number of
	// commands as a uvarint, then each command's body in order. Only read, for logs written
	// before databases (its keys are database 0's, without the byte).
	multiVersion = 2
	// keyedVersion is multiVersion's layout with table keys (keys.go). Only read, for logs
	// written before collections.
	keyedVersion = 3
	// entryVersion is keyedVersion's with two fields after each command's body: the Match's Rev
	// and the Value (appendCollection). What EncodeEntry writes.
	entryVersion = 4
	// batchVersion is several requests' entries in one log entry (group commit): version, the
	// number of requests as a uvarint, then each request's entry in entryVersion's layout
	// without its version byte. Each request still applies whole or not at all on its own.
	batchVersion = 5
	// functionsVersion is batchVersion's layout, written by a cluster in FormatFunctions for
	// the entry that switches it there (raftnode's SwitchFormat): its version byte is what
	// makes every node note the switch. An older binary refuses it, as it would refuse the
	// library commands that format carries.
	functionsVersion = 6
)

// minCommandBody is the fewest bytes a command's body takes (kind, flags, match kind and seven
// one-byte uvarints), so a count can be checked against the bytes left before allocating.
const minCommandBody = 10

// ErrCorrupt means bytes that are not a log entry or a snapshot of any version we know.
var ErrCorrupt = errors.New("fsm: corrupt encoding")

// EncodeEntry appends the log entry of cmds, the ordered commands of one request, to dst. Only
// our own encoding goes into the log, never raw RESP.
func EncodeEntry(dst []byte, cmds []Command) []byte {
	dst = slices.Grow(dst, entrySize(cmds)) // one allocation for the entry, not one per doubling
	dst = append(dst, entryVersion)
	return AppendBatchRequest(dst, cmds)
}

// AppendBatchHeader begins the log entry of a batch of n requests, which AppendBatchRequest
// then appends in order: the same bytes as AppendBatch of their EncodeEntry entries, without
// an entry of each to copy.
func AppendBatchHeader(dst []byte, n int) []byte {
	dst = append(dst, batchVersion)
	return binary.AppendUvarint(dst, uint64(n))
}

// BatchHeaderSize is exactly what AppendBatchHeader appends for n requests.
func BatchHeaderSize(n int) int { return 1 + uvarintLen(uint64(n)) }

// AppendBatchRequest appends a request's commands to a batch begun by AppendBatchHeader: what
// EncodeEntry appends after its version byte, BatchRequestSize(cmds) bytes.
func AppendBatchRequest(dst []byte, cmds []Command) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for _, c := range cmds {
		dst = c.appendBody(dst)
		dst = binary.AppendUvarint(dst, c.Match.Rev)
		dst = appendCollection(dst, c.Value, false)
		if c.hasKindsFields() {
			dst = binary.AppendUvarint(dst, c.Permits)
			dst = binary.AppendUvarint(dst, c.Delay)
		}
		if c.hasHeldFields() {
			dst = binary.AppendUvarint(dst, uint64(c.Since))
			dst = appendBytes(dst, c.Origin)
		}
	}
	return dst
}

// hasKindsFields reports whether c carries Permits or Delay: then its flags say so
// (flagKinds) and the two follow its Value, so every other command's encoding is as it was.
func (c Command) hasKindsFields() bool { return c.Permits != 0 || c.Delay != 0 }

// Command flags in a body's second byte.
const (
	flagKeepLease = 1 << 0
	// flagKinds: Permits and Delay follow the Value (entryVersion and later only). Only
	// FormatFunctions writes it.
	flagKinds = 1 << 1
	// flagHeldFields: Since and Origin follow (after Permits and Delay when flagKinds is set too).
	// Only FormatFunctions writes it.
	flagHeldFields = 1 << 2
)

// BatchRequestSize is exactly what AppendBatchRequest appends for cmds.
func BatchRequestSize(cmds []Command) int { return entrySize(cmds) - 1 }

// entrySize is exactly what EncodeEntry appends for cmds: the entry is allocated once, in the
// smallest size class that holds it (a LOCK's entry fits 80 bytes, where counting every uvarint
// at its most asked for 144).
func entrySize(cmds []Command) int {
	n := 1 + uvarintLen(uint64(len(cmds)))
	for _, c := range cmds {
		n += 3 + bytesLen(c.Key) + bytesLen(c.Owner) + uvarintLen(c.LeaseMs) +
			uvarintLen(uint64(c.Match.Token)) + bytesLen(c.Match.Owner) + uvarintLen(uint64(c.Token)) +
			uvarintLen(c.LeaseRev) + uvarintLen(c.Match.Rev) + 1
		if v := c.Value; v != nil {
			n += uvarintLen(uint64(len(v.Elems))) + 8*len(v.Scores)
			for _, e := range v.Elems {
				n += bytesLen(e)
			}
		}
		if c.hasKindsFields() {
			n += uvarintLen(c.Permits) + uvarintLen(c.Delay)
		}
		if c.hasHeldFields() {
			n += uvarintLen(uint64(c.Since)) + bytesLen(c.Origin)
		}
	}
	return n
}

// uvarintLen is the length of x's uvarint encoding.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// bytesLen is the length of b as appendBytes writes it.
func bytesLen(b []byte) int { return uvarintLen(uint64(len(b))) + len(b) }

// appendBody appends the body of c: kind, flags, match kind, then the fields as uvarints and
// length-prefixed bytes. Entries of both versions hold commands in this layout.
func (c Command) appendBody(dst []byte) []byte {
	var flags byte
	if c.KeepLease {
		flags |= flagKeepLease
	}
	if c.hasKindsFields() {
		flags |= flagKinds
	}
	if c.hasHeldFields() {
		flags |= flagHeldFields
	}
	dst = append(dst, byte(c.Kind), flags, byte(c.Match.Kind))
	dst = appendBytes(dst, c.Key)
	dst = appendBytes(dst, c.Owner)
	dst = binary.AppendUvarint(dst, c.LeaseMs)
	dst = binary.AppendUvarint(dst, uint64(c.Match.Token))
	dst = appendBytes(dst, c.Match.Owner)
	dst = binary.AppendUvarint(dst, uint64(c.Token))
	dst = binary.AppendUvarint(dst, c.LeaseRev)
	return dst
}

// AppendBatch appends the log entry that carries the requests' entries, each as EncodeEntry
// wrote it, in order (batchVersion). A group commit of one request needs no batch: its entry
// goes in the log as it is.
func AppendBatch(dst []byte, entries [][]byte) []byte {
	return AppendBatchIn(dst, entries, FormatBatch)
}

// AppendBatchIn is AppendBatch for a cluster in format (FormatBatch or later): a batch of
// FormatFunctions is a functionsVersion entry.
func AppendBatchIn(dst []byte, entries [][]byte, format byte) []byte {
	version := byte(batchVersion)
	if format >= FormatFunctions {
		version = functionsVersion
	}
	dst = append(dst, version)
	dst = binary.AppendUvarint(dst, uint64(len(entries)))
	for _, e := range entries {
		dst = append(dst, e[1:]...)
	}
	return dst
}

// DecodeEntry parses a log entry of one request, of any version but batchVersion, into its
// commands, validating each, and appends them to dst (which may be nil, or a buffer to reuse).
// An entry holds at least one command. The commands' byte slices alias b. On an error it
// returns nil.
func DecodeEntry(dst []Command, b []byte) ([]Command, error) {
	if len(b) > 0 && (b[0] == batchVersion || b[0] == functionsVersion) {
		return nil, fmt.Errorf("%w: a batch of requests where one request's entry was expected", ErrCorrupt)
	}
	dst, _, err := DecodeEntries(dst, nil, b)
	return dst, err
}

// DecodeEntries parses a log entry of any version into the commands of the requests it
// carries, appending them to dst, and appends to ends where each request's commands end in
// dst: one request for every version but batchVersion. The whole entry is checked before
// anything is returned, so a corrupt batch is skipped whole, on every node alike. On an error
// it returns nil, nil.
func DecodeEntries(dst []Command, ends []int, b []byte) ([]Command, []int, error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("%w: empty entry", ErrCorrupt)
	}
	d := decoder{b: b[1:]}
	version, requests := b[0], uint64(1)
	if version == batchVersion || version == functionsVersion {
		requests = d.uvarint()
		if d.err != nil {
			return nil, nil, d.err
		}
		// Each request takes a count and at least one command.
		if requests == 0 || requests > uint64(len(d.b)/(minCommandBody+1)) {
			return nil, nil, fmt.Errorf("%w: batch of %d requests in %d bytes", ErrCorrupt, requests, len(d.b))
		}
		version = entryVersion
	}
	for range requests {
		var err error
		if dst, err = d.entry(dst, version); err != nil {
			return nil, nil, err
		}
		ends = append(ends, len(dst))
	}
	if len(d.b) != 0 {
		return nil, nil, fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.b))
	}
	return dst, ends, nil
}

// entry reads the commands of one request's entry of version, after its version byte.
func (d *decoder) entry(dst []Command, version byte) ([]Command, error) {
	var n uint64
	switch version {
	case commandVersion:
		n = 1
	case multiVersion, keyedVersion, entryVersion:
		n = d.uvarint()
		if d.err != nil {
			return nil, d.err
		}
		if n == 0 || n > uint64(len(d.b)/minCommandBody) {
			return nil, fmt.Errorf("%w: entry of %d commands in %d bytes", ErrCorrupt, n, len(d.b))
		}
	default:
		return nil, fmt.Errorf("%w: entry version %d", ErrCorrupt, version)
	}
	start := len(dst)
	dst = slices.Grow(dst, int(n))[:start+int(n)]
	for i := range dst[start:] {
		c := &dst[start+i]
		if err := d.command(c, version == entryVersion); err != nil {
			return nil, err
		}
		if version < keyedVersion && keyed(c.Kind) {
			c.Key = legacyKey(c.Key)
		}
	}
	return dst, nil
}

// command reads one command's body into c, with the fields entryVersion adds when current, and
// validates it.
func (d *decoder) command(c *Command, current bool) error {
	if len(d.b) < 3 {
		return fmt.Errorf("%w: command of %d bytes", ErrCorrupt, len(d.b))
	}
	flags := d.b[1]
	if flags&^(flagKeepLease|flagKinds|flagHeldFields) != 0 || flags&(flagKinds|flagHeldFields) != 0 && !current {
		return fmt.Errorf("%w: command flags %#x", ErrCorrupt, flags)
	}
	*c = Command{Kind: Kind(d.b[0]), KeepLease: flags&flagKeepLease != 0, Match: Match{Kind: MatchKind(d.b[2])}}
	d.b = d.b[3:]
	c.Key = d.bytes()
	c.Owner = d.bytes()
	c.LeaseMs = d.uvarint()
	c.Match.Token = Token(d.uvarint())
	c.Match.Owner = d.bytes()
	c.Token = Token(d.uvarint())
	c.LeaseRev = d.uvarint()
	if current {
		c.Match.Rev = d.uvarint()
		if d.err == nil {
			c.Value, d.err = readCollection(d, false)
		}
		if flags&flagKinds != 0 {
			c.Permits, c.Delay = d.uvarint(), d.uvarint()
			if d.err == nil && !c.hasKindsFields() {
				return fmt.Errorf("%w: command flags %#x with no permits or delay", ErrCorrupt, flags)
			}
		}
		if flags&flagHeldFields != 0 {
			since := d.uvarint()
			if o := d.bytes(); len(o) > 0 {
				c.Origin = o // nil when empty, as the encoder had it
			}
			if d.err == nil && since > math.MaxInt64 {
				return fmt.Errorf("%w: a grant time of %d", ErrCorrupt, since)
			}
			c.Since = int64(since)
			if d.err == nil && !c.hasHeldFields() {
				return fmt.Errorf("%w: command flags %#x with no grant time or origin", ErrCorrupt, flags)
			}
		}
	}
	if d.err != nil {
		return d.err
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return nil
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

func (d *decoder) failed() error { return d.err }

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("%w: %d bytes past the end", ErrCorrupt, n)
		return nil
	}
	v := d.b[:n:n]
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
