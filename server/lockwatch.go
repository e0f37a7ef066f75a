package server

// Lost-lock notices. A lock can end without its holder's UNLOCK: its lease runs out, someone
// deletes or overwrites the key, a FLUSHDB empties its database. Every node applies that end
// (node.Watchers.LockEnded) and tells two audiences:
//   - the holder, when it took the lock with LOCK on a connection to this node (directly or
//     forwarded to the leader) and speaks RESP3: a push `lock-lost key token reason`, queued as
//     the node applies the entry, before anyone hears back about it. An UNLOCK of that lock sent
//     on the holder's own connection is the holder's doing and pushes nothing; an UNLOCK with its
//     token from another connection pushes `deleted`, as does the holder's own DEL.
//   - anyone subscribed on this node to the lock's channel, __lock__:<key> (__lock__@<db>__:<key>
//     outside database 0): `lost <token> <reason>`, or `released <token>` for an UNLOCK.
//
// lockWatch remembers which of this node's connections hold which locks through LOCK: at most
// maxHeldTokens per connection (the newest, as heldTokens keeps), forgotten when the lock ends
// or the connection closes.

import (
	"strconv"
	"sync"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// lockChannelPrefix starts every lock channel's name.
const lockChannelPrefix = "__lock__"

// heldLock is one lock a connection holds through LOCK. releasing counts the connection's own
// UNLOCKs of it in flight.
type heldLock struct {
	token     fsm.Token
	releasing int
}

type lockWatch struct {
	mu sync.Mutex
	// byKey: a table key's holders on this node; byConn: each connection's keys, newest last.
	byKey  map[string]map[*conn]*heldLock
	byConn map[*conn]*fifoMap[string, struct{}]
}

func newLockWatch() *lockWatch {
	return &lockWatch{byKey: map[string]map[*conn]*heldLock{}, byConn: map[*conn]*fifoMap[string, struct{}]{}}
}

// hold records that c holds key's lock with token (a LOCK granted or renewed it).
func (lw *lockWatch) hold(c *conn, key []byte, token fsm.Token) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	k := string(key)
	keys := lw.byConn[c]
	if keys == nil {
		keys = &fifoMap[string, struct{}]{}
		lw.byConn[c] = keys
	}
	if forgot, ok := keys.put(k, struct{}{}, maxHeldTokens); ok {
		lw.dropLocked(c, forgot)
	}
	holders := lw.byKey[k]
	if holders == nil {
		holders = map[*conn]*heldLock{}
		lw.byKey[k] = holders
	}
	if h := holders[c]; h != nil && h.token == token {
		return
	}
	holders[c] = &heldLock{token: token}
}

// releasing notes that c's UNLOCK of key's lock with token is on its way: its end is c's own.
func (lw *lockWatch) releasing(c *conn, key []byte, token fsm.Token) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if h := lw.byKey[string(key)][c]; h != nil && h.token == token {
		h.releasing++
	}
}

// released is told the outcome of an UNLOCK that releasing announced: ok, it released the lock
// (on a follower the reply can come before this node applies the release, which then finds
// nothing to tell).
func (lw *lockWatch) released(c *conn, key []byte, token fsm.Token, ok bool) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	h := lw.byKey[string(key)][c]
	switch {
	case h == nil || h.token != token:
	case ok:
		lw.dropLocked(c, string(key))
	case h.releasing > 0:
		h.releasing--
	}
}

// forget drops every lock of c (it closed, or RESET).
func (lw *lockWatch) forget(c *conn) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	keys := lw.byConn[c]
	if keys == nil {
		return
	}
	for k := range keys.m {
		lw.dropLocked(c, k)
	}
	delete(lw.byConn, c)
}

func (lw *lockWatch) dropLocked(c *conn, k string) {
	holders := lw.byKey[k]
	delete(holders, c)
	if len(holders) == 0 {
		delete(lw.byKey, k)
	}
	if keys := lw.byConn[c]; keys != nil {
		keys.del(k)
	}
}

// ended is the node's LockEnded hook: it runs on the apply path and must not block.
func (s *Server) lockEnded(key []byte, token fsm.Token, how node.LockEnd) {
	lw := s.lockWatch
	var notify []*conn
	lw.mu.Lock()
	if holders := lw.byKey[string(key)]; holders != nil {
		for c, h := range holders {
			if h.token != token {
				continue
			}
			if how != node.LockReleased || h.releasing == 0 {
				notify = append(notify, c)
			}
			lw.dropLocked(c, string(key))
		}
	}
	lw.mu.Unlock()
	if len(notify) > 0 {
		reason := how
		if how == node.LockReleased {
			reason = node.LockDeleted // released by someone else, with the token
		}
		p := &push{kind: pushLockLost, key: clone(userKey(key)), token: token, body: []byte(reason.String())}
		var full []*conn
		for _, c := range notify {
			full = c.queuePush(p, full)
		}
		disconnectSlow(s.log, full, "lock-lost")
	}
	if s.hub.active() {
		body := make([]byte, 0, 32)
		if how == node.LockReleased {
			body = append(body, "released "...)
			body = strconv.AppendUint(body, uint64(token), 10)
		} else {
			body = append(body, "lost "...)
			body = strconv.AppendUint(body, uint64(token), 10)
			body = append(body, ' ')
			body = append(body, how.String()...)
		}
		s.hub.deliver(lockChannel(key), body, false)
	}
}

// locksWatched is the node's LocksWatched hook: whether a flush's locks are worth finding.
func (s *Server) locksWatched() bool {
	s.lockWatch.mu.Lock()
	held := len(s.lockWatch.byKey) > 0
	s.lockWatch.mu.Unlock()
	return held || s.hub.active()
}

// lockChannel is the channel a table key's lock ends are published on.
func lockChannel(key []byte) []byte {
	db, k := fsm.SplitDBKey(key)
	out := make([]byte, 0, len(lockChannelPrefix)+8+len(k))
	out = append(out, lockChannelPrefix...)
	if db != 0 {
		out = append(out, '@')
		out = strconv.AppendInt(out, int64(db), 10)
		out = append(out, "__"...)
	}
	out = append(out, ':')
	return append(out, k...)
}
