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

// Blocking pops are served in the order they queued: only the first pop listed on a key may take
// it and hears of its changes; when it leaves having popped (or with a change pending) the next
// is told, and one that leaves with nothing pending tells nobody. LOCK ... WAITs on the same key
// are woken as before.
func TestWaitersPopsInOrder(t *testing.T) {
	w := newWaiters(10, 10)
	a, b := []byte("a"), []byte("b")
	hasToken := func(wt *waiter) bool {
		select {
		case <-wt.sig:
			return true
		default:
			return false
		}
	}
	first, err := w.queuePop(a)
	if err != nil {
		t.Fatal(err)
	}
	second, err := w.queuePop(b, a)
	if err != nil {
		t.Fatal(err)
	}
	lock, _, err := w.watch(a)
	if err != nil {
		t.Fatal(err)
	}
	if !w.mayPop(first, a) || w.mayPop(second, a) || !w.mayPop(second, b) || !w.mayPop(nil, a) {
		t.Fatalf("mayPop: first on a %v, second on a %v, second on b %v; want true, false, true",
			w.mayPop(first, a), w.mayPop(second, a), w.mayPop(second, b))
	}
	w.changed([][]byte{a})
	select {
	case <-lock:
	default:
		t.Error("a change of a did not wake the LOCK ... WAIT on it")
	}
	if !hasToken(first) || hasToken(second) {
		t.Fatal("a change of a: want a token for the first pop only")
	}
	w.changed([][]byte{a})
	w.leavePop(first, false) // a change it did not try after is pending: passed on
	if !hasToken(second) || !w.mayPop(second, a) {
		t.Fatal("the first pop left with a change pending: the second is not told, or may not pop a")
	}
	third, _ := w.queuePop(a)
	w.leavePop(second, true) // it popped: the next is told
	if !hasToken(third) {
		t.Fatal("the pop before it popped and left: the third pop is not told")
	}
	fourth, _ := w.queuePop(a)
	w.leavePop(third, false) // nothing pending: nobody is told
	if hasToken(fourth) {
		t.Error("a pop that left with nothing pending told the next")
	}
	w.changed(nil)
	if !hasToken(fourth) {
		t.Error("a change of every key did not tell the first pop")
	}
	w.leavePop(fourth, false)
	w.leavePop(fourth, true) // once only
	w.mu.Lock()
	n, left := w.mu.n, len(w.mu.byKey)
	w.mu.Unlock()
	if n != 0 || left != 0 {
		t.Fatalf("after every pop left: %d waiters counted, %d keys listed, want 0 and 0", n, left)
	}
}
