package fsm

import "github.com/tidwall/btree"

// btreeDegree trades memory per node for depth; 32 keeps a million locks four levels deep.
const btreeDegree = 32

// lockTable is the key space: a B-tree of keys, each pointing at its Lock in an allocation of
// its own. The B-tree's nodes are about 60% full after random inserts, so an item inline (the
// key and the whole 64-byte Lock, 80 bytes) cost some 135 bytes a key in the nodes; an item of
// a key and a pointer costs 40, and the Lock's 64 bytes are allocated exactly once.
//
// A Lock in the table is never changed in place: Copy shares the pointers with the snapshot
// it makes (copy-on-write happens per node, not per item), so every change stores a new Lock.
// Set takes the Lock by value for that reason, and Get and the scans hand out copies.
type lockTable struct {
	m *btree.Map[string, *Lock]
}

func newLockTable() *lockTable {
	return &lockTable{m: btree.NewMap[string, *Lock](btreeDegree)}
}

// Len is the number of keys.
func (t *lockTable) Len() int { return t.m.Len() }

// Get returns a copy of the Lock at key.
func (t *lockTable) Get(key string) (Lock, bool) {
	p, ok := t.m.Get(key)
	if !ok {
		return Lock{}, false
	}
	return *p, true
}

// Set stores a new Lock at key and returns the one it replaced.
func (t *lockTable) Set(key string, l Lock) (prev Lock, existed bool) {
	p, existed := t.m.Set(key, &l)
	if existed {
		prev = *p
	}
	return prev, existed
}

// Load is Set for keys given in ascending order (a snapshot's restore): a fast path for them.
func (t *lockTable) Load(key string, l Lock) { t.m.Load(key, &l) }

// Delete removes key and returns the Lock it held.
func (t *lockTable) Delete(key string) (prev Lock, existed bool) {
	p, existed := t.m.Delete(key)
	if existed {
		prev = *p
	}
	return prev, existed
}

// Copy returns a copy in O(1): the two share nodes until either changes one.
func (t *lockTable) Copy() *lockTable { return &lockTable{m: t.m.Copy()} }

// Scan calls fn for every key in order until fn returns false.
func (t *lockTable) Scan(fn func(key string, l Lock) bool) {
	t.m.Scan(func(k string, p *Lock) bool { return fn(k, *p) })
}

// Ascend calls fn for every key from from up, in order, until fn returns false.
func (t *lockTable) Ascend(from string, fn func(key string, l Lock) bool) {
	t.m.Ascend(from, func(k string, p *Lock) bool { return fn(k, *p) })
}
