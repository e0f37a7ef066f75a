package server

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// waiters tells blocked pops (BLPOP, BRPOP, ...) when one of their keys changes on this node (a
// push, a release, an expiry: any applied change. Every node applies every change, so a
// follower is told too), and counts the LOCK ... WAITs the lock queue holds (reserve). It holds
// at most perKey waiters on one key and total in all (Config.MaxWaitersPerKey, MaxWaiters): each
// costs memory, and every change of a key walks its list.
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
		// queued counts, per key, the LOCK ... WAITs in the lock queue (reserve): the queue
		// holds them, the bounds count them here.
		queued map[string]int
		n      int // pops listed and LOCK ... WAITs queued now
	}
}

// waiter is one blocked pop: it stays listed until it leaves, and sig gets a token when it is
// to try (buffered 1: a pending token is one change not yet tried after, more add nothing).
type waiter struct {
	keys []string // each once
	// done: wt is in no list and not counted (it left; guarded by waiters.mu).
	done bool
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

// queuePop puts a blocking pop at the end of the pops listed on each of keys, and returns it:
// the caller tries its pop (on the keys mayPop allows), waits for a token in its sig before each
// further try, and calls leavePop once. When a bound is reached it lists nothing and returns a
// *waitersFullError instead: the caller may still try its request once, but must not wait.
func (w *waiters) queuePop(keys ...[]byte) (*waiter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := &waiter{sig: make(chan struct{}, 1)}
	if err := w.addLocked(wt, keys); err != nil {
		return nil, err
	}
	return wt, nil
}

// fullLocked returns the *waitersFullError one more waiter on keys would meet, or nil while
// every bound has room: the node's total, and each key's waiters (pops listed, and LOCK ...
// WAITs in the lock queue).
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
	if len(list) == 0 {
		return nil
	}
	return list[0]
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

// changed tells the first blocking pop of each of keys (of every key for nil keys) to try. It is
// the node's change hook: it only sends tokens.
func (w *waiters) changed(keys [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		for k := range w.mu.byKey {
			w.changedLocked(k)
		}
		return
	}
	for _, key := range keys {
		w.changedLocked(string(key))
	}
}

// changedLocked tells the first blocking pop listed on k to try; the pops stay listed in their
// order.
func (w *waiters) changedLocked(k string) {
	signal(firstPop(w.mu.byKey[k]))
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
