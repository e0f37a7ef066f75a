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
// that takes a lock on a new key every time, for days, holds at most that many, about 100
// bytes each. A forgotten lock is released as any other connection releases it, with its
// token. The zero value is ready.
type heldTokens struct{ f fifoMap[string, fsm.Token] }

// remember records key's token, as the newest, forgetting the oldest if the set is full.
func (h *heldTokens) remember(key []byte, t fsm.Token) { h.f.put(string(key), t, maxHeldTokens) }

// token returns the token remembered for key.
func (h *heldTokens) token(key []byte) (fsm.Token, bool) { return h.f.get(string(key)) }

// forget drops key's token (its lock was released).
func (h *heldTokens) forget(key []byte) { h.f.del(string(key)) }

// len is how many locks are remembered.
func (h *heldTokens) len() int { return h.f.len() }
