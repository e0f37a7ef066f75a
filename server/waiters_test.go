package server

import (
	"errors"
	"testing"
)

// The bounds count pops and queued LOCK ... WAITs together, and a waiter that left counts no more.
func TestWaitersBounds(t *testing.T) {
	w := newWaiters(1, 2)
	pop, err := w.queuePop([]byte("a"), []byte("b"), []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.reserve([]byte("b")); !errors.As(err, new(*waitersFullError)) {
		t.Fatalf("a LOCK ... WAIT on b beside a pop with a bound of 1: err %v", err)
	}
	done, err := w.reserve([]byte("c"))
	if err != nil {
		t.Fatalf("reserve c: %v", err)
	}
	if _, err := w.queuePop([]byte("d")); err == nil || err.Error() != "too many clients waiting on this node (at most 2)" {
		t.Fatalf("a third waiter with a total bound of 2: err %v", err)
	}
	w.leavePop(pop, false)
	done()
	w.mu.Lock()
	n, left, queued := w.mu.n, len(w.mu.byKey), len(w.mu.queued)
	w.mu.Unlock()
	if n != 0 || left != 0 || queued != 0 {
		t.Fatalf("after both left: %d waiters counted, %d keys listed, %d queued, want none", n, left, queued)
	}
	if _, err := w.queuePop([]byte("d")); err != nil {
		t.Fatalf("after both left: %v", err)
	}
}

// Blocking pops are served in the order they queued: only the first pop listed on a key may take
// it and hears of its changes; when it leaves having popped (or with a change pending) the next
// is told, and one that leaves with nothing pending tells nobody.
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
	if !w.mayPop(first, a) || w.mayPop(second, a) || !w.mayPop(second, b) || !w.mayPop(nil, a) {
		t.Fatalf("mayPop: first on a %v, second on a %v, second on b %v; want true, false, true",
			w.mayPop(first, a), w.mayPop(second, a), w.mayPop(second, b))
	}
	w.changed([][]byte{a})
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
