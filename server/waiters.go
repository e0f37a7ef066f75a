package server

import "sync"

// waiters wakes LOCK ... WAIT requests when their key changes on this node (a release, an
// expiry, any applied change: every node applies every change, so a follower wakes too).
type waiters struct {
	mu struct {
		sync.Mutex
		byKey map[string][]chan struct{}
	}
}

func newWaiters() *waiters {
	w := &waiters{}
	w.mu.byKey = map[string][]chan struct{}{}
	return w
}

// watch returns a channel closed at the key's next change, and a func that stops watching.
func (w *waiters) watch(key []byte) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	k := string(key)
	w.mu.Lock()
	w.mu.byKey[k] = append(w.mu.byKey[k], ch)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		list := w.mu.byKey[k]
		for i, c := range list {
			if c == ch {
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
}

// changed wakes every waiter on keys (all of them for nil keys). It is the node's change hook:
// it only closes channels.
func (w *waiters) changed(keys [][]byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if keys == nil {
		for k, list := range w.mu.byKey {
			for _, c := range list {
				close(c)
			}
			delete(w.mu.byKey, k)
		}
		return
	}
	for _, key := range keys {
		for _, c := range w.mu.byKey[string(key)] {
			close(c)
		}
		delete(w.mu.byKey, string(key))
	}
}
