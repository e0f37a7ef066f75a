package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Type is the type of the value a key holds (Redis's TYPE). Values are part of the log and
// snapshot encodings: never renumber.
type Type uint8

// The key types. A string is a Lock's Owner; every other type is a Collection.
const (
	TypeString Type = 0
	TypeHash   Type = 1
	TypeSet    Type = 2
	TypeZSet   Type = 3
	TypeList   Type = 4
)

func (t Type) String() string {
	switch t {
	case TypeString:
		return "string"
	case TypeHash:
		return "hash"
	case TypeSet:
		return "set"
	case TypeZSet:
		return "zset"
	case TypeList:
		return "list"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Collection is the value of a key that is not a string: a hash, set, sorted set or list. It is
// immutable once stored (a change stores a new Collection, so a snapshot can share it). The
// leader computes every new value with Redis's rules (DESIGN.md §3's Write) and the FSM only
// stores it, so the order of Elems is whatever the leader chose; it chooses Redis's:
//
//	hash:  field, value, field, value, ... in insertion order (a small Redis hash's listpack)
//	set:   members in insertion order, or in numeric order while every member is an integer
//	       (Redis's listpack and intset)
//	zset:  members in (score, member) order, Scores[i] the score of Elems[i]
//	list:  elements from head to tail
//
// A stored Collection is never empty: an emptied collection deletes its key, as in Redis.
type Collection struct {
	Type   Type
	Elems  [][]byte
	Scores []float64 // sorted sets only
	// Rev is the log index of the entry that wrote this value: what a Write's MatchRev and WATCH
	// compare. The FSM sets it at apply; a proposer's value leaves it 0.
	Rev uint64
}

// Len is the number of elements: fields of a hash, members of a set or sorted set, elements of a
// list.
func (c *Collection) Len() int {
	if c.Type == TypeHash {
		return len(c.Elems) / 2
	}
	return len(c.Elems)
}

// HashGet returns the value of field in a hash.
func (c *Collection) HashGet(field []byte) ([]byte, bool) {
	if i := c.HashIndex(field); i >= 0 {
		return c.Elems[i+1], true
	}
	return nil, false
}

// HashIndex is the index in Elems of field in a hash, or -1.
func (c *Collection) HashIndex(field []byte) int {
	for i := 0; i+1 < len(c.Elems); i += 2 {
		if bytes.Equal(c.Elems[i], field) {
			return i
		}
	}
	return -1
}

// Index is the index in Elems of member in a set or sorted set, or -1.
func (c *Collection) Index(member []byte) int {
	for i, e := range c.Elems {
		if bytes.Equal(e, member) {
			return i
		}
	}
	return -1
}

// validate reports whether c is a well-formed value to store.
func (c *Collection) validate() error {
	switch c.Type {
	case TypeHash, TypeSet, TypeList:
		if len(c.Scores) != 0 {
			return fmt.Errorf("fsm: %s with scores", c.Type)
		}
	case TypeZSet:
		if len(c.Scores) != len(c.Elems) {
			return fmt.Errorf("fsm: zset of %d members and %d scores", len(c.Elems), len(c.Scores))
		}
		for _, s := range c.Scores {
			if math.IsNaN(s) {
				return fmt.Errorf("fsm: zset score NaN")
			}
		}
	default:
		return fmt.Errorf("fsm: collection of %s", c.Type)
	}
	if len(c.Elems) == 0 {
		return fmt.Errorf("fsm: empty %s", c.Type)
	}
	if c.Type == TypeHash && len(c.Elems)%2 != 0 {
		return fmt.Errorf("fsm: hash of %d fields and values", len(c.Elems))
	}
	return nil
}

// stored returns a copy of c for the table, written by the entry at index: its bytes in one
// allocation of its own (a decoded command's alias the log entry).
func (c *Collection) stored(index uint64) *Collection {
	total := 0
	for _, e := range c.Elems {
		total += len(e)
	}
	buf := make([]byte, 0, total)
	out := &Collection{Type: c.Type, Elems: make([][]byte, len(c.Elems)), Rev: index}
	for i, e := range c.Elems {
		start := len(buf)
		buf = append(buf, e...)
		out.Elems[i] = buf[start:len(buf):len(buf)]
	}
	if c.Type == TypeZSet {
		out.Scores = slices.Clone(c.Scores)
	}
	return out
}

// appendCollection appends c's encoding: its type (0 for none), then the count of elements, each
// length-prefixed, then for a sorted set each score as 8 bytes. rev says whether Rev follows
// (snapshots keep it; a command's value has none yet).
func appendCollection(dst []byte, c *Collection, rev bool) []byte {
	if c == nil {
		return append(dst, 0)
	}
	dst = append(dst, byte(c.Type))
	dst = binary.AppendUvarint(dst, uint64(len(c.Elems)))
	for _, e := range c.Elems {
		dst = appendBytes(dst, e)
	}
	for _, s := range c.Scores {
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(s))
	}
	if rev {
		dst = binary.AppendUvarint(dst, c.Rev)
	}
	return dst
}

// fieldReader is what readCollection reads from: a log entry in memory (decoder) or a snapshot
// stream (streamDecoder). Both keep their first error.
type fieldReader interface {
	uvarint() uint64
	bytes() []byte
	read(n int) []byte
	failed() error
}

// maxElements bounds the element count a corrupt encoding can make readCollection allocate for
// up front; a larger collection grows as its elements are read.
const maxElements = 1 << 16

// readCollection reads what appendCollection wrote (nil for none). From a decoder the bytes
// alias its buffer.
func readCollection(r fieldReader, rev bool) (*Collection, error) {
	tb := r.read(1)
	if err := r.failed(); err != nil {
		return nil, err
	}
	t := Type(tb[0])
	if t == TypeString {
		return nil, nil
	}
	n := r.uvarint()
	c := &Collection{Type: t, Elems: make([][]byte, 0, min(n, maxElements))}
	for i := uint64(0); i < n && r.failed() == nil; i++ {
		c.Elems = append(c.Elems, r.bytes())
	}
	if t == TypeZSet {
		c.Scores = make([]float64, 0, len(c.Elems))
		for i := uint64(0); i < n && r.failed() == nil; i++ {
			if b := r.read(8); b != nil {
				c.Scores = append(c.Scores, math.Float64frombits(binary.BigEndian.Uint64(b)))
			}
		}
	}
	if rev {
		c.Rev = r.uvarint()
	}
	if err := r.failed(); err != nil {
		return nil, err
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return c, nil
}
