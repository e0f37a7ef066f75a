package locks

import (
	"fmt"

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
// grants already chosen in it take (a hand-off granting several waiters in one entry).
type room struct {
	v    node.View
	keys map[string]*keyRoom
}

// keyRoom is one key's: blocked while it is held as a plain lock or within a lock-delay (or a
// grant chosen takes it whole), else its shared or semaphore holders and their permit count.
type keyRoom struct {
	blocked          bool
	holders, permits uint64
}

func newRoom(v node.View) *room { return &room{v: v, keys: map[string]*keyRoom{}} }

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

// fits reports whether every grant of w can be made now.
func (r *room) fits(w *lockWaiter) bool {
	for _, g := range w.grants {
		if !r.fitsOne(g) {
			return false
		}
	}
	return true
}

// fitsOne reports whether the grant g (a Grant taking a free key, or an Acquire) can be made.
func (r *room) fitsOne(g fsm.Command) bool {
	kr := r.of(g.Key)
	switch {
	case kr.blocked:
		return false
	case g.Kind == fsm.KindGrant:
		return kr.holders == 0
	case kr.holders > 0 && kr.permits != g.Permits:
		return false
	case g.Permits > 0:
		return kr.holders < g.Permits
	}
	return kr.holders < fsm.MaxPermits
}

// take counts w's grants as made.
func (r *room) take(w *lockWaiter) {
	for _, g := range w.grants {
		kr := r.of(g.Key)
		if g.Kind == fsm.KindGrant {
			kr.blocked = true
			continue
		}
		kr.holders++
		kr.permits = g.Permits
	}
}

// mismatch is the error for a waiter whose acquire can never fit as its key is held now: another
// permit count. nil when it may fit, now or later.
func (r *room) mismatch(w *lockWaiter) error {
	for _, g := range w.grants {
		if g.Kind != fsm.KindAcquire {
			continue
		}
		if kr := r.of(g.Key); !kr.blocked && kr.holders > 0 && kr.permits != g.Permits {
			return &PermitsError{Permits: kr.permits}
		}
	}
	return nil
}

// refusal is a waiter answered with an error by a hand-off.
type refusal struct {
	w   *lockWaiter
	err error
}
