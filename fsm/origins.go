package fsm

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// originNames interns the origins of a table's locks (Lock.Origin, a node's ID): a cluster has a
// handful of nodes and a million locks, so an entry keeps a four-byte reference to its origin's
// name rather than the name (19 bytes for a default ID such as node-127.0.0.1-7400).
//
// A reference never changes its name once given, and names are never removed: an entry written
// at any time, kept by a snapshot's copy of the table or put back by an undone entry, reads the
// same name forever. References are local to the process (a snapshot writes names, a restore
// interns them again in its own order), so two nodes' references may differ, never their
// tables: every name an entry carries is interned, without a cap that one node's history could
// reach before another's. What bounds the names is what reaches the log: the proposer stamps
// only its own ID and members' (raftnode's originOf).
//
// Adding a name appends it past every published length and then publishes the longer list, so
// reading a name (decoding an entry, on any goroutine: a snapshot's copy is read while the
// applier adds) takes no lock. Interning takes mu: the applier interns, and so may a copy of
// the table being rewritten on another goroutine (Snapshot.WithLeases re-encodes entries).
type originNames struct {
	list  atomic.Pointer[[]string]
	mu    sync.Mutex
	index map[string]uint32
}

func newOriginNames() *originNames {
	o := &originNames{index: map[string]uint32{}}
	o.list.Store(new([]string))
	return o
}

// ref returns the reference of the name id, interning it; 0 for none (id empty).
func (o *originNames) ref(id []byte) uint32 {
	if len(id) == 0 {
		return 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if r, ok := o.index[string(id)]; ok {
		return r
	}
	names := append(*o.list.Load(), string(id))
	o.list.Store(&names)
	r := uint32(len(names))
	o.index[names[len(names)-1]] = r
	return r
}

// name returns the name of reference r (nil for 0), aliasing the interned string: it must not
// be written to.
func (o *originNames) name(r uint32) []byte {
	names := *o.list.Load()
	if r == 0 || uint64(r) > uint64(len(names)) {
		return nil
	}
	s := names[r-1]
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
