package server

import "sync"

// waiters wakes LOCK ... WAIT requests when their key changes on this node (a release, an
// expiry, any applied change: every node applies every change, so a follower wakes too).
type waiters struct {
	mu    sync.Mutex
	byKey map[string][]chan struct{}
}

func newWaiters() *waiters { return &waiters{byKey: map[string][]chan struct{}{}} }

// watch returns a channel closed at the key's next change, and a func that stops watching.
func (w *waiters) watch(key []byte) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	k := string(key)
	w.mu.Lock()
	w.byKey[k] = append(w.byKey[k], ch)
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		list := w.byKey[k]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(w.byKey, k)
		} else {
			w.byKey[k] = list
		}
	}
}

// changed wakes every waiter on key (all of them for a nil key). It runs in the node's apply
// path: it only closes channels.
func (w *waiters) changed(key []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if key == nil {
		for k, list := range w.byKey {
			for _, c := range list {
				close(c)
			}
			delete(w.byKey, k)
		}
		return
	}
	for _, c := range w.byKey[string(key)] {
		close(c)
	}
	delete(w.byKey, string(key))
}
