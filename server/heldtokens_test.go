package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func heldKey(i int) []byte { return []byte("k" + strconv.Itoa(i)) }

// TestHeldTokensKeepTheNewest: past maxHeldTokens the oldest lock is forgotten; remembering a
// key again makes it the newest; forgetting and re-remembering in a loop keeps the memory
// bounded.
func TestHeldTokensKeepTheNewest(t *testing.T) {
	var h heldTokens
	for i := range maxHeldTokens + 10 {
		h.remember(heldKey(i), fsm.Token(i+1))
	}
	if h.len() != maxHeldTokens {
		t.Fatalf("len = %d, want %d", h.len(), maxHeldTokens)
	}
	for i := range 10 {
		if _, ok := h.token(heldKey(i)); ok {
			t.Fatalf("k%d, among the 10 oldest, is still remembered", i)
		}
	}
	for i := 10; i < maxHeldTokens+10; i++ {
		if tok, ok := h.token(heldKey(i)); !ok || tok != fsm.Token(i+1) {
			t.Fatalf("k%d = %d, %v; want %d", i, tok, ok, i+1)
		}
	}

	// k10 is the oldest; remembered again it is the newest, so the next key pushes out k11.
	h.remember(heldKey(10), 99)
	h.remember(heldKey(-1), 100)
	if tok, ok := h.token(heldKey(10)); !ok || tok != 99 {
		t.Fatalf("k10 remembered again = %d, %v; want 99", tok, ok)
	}
	if _, ok := h.token(heldKey(11)); ok {
		t.Fatal("k11 is still remembered: the oldest after k10 was renewed")
	}

	// A connection that locks and unlocks one key for ever.
	var g heldTokens
	for i := range 100 * maxHeldTokens {
		g.remember([]byte("same"), fsm.Token(i+1))
		if i%3 == 0 {
			g.forget([]byte("same"))
		}
		if len(g.f.order) > 2*maxHeldTokens+1 {
			t.Fatalf("after %d locks of one key, order holds %d keys", i+1, len(g.f.order))
		}
	}
}

// TestConnectionForgetsItsOldestLocks: a connection that takes a lock on a new key every time
// and releases it the Redis way (DEL) remembers no more than maxHeldTokens of them (it
// remembered every one before); it can UNLOCK its newest without the token and is asked for
// the token of a forgotten one.
func TestConnectionForgetsItsOldestLocks(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	n := maxHeldTokens + 500
	for i := range n {
		key := "lk" + strconv.Itoa(i)
		if got := r.do("SET", key, "v", "NX", "PX", "60000"); got != "+OK\r\n" {
			t.Fatalf("SET %s = %q", key, got)
		}
		if i < n-1 {
			r.do("DEL", key)
		}
	}
	if got := r.do("CLIENT", "INFO"); !strings.Contains(got, " locks="+strconv.Itoa(maxHeldTokens)+"\n") {
		t.Fatalf("CLIENT INFO = %q, want locks=%d", got, maxHeldTokens)
	}
	if got := r.do("UNLOCK", "lk"+strconv.Itoa(n-1)); got != ":1\r\n" {
		t.Fatalf("UNLOCK of the newest lock without its token = %q, want :1", got)
	}
	// fresh comes after the remembered lk keys: the next locks push those out, not it.
	r.do("LOCK", "fresh", "60000")
	for i := range maxHeldTokens - 1 {
		r.do("SET", "more"+strconv.Itoa(i), "v", "NX", "PX", "60000")
	}
	if got := r.do("UNLOCK", "fresh"); got != ":1\r\n" {
		t.Fatalf("UNLOCK fresh = %q, want :1", got)
	}
	if got := r.do("UNLOCK", "lk"+strconv.Itoa(n-2)); !strings.HasPrefix(got, "-ERR this connection holds no lock on 'lk"+strconv.Itoa(n-2)+"'") {
		t.Fatalf("UNLOCK of a forgotten lock = %q, want the error asking for its token", got)
	}
}
