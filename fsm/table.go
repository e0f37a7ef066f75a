package fsm

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unsafe"

	"github.com/tidwall/btree"
)

// btreeDegree trades memory per node for depth; 32 keeps a million locks four levels deep.
const btreeDegree = 32

// lockTable is the key space. Each key is one allocation holding the key, the lease state and
// the owner's bytes (an entry, below), and the B-tree's items are those entries: a 16-byte
// string each, in nodes about 60% full. The collection a hash, set, sorted set or list key
// holds lives in a second B-tree, colls, by the same key, made when the first one is stored
// (a script's scratch table, made per script, mostly holds none).
//
// Why one allocation: with a million locks, a B-tree of (key, Lock) items inline cost some 135
// bytes a key in its nodes plus the key's and the owner's allocations; a tree of pointers to
// Locks cut the nodes to 40 bytes but made a million more objects with pointers in them for
// the collector to scan at every cycle, and under load that cost more CPU than it saved
// memory. An entry has no pointers: the collector marks it and never scans it, and there is
// one object a key instead of two or three.
//
// Entries are immutable: Copy shares them with the snapshot it makes (copy-on-write happens
// per node, not per item), so every change stores a new one. The Owner of a Lock that Get and
// the scans return aliases the entry's bytes (its capacity is its length, so an append
// copies): it must not be written to.
//
// A lockTable is not safe for concurrent use (lookups share a scratch key); each Copy has its
// own.
type lockTable struct {
	entries *btree.BTreeG[string]
	colls   *btree.Map[string, *Collection]
	probe   []byte // scratch: the key being looked up, as an entry prefix
	// hint is the path of the last lookup, where the next one starts: applying a command looks
	// its key up, then stores or deletes that same key, which the hint then finds in one or two
	// comparisons a level instead of a binary search (a miss costs a comparison or two more).
	hint btree.PathHint
	// origins names the origins the entries refer to: shared by the Machine's tables and their
	// copies, which only add to it.
	origins *originNames
}

func newLockTable(origins *originNames) *lockTable {
	return &lockTable{entries: btree.NewBTreeGOptions(entryLess, btree.Options{Degree: btreeDegree, NoLocks: true}),
		origins: origins}
}

// An entry is a string: the key's length (4 bytes, little-endian), the key, the lease state
// (Token, LeaseRev, LeaseMs, Deadline: 8 bytes each, little-endian), a flags byte, the lock-delay
// (8 bytes, only with flagDelay: most locks have none and pay nothing for it), the grant time (8
// bytes) and the origin's reference (4 bytes, originNames), only with flagHeld (a Redis write
// that takes no lock has neither), then the owner's bytes to the end. A lookup compares a probe
// made of the length and the key alone.
const (
	entryKeyLen = 4
	entryState  = 4 * 8
	entryFixed  = entryKeyLen + entryState + 1

	flagCollection = 1 << 0 // the key's value is in colls
	flagNilOwner   = 1 << 1 // Owner is nil, not empty
	flagDelay      = 1 << 2 // Delay follows the flags byte
	flagHeld       = 1 << 3 // Since and Origin's reference follow the Delay (or the flags byte)

	entryDelay = 8
	entryHeld  = 8 + 4
)

// entryKey is the key of an entry (or of a probe).
func entryKey(e string) string {
	n := binary.LittleEndian.Uint32(unsafe.Slice(unsafe.StringData(e), entryKeyLen))
	return e[entryKeyLen : entryKeyLen+n]
}

func entryLess(a, b string) bool { return entryKey(a) < entryKey(b) }

// encodeEntry makes the entry of key holding l (l.Value aside: that goes to colls).
func (t *lockTable) encodeEntry(key string, l Lock) string {
	if uint64(len(key)) > math.MaxUint32 {
		panic(fmt.Sprintf("fsm: a key of %d bytes", len(key))) // far past any request size limit
	}
	delay := 0
	if l.Delay != 0 {
		delay = entryDelay
	}
	held := 0
	var origin uint32
	if l.Since != 0 || len(l.Origin) != 0 {
		held, origin = entryHeld, t.origins.ref(l.Origin)
	}
	b := make([]byte, entryFixed+delay+held+len(key)+len(l.Owner))
	binary.LittleEndian.PutUint32(b, uint32(len(key)))
	copy(b[entryKeyLen:], key)
	s := b[entryKeyLen+len(key):]
	binary.LittleEndian.PutUint64(s[0:], uint64(l.Token))
	binary.LittleEndian.PutUint64(s[8:], l.LeaseRev)
	binary.LittleEndian.PutUint64(s[16:], l.LeaseMs)
	binary.LittleEndian.PutUint64(s[24:], uint64(l.Deadline))
	var flags byte
	if l.Value != nil {
		flags |= flagCollection
	}
	if l.Owner == nil {
		flags |= flagNilOwner
	}
	if delay != 0 {
		flags |= flagDelay
		binary.LittleEndian.PutUint64(s[entryState+1:], l.Delay)
	}
	if held != 0 {
		flags |= flagHeld
		h := s[entryState+1+delay:]
		binary.LittleEndian.PutUint64(h, uint64(l.Since))
		binary.LittleEndian.PutUint32(h[8:], origin)
	}
	s[entryState] = flags
	copy(s[entryState+1+delay+held:], l.Owner)
	return unsafe.String(&b[0], len(b))
}

