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
type waiters struct {
	// blocked counts the blocking pops waiting now (INFO's blocked_clients).
	blocked       atomic.Int64
	perKey, total int
	mu            struct {
		sync.Mutex
		byKey map[string][]*waiter
		// queued counts, per key, the LOCK ... WAITs in a queueing node's queue (reserve):
		// the node holds them, the bounds count them here.
		queued  map[string]int
		nQueued int
		n       int // waiters watching or queued now
	}
}

// waiter is one blocked request: ch is closed at the first change of any of its keys.
type waiter struct {
	ch   chan struct{}
	keys []string // each once
	// done: wt is in no list and not counted (woken or unwatched; guarded by waiters.mu).
	done bool
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
	if w.mu.n >= w.total {
		return nil, func() {}, &waitersFullError{max: w.total}
	}
	for _, key := range keys {
		if len(w.mu.byKey[string(key)])+w.mu.queued[string(key)] >= w.perKey {
			return nil, func() {}, &waitersFullError{perKey: true, max: w.perKey}
		}
	}
	wt := &waiter{ch: make(chan struct{}), keys: make([]string, 0, len(keys))}
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
	return wt.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.finishLocked(wt)
	}, nil
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

// changed wakes every waiter on keys (all of them for nil keys). It is the node's change hook:
// it only closes channels.
func (w *waiters) changed(keys [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		for _, list := range w.mu.byKey {
			for _, wt := range list {
				if !wt.done {
					wt.done = true
					close(wt.ch)
				}
			}
		}
		clear(w.mu.byKey)
		w.mu.n = w.mu.nQueued
		return
	}
	for _, key := range keys {
		list := w.mu.byKey[string(key)]
		delete(w.mu.byKey, string(key))
		for _, wt := range list {
			w.wakeLocked(wt)
		}
	}
}

// reserve counts one queued LOCK ... WAIT on key in the bounds, until done is called (once).
// When a bound is reached it counts nothing and returns a *waitersFullError.
func (w *waiters) reserve(key []byte) (done func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := string(key)
	switch {
	case w.mu.n >= w.total:
		return nil, &waitersFullError{max: w.total}
	case len(w.mu.byKey[k])+w.mu.queued[k] >= w.perKey:
		return nil, &waitersFullError{perKey: true, max: w.perKey}
	}
	w.mu.queued[k]++
	w.mu.nQueued++
	w.mu.n++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.mu.queued[k]--; w.mu.queued[k] == 0 {
			delete(w.mu.queued, k)
		}
		w.mu.nQueued--
		w.mu.n--
	}, nil
}
