package fsm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"maps"
	"math"
	"slices"
	"unsafe"
)

// snapshotMagic and a version open every snapshot stream. Restore reads every version; WriteTo
// writes the newest. Never reuse a version.
const (
	snapshotMagic = "RLSN"
	// snapshotV1 has no token counter: tokens were log indexes then, so Restore starts the
	// counter at the largest of the held tokens and the applied index.
	snapshotV1 = 1
	// snapshotV2 carries the token counter after the applied index.
	snapshotV2 = 2
	// snapshotV3 is snapshotV2's layout with table keys (keys.go).
	snapshotV3 = 3
	// snapshotV4 adds each key's collection (appendCollection, with its Rev) after its owner.
	snapshotV4 = 4
	// snapshotV5 adds the ACL users (name, canonical rules; empty rules: a tombstone) after the
	// scripts.
	snapshotV5 = 5
	// snapshotV6 adds the function libraries (name, source) after the users. A table in
	// FormatFunctions wrote it before lock-delays existed; only read.
	snapshotV6 = 6
	// snapshotV7 adds each key's lock-delay (Lock.Delay, a uvarint) after its lease. Only read:
	// builds before grant times wrote it.
	snapshotV7 = 7
	// snapshotV8 adds each key's grant time (Lock.Since, a uvarint) and origin (Lock.Origin,
	// length-prefixed) after its lock-delay. A table in FormatFunctions writes it, and restores
	// from it in that format.
	snapshotV8 = 8
	// snapshotV9 adds the group's ownership of the hash slots after the libraries
	// (appendSlots), then its groups plan (appendPlan): written only by a table a slot move
	// named (Slots.Moved) or that committed a plan, so every other table's bytes stay version
	// 8's.
	snapshotV9 = 9
)

// maxSnapshotField bounds a key or owner read from a snapshot, so a corrupt length cannot make
// Restore allocate gigabytes. Far above any limit the server accepts.
const maxSnapshotField = 64 << 20

// Snapshot is a point-in-time copy of the table. Taking it is O(1) (the B-tree is copy-on-write)
// and it stays valid and consistent while the Machine keeps applying.
type Snapshot struct {
	table     *lockTable
	members   map[string]string
	scripts   map[string]string
	users     map[string]string
	libraries *Libraries
	applied   uint64
	lastToken Token
	format    byte
	slots     Slots
	plan      *GroupsPlan
}

// Snapshot returns a copy of the table for Persist to serialize concurrently with Apply.
func (m *Machine) Snapshot() *Snapshot {
	return &Snapshot{table: m.table.Copy(), members: maps.Clone(m.members), scripts: maps.Clone(m.scripts),
		users: maps.Clone(m.users), libraries: m.libraries, applied: m.applied, lastToken: m.lastToken, format: m.format,
		slots: m.slots, plan: m.plan}
}

// Len is the number of locks in the snapshot.
func (s *Snapshot) Len() int { return s.table.Len() }

// WriteTo serializes the snapshot (version 8, or 9 for a table a slot move named: its slot
// records follow the libraries): magic, version, applied index, token counter,
// count, then each lock in key order (key, owner, collection, token, lease, lock-delay, grant
// time, origin), then the member addresses in ID order, then the stored scripts in digest
// order, then the ACL users in name order, then the function libraries in name order, then a
// CRC-32C of everything before it. Key order makes the bytes a
// pure function of the table, so two nodes' tables can be compared byte for byte.
//
// A table in FormatBatch or FormatTyped is written as version 5, which v0.3.0 and v0.2.0
// restore (it holds no libraries: only FormatFunctions entries store them).
//
// A table still in FormatKeyed that holds only strings and no ACL users is written as
// version 3, which v0.1.0 restores: a follower running it may be sent it during a rolling
// upgrade. (A cluster in that format refuses what would make collections or
// users: they come from entries only FormatTyped carries.)
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) {
	version := byte(snapshotV8)
	if s.format < FormatFunctions && s.libraries.Len() == 0 {
		version = snapshotV5
	}
	if s.format < FormatTyped && len(s.users) == 0 && !s.hasCollection() {
		version = snapshotV3
	}
	if s.slots.Moved() || s.plan != nil {
		version = snapshotV9 // only FormatFunctions entries move slots or plan groups
	}
	return s.writeVersion(w, version)
}

