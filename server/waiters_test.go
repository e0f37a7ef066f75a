package server

import (
	"errors"
	"testing"
)

// A waiter woken by one of its keys leaves its other keys and the count: nothing stays behind
// on keys that never change, and the bounds count only those still waiting.
func TestWaitersForgetWoken(t *testing.T) {
	w := newWaiters(1, 2)
	ch, unwatch, err := w.watch([]byte("a"), []byte("b"), []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.watch([]byte("b")); !errors.As(err, new(*waitersFullError)) {
		t.Fatalf("a second waiter on b with a bound of 1: err %v", err)
	}
	w.changed([][]byte{[]byte("a")})
	select {
	case <-ch:
	default:
		t.Fatal("a change of a did not wake its waiter")
	}
	unwatch() // after the wake: nothing to do
	w.mu.Lock()
	n, left := w.mu.n, len(w.mu.byKey)
	w.mu.Unlock()
	if n != 0 || left != 0 {
		t.Fatalf("after the wake: %d waiters counted, %d keys listed, want 0 and 0", n, left)
	}
	var unwatches []func()
	for _, k := range []string{"b", "c"} {
		_, u, err := w.watch([]byte(k))
		if err != nil {
			t.Fatalf("watch %s: %v", k, err)
		}
		unwatches = append(unwatches, u)
	}
	if _, _, err := w.watch([]byte("d")); err == nil || err.Error() != "too many clients waiting on this node (at most 2)" {
		t.Fatalf("a third waiter with a total bound of 2: err %v", err)
	}
	for _, u := range unwatches {
		u()
		u()
	}
	if _, _, err := w.watch([]byte("d")); err != nil {
		t.Fatalf("after the unwatches: %v", err)
	}
}
