package locks

import (
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// PermitsError refuses a semaphore's acquire with a permit count other than the one its key is
// held with: the count is fixed by the first acquire while anyone holds a permit.
type PermitsError struct {
	// Permits is the key's count; 0 for a shared lock.
	Permits uint64
}

func (e *PermitsError) Error() string {
	if e.Permits == 0 {
		return "the key is held as a shared lock, not a semaphore"
	}
	return fmt.Sprintf("the semaphore at this key has %d permits", e.Permits)
}

// room is what the keys of one evaluation have left to grant: what the view holds, less what the
// grants already chosen in it take (a hand-off serving several waiters in one entry).
type room struct {
	v    node.View
	keys map[string]*keyRoom
	// served are the places of the waiters chosen (served, or taken out) in this evaluation.
	served map[fsm.Token]bool
}

// keyRoom is one key's: blocked while it is held as a plain lock or within a lock-delay (or a
// grant chosen takes it whole), else its shared or semaphore holders and their permit count.
type keyRoom struct {
	blocked          bool
	holders, permits uint64
}

func newRoom(v node.View) *room {
	return &room{v: v, keys: map[string]*keyRoom{}, served: map[fsm.Token]bool{}}
}

// of is key's room, read from the view the first time.
func (r *room) of(key []byte) *keyRoom {
	if kr, ok := r.keys[string(key)]; ok {
		return kr
	}
	_, _, held := r.v.Lookup(key)
	k, _ := r.v.Kinds(key)
	kr := &keyRoom{blocked: held || k.Delayed, holders: k.Holders, permits: k.Permits}
	r.keys[string(key)] = kr
	return kr
}

// fitsOne reports whether a lock of mode (and permits) can be granted on key now.
func (r *room) fitsOne(key []byte, mode fsm.WaiterMode, permits uint64) bool {
	kr := r.of(key)
	switch {
	case kr.blocked:
		return false
	case mode == fsm.WaitLock:
		return kr.holders == 0
	case kr.holders > 0 && kr.permits != permits:
		return false
	case permits > 0:
		return kr.holders < permits
	}
	return kr.holders < fsm.MaxPermits
}

// fits reports whether everything q (waiting in key's queue) asks for can be granted now.
func (r *room) fits(q fsm.WaiterRequest, key []byte) bool {
	for _, k := range waiterKeys(q, key) {
		if !r.fitsOne(k, q.Mode, q.Permits) {
			return false
		}
	}
	return true
}

// take counts w's grants as made.
func (r *room) take(w fsm.Waiter, key []byte) {
	r.served[w.Seq] = true
	for _, k := range waiterKeys(w.Request, key) {
		kr := r.of(k)
		if w.Request.Mode == fsm.WaitLock {
			kr.blocked = true
			continue
		}
		kr.holders++
		kr.permits = w.Request.Permits
	}
}

// headsAll reports whether w heads the queue of every one of its keys, counting out the waiters
// chosen already (an MLOCK's turn).
func (r *room) headsAll(w fsm.Waiter, key []byte) bool {
	for _, k := range waiterKeys(w.Request, key) {
		var head fsm.Token
		r.v.Waiters(k, func(x fsm.Waiter, _ time.Duration) bool {
			if r.served[x.Seq] {
				return true
			}
			head = x.Seq
			return false
		})
		if head != w.Seq {
			return false
		}
	}
	return true
}

// mismatch reports whether q can never fit as its key is held now: a semaphore asked for with
// another permit count than its holders', or a share of a semaphore.
func (r *room) mismatch(q fsm.WaiterRequest, key []byte) bool {
	if q.Mode == fsm.WaitLock {
		return false
	}
	kr := r.of(key)
	return !kr.blocked && kr.holders > 0 && kr.permits != q.Permits
}