// writeVersion is WriteTo in the layout of version.
func (s *Snapshot) writeVersion(w io.Writer, version byte) (int64, error) {
	cw := &countingWriter{w: w, crc: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	bw := bufio.NewWriterSize(cw, 64<<10)
	buf := append([]byte(snapshotMagic), version)
	buf = binary.AppendUvarint(buf, s.applied)
	buf = binary.AppendUvarint(buf, uint64(s.lastToken))
	buf = binary.AppendUvarint(buf, uint64(s.table.Len()))
	if _, err := bw.Write(buf); err != nil {
		return cw.n, err
	}
	var werr error
	s.table.Scan(func(key string, l Lock) bool {
		buf = buf[:0]
		buf = binary.AppendUvarint(buf, uint64(len(key)))
		buf = append(buf, key...)
		buf = appendBytes(buf, l.Owner)
		if version >= snapshotV4 {
			buf = appendCollection(buf, l.Value, true)
		}
		buf = binary.AppendUvarint(buf, uint64(l.Token))
		buf = binary.AppendUvarint(buf, l.LeaseRev)
		buf = binary.AppendUvarint(buf, l.LeaseMs)
		if version >= snapshotV7 {
			buf = binary.AppendUvarint(buf, l.Delay)
		}
		if version >= snapshotV8 {
			buf = binary.AppendUvarint(buf, uint64(l.Since))
			buf = appendBytes(buf, l.Origin)
		}
		_, werr = bw.Write(buf)
		return werr == nil
	})
	if werr != nil {
		return cw.n, werr
	}
	buf = appendStringMap(buf[:0], s.members)
	buf = appendStringMap(buf, s.scripts)
	if version >= snapshotV5 {
		buf = appendStringMap(buf, s.users)
	}
	if version >= snapshotV6 {
		buf = appendStringMap(buf, s.libraries.src)
	}
	if version >= snapshotV9 {
		buf = appendPlan(appendSlots(buf, s.slots), s.plan)
	}
	if _, err := bw.Write(buf); err != nil {
		return cw.n, err
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	sum := binary.BigEndian.AppendUint32(nil, cw.crc.Sum32())
	n, err := w.Write(sum)
	cw.n += int64(n)
	return cw.n, err
}

// hasCollection reports whether a key of the snapshot holds a collection (only snapshotV4 and
// later can carry one).
func (s *Snapshot) hasCollection() bool {
	found := false
	s.table.Scan(func(_ string, l Lock) bool {
		found = l.Value != nil
		return !found
	})
	return found
}

type countingWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// Restore reads a snapshot written by Snapshot.WriteTo, of this version or an older one, into a
// new Machine. It checks the checksum and every length, so a torn or corrupt snapshot is an
// error, never a wrong table. Its leases' Deadlines are on a lease clock that reads 0 (see
// RestoreAt).
func Restore(r io.Reader) (*Machine, error) { return RestoreAt(r, 0) }

// RestoreAt is Restore for a node whose lease clock (SetLeaseClock) reads now: every restored
// lease runs in full from now (Lock.Deadline = now + LeaseMs), since the snapshot cannot say how
// much of it had run. The table's leases end late, never early.
func RestoreAt(r io.Reader, now int64) (*Machine, error) {
	rd := newStreamDecoder(r)
	head := rd.read(len(snapshotMagic) + 1)
	if rd.err != nil || string(head[:len(snapshotMagic)]) != snapshotMagic {
		return nil, fmt.Errorf("%w: snapshot header %q", ErrCorrupt, head)
	}
	version := head[len(snapshotMagic)]
	if version < snapshotV1 || version > snapshotV9 {
		return nil, fmt.Errorf("%w: snapshot version %d", ErrCorrupt, version)
	}
	m := New()
	m.leaseClock = now
	switch {
	case version >= snapshotV6:
		m.format = FormatFunctions
	case version >= snapshotV4:
		m.format = FormatTyped
	}
	m.applied = rd.uvarint()
	if version >= snapshotV2 {
		m.lastToken = Token(rd.uvarint())
	}
	count := rd.uvarint()
	var maxToken Token
	var prev string
	var keyBuf, ownerBuf, originBuf []byte
	for i := uint64(0); i < count && rd.err == nil; i++ {
		raw := rd.bytesInto(&keyBuf)
		if version < snapshotV3 && len(raw) > 0 { // an empty one is refused below, as it was
			raw = legacyKey(raw)
		}
		// A view of the scratch bytes, not a copy: Load copies the key into its entry, and
		// prev below is the entry's.
		key := unsafe.String(unsafe.SliceData(raw), len(raw))
		l := Lock{Owner: rd.bytesInto(&ownerBuf)}
		if version >= snapshotV4 && rd.err == nil {
			l.Value, rd.err = readCollection(rd, true)
		}
		l.Token, l.LeaseRev, l.LeaseMs = Token(rd.uvarint()), rd.uvarint(), rd.uvarint()
		if version >= snapshotV7 {
			l.Delay = rd.uvarint()
		}
		if version >= snapshotV8 {
			since := rd.uvarint()
			l.Since = int64(since)
			if o := rd.bytesInto(&originBuf); len(o) > 0 {
				l.Origin = o // Load copies it into the entry
			}
			if rd.err == nil && (since > math.MaxInt64 || len(l.Origin) > MaxOrigin) {
				return nil, fmt.Errorf("%w: snapshot record %d has a grant time of %d and an origin of %d bytes", ErrCorrupt, i, since, len(l.Origin))
			}
		}
		if rd.err != nil {
			break
		}
		if key == "" || i > 0 && key <= prev || l.Token == 0 {
			return nil, fmt.Errorf("%w: snapshot record %d out of order or empty", ErrCorrupt, i)
		}
		maxToken = max(maxToken, l.Token)
		l.Deadline = m.deadline(l.LeaseMs)
		prev = m.table.Load(key, l)
		m.counts.key(prev[0], 1)
		if l.LeaseMs > 0 {
			m.counts.lease(prev[0], 1)
		}
	}
	if rd.err != nil {
		return nil, rd.err
	}
	// The counter is never below a token held (WriteTableTo leaves it at zero).
	m.lastToken = max(m.lastToken, maxToken)
	if version == snapshotV1 {
		// Tokens were log indexes: every token ever handed out is at most the applied index.
		m.lastToken = max(m.lastToken, Token(m.applied))
	}
	if err := rd.stringMap(m.members, "member"); err != nil {
		return nil, err
	}
	if err := rd.stringMap(m.scripts, "script"); err != nil {
		return nil, err
	}
	if version >= snapshotV5 {
		if err := rd.userMap(m.users); err != nil {
			return nil, err
		}
	}
	if version >= snapshotV6 {
		libs := map[string]string{}
		if err := rd.stringMap(libs, "library"); err != nil {
			return nil, err
		}
		m.libraries = librariesOf(libs)
	}
	if version >= snapshotV9 {
		if err := rd.slots(&m.slots); err != nil {
			return nil, err
		}
		plan, err := rd.plan()
		if err != nil {
			return nil, err
		}
		m.plan = plan
	}
	want := rd.sum()
	got, err := rd.trailer()
	if err != nil {
		return nil, err
	}
	if got != want {
		return nil, fmt.Errorf("%w: snapshot checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return m, nil
}

// streamDecoder reads snapshot fields from a stream through a buffer of its own, hashing every
// byte it consumes and keeping the first error. Fields are decoded in place from the buffer,
// and the consumed bytes go into the checksum a buffer's worth at a time (on each refill and at
// the end, sum): a restore reads millions of small fields, and a bufio call and a hash call for
// each cost more than the decoding itself (over half of a million locks' restore).
type streamDecoder struct {
	r       io.Reader
	buf     []byte
	pos     int   // the next unread byte of buf
	end     int   // the end of what was read into buf
	hashed  int   // buf[:hashed] is in crc; buf[hashed:pos] is consumed and not yet
	readErr error // what the reader returned once it returned an error (io.EOF at the end)
	crc     hash.Hash32
	err     error
}

// streamBuffer is the decoder's buffer: a refill and a checksum call per 256 KiB.
const streamBuffer = 256 << 10

func newStreamDecoder(r io.Reader) *streamDecoder {
	return &streamDecoder{r: r, buf: make([]byte, streamBuffer), crc: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
}

// buffered makes at least n (at most len(buf)) unread bytes buffered if the stream still holds
// them, and returns the unread bytes: fewer than n at the stream's end or on a read error
// (readErr).
func (d *streamDecoder) buffered(n int) []byte {
	if d.end-d.pos < n && d.readErr == nil {
		d.crc.Write(d.buf[d.hashed:d.pos])
		d.end = copy(d.buf, d.buf[d.pos:d.end])
		d.pos, d.hashed = 0, 0
		k, err := io.ReadAtLeast(d.r, d.buf[d.end:], n-d.end)
		d.end += k
		switch {
		case err == io.ErrUnexpectedEOF: // the stream ended short of n: the caller sees it
			d.readErr = io.EOF
		case err != nil:
			d.readErr = err
		}
	}
	return d.buf[d.pos:d.end]
}

func (d *streamDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	buf := d.buffered(binary.MaxVarintLen64)
	v, n := binary.Uvarint(buf)
	if n <= 0 {
		d.err = fmt.Errorf("%w: snapshot varint: %v", ErrCorrupt, varintError(buf, n))
		return 0
	}
	d.pos += n
	return v
}

// varintError says why binary.Uvarint rejected buf.
func varintError(buf []byte, n int) error {
	if n < 0 {
		return errors.New("varint overflows a 64-bit integer")
	}
	if len(buf) == 0 {
		return io.EOF
	}
	return io.ErrUnexpectedEOF
}

func (d *streamDecoder) failed() error { return d.err }

func (d *streamDecoder) read(n int) []byte {
	if d.err != nil {
		return nil
	}
	return d.fill(make([]byte, n))
}

// fill reads len(b) bytes into b.
func (d *streamDecoder) fill(b []byte) []byte {
	for got := 0; got < len(b); {
		avail := d.buffered(1)
		if len(avail) == 0 {
			d.err = fmt.Errorf("%w: snapshot truncated: %v", ErrCorrupt, d.shortBy(got))
			return nil
		}
		k := copy(b[got:], avail)
		d.pos += k
		got += k
	}
	return b
}

// shortBy is why a field the stream ended in, got bytes into it, is short: io.ReadFull's
// errors (EOF before its first byte, ErrUnexpectedEOF after), or the reader's own.
func (d *streamDecoder) shortBy(got int) error {
	if d.readErr == io.EOF && got > 0 {
		return io.ErrUnexpectedEOF
	}
	return d.readErr
}

// sum returns the checksum of every byte consumed so far.
func (d *streamDecoder) sum() uint32 {
	d.crc.Write(d.buf[d.hashed:d.pos])
	d.hashed = d.pos
	return d.crc.Sum32()
}

// trailer reads the 4 bytes of the stream's checksum, outside the checksum, and checks that
// nothing follows them.
func (d *streamDecoder) trailer() (uint32, error) {
	sum := d.buffered(4)
	if len(sum) < 4 {
		return 0, fmt.Errorf("%w: snapshot checksum: %v", ErrCorrupt, d.shortBy(len(sum)))
	}
	v := binary.BigEndian.Uint32(sum) // before buffered below reuses the buffer
	d.pos += 4
	d.hashed = d.pos
	if len(d.buffered(1)) > 0 || d.readErr != io.EOF {
		return 0, fmt.Errorf("%w: snapshot has bytes after its checksum", ErrCorrupt)
	}
	return v, nil
}

// fieldLen reads the length of a field that bytes or bytesInto reads.
func (d *streamDecoder) fieldLen() int {
	n := d.uvarint()
	if d.err == nil && n > maxSnapshotField {
		d.err = fmt.Errorf("%w: snapshot field of %d bytes", ErrCorrupt, n)
	}
	return int(n)
}

func (d *streamDecoder) bytes() []byte { return d.read(d.fieldLen()) }

// bytesInto reads a field as bytes does (an empty one is empty, not nil), into *buf, grown as
// needed: the result is valid until the next call with buf. Restore reads a key and its owner
// so, since the table copies both into the key's entry.
func (d *streamDecoder) bytesInto(buf *[]byte) []byte {
	n := d.fieldLen()
	if d.err != nil {
		return nil
	}
	if cap(*buf) < n || *buf == nil {
		*buf = make([]byte, 0, max(n, 64))
	}
	return d.fill((*buf)[:n])
}

// WriteTableTo writes the snapshot encoding with the applied index and the token counter left
// at zero: the bytes depend on the table, member addresses and scripts alone, so nodes can
// compare tables by digest. The counter is left out because two nodes with equal tables may
// hold different counters that hand out the same tokens: one restored from a version 1
// snapshot starts at its applied index, one that replayed the same log at its last grant, and
// both are below the next entry's index, the floor of its tokens (see Token).
func (s *Snapshot) WriteTableTo(w io.Writer) (int64, error) {
	c := *s
	c.applied, c.lastToken = 0, 0
	return c.WriteTo(w)
}

// appendStringMap appends a count and the (key, value) pairs in key order.
func appendStringMap(buf []byte, m map[string]string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(m)))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		buf = appendBytes(buf, []byte(k))
		buf = appendBytes(buf, []byte(m[k]))
	}
	return buf
}

// stringMap reads what appendStringMap wrote into into; keys and values must not be empty.
func (d *streamDecoder) stringMap(into map[string]string, what string) error {
	n := d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		k, v := string(d.bytes()), string(d.bytes())
		if d.err == nil && (k == "" || v == "") {
			return fmt.Errorf("%w: snapshot %s %d empty", ErrCorrupt, what, i)
		}
		into[k] = v
	}
	return d.err
}

// userMap reads the ACL users appendStringMap wrote: names must not be empty, rules may (a
// deleted user's tombstone).
func (d *streamDecoder) userMap(into map[string]string) error {
	n := d.uvarint()
	for i := uint64(0); i < n && d.err == nil; i++ {
		k, v := string(d.bytes()), string(d.bytes())
		if d.err == nil && k == "" {
			return fmt.Errorf("%w: snapshot user %d without a name", ErrCorrupt, i)
		}
		into[k] = v
	}
	return d.err
}

// Applied is the index of the last entry the snapshot's table applied.
func (s *Snapshot) Applied() uint64 { return s.applied }

// LastToken is the snapshot's token counter: the largest token handed out before it.
func (s *Snapshot) LastToken() Token { return s.lastToken }

// ClusterID is the cluster ID in the snapshot's member table, empty when it has none.
func (s *Snapshot) ClusterID() string { return s.members[clusterIDKey] }

// WithLeases returns a copy of the snapshot in which each lock that has a lease holds
// lease(key, lock) as its LeaseMs instead: a backup records the lease each lock has left
// rather than the one it was granted. lease must return more than zero (zero means no lease);
// it is called in key order. The snapshot itself does not change.
func (s *Snapshot) WithLeases(lease func(key string, l Lock) uint64) *Snapshot {
	c := *s
	c.table = s.table.Copy()
	s.table.Scan(func(key string, l Lock) bool {
		if l.LeaseMs > 0 {
			l.LeaseMs = max(lease(key, l), 1)
			c.table.Set(key, l)
		}
		return true
	})
	return &c
}

// WithoutMembers returns a copy of the snapshot with an empty member table: no member client
// addresses and no cluster ID, what a new cluster seeded from it starts with (its first leader
// chooses a cluster ID, its members announce their addresses). The snapshot itself does not
// change.
func (s *Snapshot) WithoutMembers() *Snapshot {
	c := *s
	c.members = map[string]string{}
	return &c
}