// decodeEntry returns an entry's key and Lock, with Value nil, and whether the key's value is
// a collection (in colls).
func (t *lockTable) decodeEntry(e string) (key string, l Lock, coll bool) {
	key = entryKey(e)
	rest := e[entryKeyLen+len(key):]
	s := unsafe.Slice(unsafe.StringData(rest), len(rest))
	l.Token = Token(binary.LittleEndian.Uint64(s[0:]))
	l.LeaseRev = binary.LittleEndian.Uint64(s[8:])
	l.LeaseMs = binary.LittleEndian.Uint64(s[16:])
	l.Deadline = int64(binary.LittleEndian.Uint64(s[24:]))
	flags := s[entryState]
	owner := entryState + 1
	if flags&flagDelay != 0 {
		l.Delay = binary.LittleEndian.Uint64(s[owner:])
		owner += entryDelay
	}
	if flags&flagHeld != 0 {
		l.Since = int64(binary.LittleEndian.Uint64(s[owner:]))
		l.Origin = t.origins.name(binary.LittleEndian.Uint32(s[owner+8:]))
		owner += entryHeld
	}
	if flags&flagNilOwner == 0 {
		l.Owner = s[owner:len(s):len(s)]
	}
	return key, l, flags&flagCollection != 0
}

// lock decodes e, its collection included.
func (t *lockTable) lock(e string) (string, Lock) {
	key, l, coll := t.decodeEntry(e)
	if coll && t.colls != nil {
		l.Value, _ = t.colls.Get(key)
	}
	return key, l
}

// probeFor returns a probe for key in t's scratch: valid until the next lookup.
func (t *lockTable) probeFor(key string) string {
	t.probe = binary.LittleEndian.AppendUint32(t.probe[:0], uint32(len(key)))
	t.probe = append(t.probe, key...)
	return unsafe.String(unsafe.SliceData(t.probe), len(t.probe))
}

// Len is the number of keys.
func (t *lockTable) Len() int { return t.entries.Len() }

// Get returns the Lock at key.
func (t *lockTable) Get(key string) (Lock, bool) {
	_, l, ok := t.Entry(key)
	return l, ok
}

// Entry returns the Lock at key and the table's own copy of the key, which shares the entry's
// bytes: a caller that keeps it (a lease timer) holds no second copy.
func (t *lockTable) Entry(key string) (stored string, l Lock, ok bool) {
	e, ok := t.entries.GetHint(t.probeFor(key), &t.hint)
	if !ok {
		return "", Lock{}, false
	}
	stored, l = t.lock(e)
	return stored, l, true
}

// Set stores l at key and returns the table's own copy of key (which the entry holds) and the
// Lock it replaced.
func (t *lockTable) Set(key string, l Lock) (stored string, prev Lock, existed bool) {
	e := t.encodeEntry(key, l)
	old, existed := t.entries.SetHint(e, &t.hint)
	if existed {
		_, prev = t.lock(old)
	}
	stored = entryKey(e)
	switch {
	case l.Value != nil:
		t.collections().Set(stored, l.Value)
	case prev.Value != nil:
		t.colls.Delete(stored)
	}
	return stored, prev, existed
}

// collections returns colls, made on first use.
func (t *lockTable) collections() *btree.Map[string, *Collection] {
	if t.colls == nil {
		t.colls = btree.NewMap[string, *Collection](btreeDegree)
	}
	return t.colls
}

// Load is Set for keys given in ascending order (a snapshot's restore): a fast path for them.
// It copies key and l.Owner into the entry and returns the entry's key.
func (t *lockTable) Load(key string, l Lock) (stored string) {
	e := t.encodeEntry(key, l)
	t.entries.Load(e)
	stored = entryKey(e)
	if l.Value != nil {
		t.collections().Load(stored, l.Value)
	}
	return stored
}

// Delete removes key and returns the Lock it held.
func (t *lockTable) Delete(key string) (prev Lock, existed bool) {
	old, existed := t.entries.DeleteHint(t.probeFor(key), &t.hint)
	if !existed {
		return Lock{}, false
	}
	_, prev = t.lock(old)
	if prev.Value != nil {
		t.colls.Delete(key)
	}
	return prev, true
}

// reset empties the table for reuse (Machine.Reset). Its nodes go: a lookup result taken
// before still reads what it read (entries are immutable strings, collections are dropped,
// not cleared). The probe's buffer stays unless a long key grew it.
func (t *lockTable) reset() {
	t.entries.Clear()
	t.colls = nil
	t.hint = btree.PathHint{}
	if cap(t.probe) > maxKeptProbe {
		t.probe = nil
	}
}

// maxKeptProbe bounds the probe buffer a reset table keeps.
const maxKeptProbe = 4 << 10

// Copy returns a copy in O(1): the two share nodes until either changes one.
func (t *lockTable) Copy() *lockTable {
	c := &lockTable{entries: t.entries.Copy(), origins: t.origins}
	if t.colls != nil {
		c.colls = t.colls.Copy()
	}
	return c
}

// Scan calls fn for every key in order until fn returns false.
func (t *lockTable) Scan(fn func(key string, l Lock) bool) {
	t.entries.Scan(func(e string) bool { return fn(t.lock(e)) })
}

// Ascend calls fn for every key from from up, in order, until fn returns false.
func (t *lockTable) Ascend(from string, fn func(key string, l Lock) bool) {
	// The probe is copied: fn may look keys up, which reuses the scratch.
	pivot := strings.Clone(t.probeFor(from))
	t.entries.Ascend(pivot, func(e string) bool { return fn(t.lock(e)) })
}
