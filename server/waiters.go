package server

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// waiters wakes blocked requests (LOCK ... WAIT, BLPOP, BRPOP) when one of their keys changes
// on this node (a release, an expiry, a push: any applied change. Every node applies every
// change, so a follower wakes too). It holds at most perKey waiters on one key and total in all
// (Config.MaxWaitersPerKey, MaxWaiters): each costs memory, and every change of a key walks its
// list.
//
// Blocking pops are served first come, first served, as Redis serves the clients blocked on a
// key: a pop stays in its keys' lists, in the order it blocked, from before its first try until
// it leaves, and pops only from the keys where it is the first pop listed (mayPop). A change of a
// key tells only that first pop to try (a token in its sig); when it leaves having popped, or
// with a change it did not try after, the pop first after it is told in turn. So the elements a
// push brings go to the blocked pops in order, one pop after the other.
type waiters struct {
	// blocked counts the blocking pops waiting now (INFO's blocked_clients).
	blocked       atomic.Int64
	perKey, total int
	mu            struct {
		sync.Mutex
		byKey map[string][]*waiter
		// queued counts, per key, the LOCK ... WAITs in a queueing node's queue (reserve):
		// the node holds them, the bounds count them here.
		queued map[string]int
		n      int // waiters watching or queued now
	}
}

// waiter is one blocked request: ch is closed at the first change of any of its keys. A blocking
// pop (pop) has no ch: it stays listed until it leaves, and sig gets a token when it is to try
// (buffered 1: a pending token is one change not yet tried after, more add nothing).
type waiter struct {
	ch   chan struct{}
	keys []string // each once
	// done: wt is in no list and not counted (woken or unwatched; guarded by waiters.mu).
	done bool
	pop  bool
	sig  chan struct{}
}

// waitersFullError refuses a request that would wait past a bound of the waiters.
type waitersFullError struct {
	perKey bool // the key's bound, not the node's
	max    int
}

func (e *waitersFullError) Error() string {
	if e.perKey {
		return fmt.Sprintf("too many clients waiting on this key (at most %d)", e.max)
	}
	return fmt.Sprintf("too many clients waiting on this node (at most %d)", e.max)
}

func newWaiters(perKey, total int) *waiters {
	w := &waiters{perKey: perKey, total: total}
	w.mu.byKey = map[string][]*waiter{}
	w.mu.queued = map[string]int{}
	return w
}

// watch returns a channel closed at the next change of any of keys, and a func that stops
// watching (it may be called after the wake, and more than once). When a bound is reached it
// watches nothing and returns a *waitersFullError instead: the caller may still try its request
// once, but must not wait.
func (w *waiters) watch(keys ...[]byte) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := &waiter{ch: make(chan struct{})}
	if err := w.addLocked(wt, keys); err != nil {
		return nil, func() {}, err
	}
	return wt.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.finishLocked(wt)
	}, nil
}

// queuePop puts a blocking pop at the end of the pops listed on each of keys, and returns it:
// the caller tries its pop (on the keys mayPop allows), waits for a token in its sig before each
// further try, and calls leavePop once. When a bound is reached it lists nothing and returns a
// *waitersFullError instead: the caller may still try its request once, but must not wait.
func (w *waiters) queuePop(keys ...[]byte) (*waiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := &waiter{pop: true, sig: make(chan struct{}, 1)}
	if err := w.addLocked(wt, keys); err != nil {
		return nil, err
	}
	return wt, nil
}

// fullLocked returns the *waitersFullError one more waiter on keys would meet, or nil while
// every bound has room: the node's total, and each key's waiters (listed, and queued in a
// queueing node's queue).
func (w *waiters) fullLocked(keys ...[]byte) error {
	if w.mu.n >= w.total {
		return &waitersFullError{max: w.total}
	}
	for _, key := range keys {
		if len(w.mu.byKey[string(key)])+w.mu.queued[string(key)] >= w.perKey {
			return &waitersFullError{perKey: true, max: w.perKey}
		}
	}
	return nil
}

// addLocked lists wt on keys, each once, and counts it; past a bound it does neither.
func (w *waiters) addLocked(wt *waiter, keys [][]byte) error {
	if err := w.fullLocked(keys...); err != nil {
		return err
	}
	wt.keys = make([]string, 0, len(keys))
	for _, key := range keys {
		k := string(key)
		list := w.mu.byKey[k]
		if len(list) > 0 && list[len(list)-1] == wt {
			continue // k again (BLPOP a a 0): wt was just appended to it
		}
		w.mu.byKey[k] = append(list, wt)
		wt.keys = append(wt.keys, k)
	}
	w.mu.n++
	return nil
}

