package server

import (
	"sync"
	"sync/atomic"
)

// waiters wakes blocked requests (LOCK ... WAIT, BLPOP, BRPOP) when one of their keys changes
// on this node (a release, an expiry, a push: any applied change. Every node applies every
// change, so a follower wakes too).
type waiters struct {
	// blocked counts the blocking pops waiting now (INFO's blocked_clients).
	blocked atomic.Int64
	mu      struct {
		sync.Mutex
		byKey map[string][]*waiter
	}
}

// waiter is one blocked request: ch is closed at the first change of any of its keys.
type waiter struct {
	ch   chan struct{}
	woke bool // ch is closed (guarded by waiters.mu)
}

func newWaiters() *waiters {
	w := &waiters{}
	w.mu.byKey = map[string][]*waiter{}
	return w
}

// watch returns a channel closed at the next change of any of keys, and a func that stops
// watching.
func (w *waiters) watch(keys ...[]byte) (<-chan struct{}, func()) {
	wt := &waiter{ch: make(chan struct{})}
	w.mu.Lock()
	for _, key := range keys {
		k := string(key)
		w.mu.byKey[k] = append(w.mu.byKey[k], wt)
	}
	w.mu.Unlock()
	return wt.ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, key := range keys {
			w.dropLocked(string(key), wt)
		}
	}
}

// dropLocked removes wt from key's waiters (it may be there no more).
func (w *waiters) dropLocked(k string, wt *waiter) {
	list := w.mu.byKey[k]
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

// wakeLocked closes wt's channel once: a waiter on several keys may be woken by each.
func (wt *waiter) wakeLocked() {
	if !wt.woke {
		wt.woke = true
		close(wt.ch)
	}
}

// changed wakes every waiter on keys (all of them for nil keys). It is the node's change hook:
// it only closes channels.
func (w *waiters) changed(keys [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		for k, list := range w.mu.byKey {
			for _, wt := range list {
				wt.wakeLocked()
			}
			delete(w.mu.byKey, k)
		}
		return
	}
	for _, key := range keys {
		for _, wt := range w.mu.byKey[string(key)] {
			wt.wakeLocked()
		}
		delete(w.mu.byKey, string(key))
	}
}
