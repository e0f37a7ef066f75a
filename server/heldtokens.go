package server

import "github.com/raftlock/raftlock/fsm"

// maxHeldTokens is how many of its locks a connection remembers the tokens of (heldTokens).
const maxHeldTokens = 1024

// heldTokens are the fencing tokens of the locks a connection acquired (LOCK, SET ... NX), so
// that it may UNLOCK and RENEW them without repeating the token (DESIGN.md §7).
//
// A connection that lets its locks expire, or releases them some other way (DEL, the
// compare-and-delete script of the Redis recipe, another connection's UNLOCK), never says so
// here. So the set keeps the newest maxHeldTokens and forgets the oldest: a pooled connection
// that takes a lock on a new key every time, for days, holds at most that many (it held them
// all, about 100 bytes each, before). A forgotten lock is released as any other connection
// releases it, with its token.
type heldTokens struct {
	m map[string]heldToken
	// order has the keys in the order they were remembered, oldest first from head. A key
	// forgotten or remembered again leaves a stale element behind (its seq no longer matches
	// m's), dropped when it comes first or when order is compacted.
	order []orderedKey
	head  int
	seq   uint64
}

type heldToken struct {
	token fsm.Token
	seq   uint64
}

type orderedKey struct {
	key string
	seq uint64
}

// remember records key's token, as the newest, forgetting the oldest if the set is full.
func (h *heldTokens) remember(key []byte, t fsm.Token) {
	if h.m == nil {
		h.m = map[string]heldToken{}
	}
	k := string(key)
	h.seq++
	h.m[k] = heldToken{token: t, seq: h.seq}
	h.order = append(h.order, orderedKey{key: k, seq: h.seq})
	for len(h.m) > maxHeldTokens {
		o := h.order[h.head]
		h.order[h.head] = orderedKey{}
		h.head++
		if cur, ok := h.m[o.key]; ok && cur.seq == o.seq {
			delete(h.m, o.key)
		}
	}
	if live := len(h.order) - h.head; live > 2*maxHeldTokens || h.head > live {
		h.compact()
	}
}

// compact drops order's stale elements and the room before head: order then holds each
// remembered key once, so it stays within twice maxHeldTokens between compactions.
func (h *heldTokens) compact() {
	kept := h.order[:0]
	for _, o := range h.order[h.head:] {
		if cur, ok := h.m[o.key]; ok && cur.seq == o.seq {
			kept = append(kept, o)
		}
	}
	clear(h.order[len(kept):])
	h.order, h.head = kept, 0
}

// token returns the token remembered for key.
func (h *heldTokens) token(key []byte) (fsm.Token, bool) {
	t, ok := h.m[string(key)]
	return t.token, ok
}

// forget drops key's token (its lock was released).
func (h *heldTokens) forget(key []byte) { delete(h.m, string(key)) }

// len is how many locks are remembered.
func (h *heldTokens) len() int { return len(h.m) }