// mayPop reports whether the blocking pop wt may take key's elements: it is the first pop
// listed on key, every pop that blocked on key before it has left. A nil wt (a pop that does not
// wait) may.
func (w *waiters) mayPop(wt *waiter, key []byte) bool {
	if wt == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return firstPop(w.mu.byKey[string(key)]) == wt
}

// leavePop takes the blocking pop wt out of the lists, once. If it popped, or a change it did
// not try after is pending, an element may be left for the pops after it: the pop now first on
// each key where wt was is told to try.
func (w *waiters) leavePop(wt *waiter, popped bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.done {
		return
	}
	select {
	case <-wt.sig:
		popped = true
	default:
	}
	var first []string
	for _, k := range wt.keys {
		if firstPop(w.mu.byKey[k]) == wt {
			first = append(first, k)
		}
	}
	w.finishLocked(wt)
	if popped {
		for _, k := range first {
			signal(firstPop(w.mu.byKey[k]))
		}
	}
}

// firstPop is the first blocking pop of list, nil when it has none.
func firstPop(list []*waiter) *waiter {
	for _, wt := range list {
		if wt.pop {
			return wt
		}
	}
	return nil
}

// signal gives the blocking pop wt (nil: none) a token, unless it has one already.
func signal(wt *waiter) {
	if wt == nil {
		return
	}
	select {
	case wt.sig <- struct{}{}:
	default:
	}
}

// finishLocked takes wt out of every list and the count, once.
func (w *waiters) finishLocked(wt *waiter) {
	if wt.done {
		return
	}
	wt.done = true
	w.mu.n--
	for _, k := range wt.keys {
		w.dropLocked(k, wt)
	}
}

// dropLocked removes wt from key's waiters (it may be there no more).
func (w *waiters) dropLocked(k string, wt *waiter) {
	list, ok := w.mu.byKey[k]
	if !ok {
		return
	}
	for i, x := range list {
		if x == wt {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(w.mu.byKey, k)
	} else {
		w.mu.byKey[k] = list
	}
}

// wakeLocked closes wt's channel and forgets wt everywhere: a waiter on several keys is woken
// once, and leaves no trace on its other keys.
func (w *waiters) wakeLocked(wt *waiter) {
	if !wt.done {
		w.finishLocked(wt)
		close(wt.ch)
	}
}

// changed wakes every waiter on keys (all of them for nil keys), and tells the first blocking
// pop of each to try. It is the node's change hook: it only closes channels and sends tokens.
func (w *waiters) changed(keys [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		all := make([]string, 0, len(w.mu.byKey))
		for k := range w.mu.byKey {
			all = append(all, k)
		}
		for _, k := range all {
			if _, ok := w.mu.byKey[k]; ok { // a waiter woken on an earlier key left this one
				w.changedLocked(k)
			}
		}
		return
	}
	for _, key := range keys {
		if _, ok := w.mu.byKey[string(key)]; ok {
			w.changedLocked(string(key))
		}
	}
}

// changedLocked wakes the waiters on k but its blocking pops, which stay listed in their order,
// and tells the first of those to try.
func (w *waiters) changedLocked(k string) {
	list := w.mu.byKey[k]
	delete(w.mu.byKey, k)
	pops := list[:0] // in place: a pop is kept at or before where it was read
	for _, wt := range list {
		if wt.pop {
			pops = append(pops, wt)
		} else {
			w.wakeLocked(wt) // it leaves its other keys; k is not listed now
		}
	}
	clear(list[len(pops):]) // the woken ones are not kept alive by the array
	if len(pops) > 0 {
		w.mu.byKey[k] = pops
		signal(pops[0])
	}
}

// reserve counts one queued LOCK ... WAIT on key in the bounds, until done is called (once).
// When a bound is reached it counts nothing and returns a *waitersFullError.
func (w *waiters) reserve(key []byte) (done func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.fullLocked(key); err != nil {
		return nil, err
	}
	k := string(key)
	w.mu.queued[k]++
	w.mu.n++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.mu.queued[k]--; w.mu.queued[k] == 0 {
			delete(w.mu.queued, k)
		}
		w.mu.n--
	}, nil
}
