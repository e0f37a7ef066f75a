package fsm

import (
	"sync/atomic"
	"unsafe"
)

// originNames interns the origins of a table's locks (Lock.Origin, a node's ID): a cluster has a
// handful of nodes and a million locks, so an entry keeps a two-byte reference to its origin's
// name rather than the name (19 bytes for a default ID such as node-127.0.0.1-7400).
//
// A reference never changes its name once given, and names are never removed: an entry written
// at any time, kept by a snapshot's copy of the table or put back by an undone entry, reads the
// same name forever. References are local to the process (a snapshot writes names, a restore
// interns them again in its own order), so two nodes' references may differ, never their
// tables. Adding a name appends it past every published length and then publishes the longer
// list: a snapshot's copy read on another goroutine loads the list without a lock while the
// applier adds, and never reads an element being written.
type originNames struct {
	list  atomic.Pointer[[]string]
	index map[string]uint16 // the applier's only
}

// maxOrigins is how many names a table interns; an origin past them is not recorded (it is
// only shown). Only a member's ID, or a forwarding link's that a peer sent, gets here.
const maxOrigins = 1<<16 - 1

func newOriginNames() *originNames {
	o := &originNames{index: map[string]uint16{}}
	o.list.Store(new([]string))
	return o
}

// ref returns the reference of the name id, interning it: 0 for none (id empty, or the table
// already holds maxOrigins names).
func (o *originNames) ref(id []byte) uint16 {
	if len(id) == 0 {
		return 0
	}
	if r, ok := o.index[string(id)]; ok {
		return r
	}
	old := *o.list.Load()
	if len(old) >= maxOrigins {
		return 0
	}
	names := append(old, string(id))
	o.list.Store(&names)
	r := uint16(len(names))
	o.index[names[len(names)-1]] = r
	return r
}

// name returns the name of reference r (nil for 0), aliasing the interned string: it must not
// be written to.
func (o *originNames) name(r uint16) []byte {
	names := *o.list.Load()
	if r == 0 || int(r) > len(names) {
		return nil
	}
	s := names[r-1]
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
