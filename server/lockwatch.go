package server

// Lost-lock notices. A lock can end without its holder's UNLOCK: its lease runs out, someone
// deletes or overwrites the key, a FLUSHDB empties its database. Every node applies that end
// (node.Watchers.LockEnded, LocksFlushed) and tells two audiences:
//   - the holder, when it took the lock with LOCK on a RESP3 connection to this node (directly,
//     or forwarded to the leader): a push `lock-lost key token reason`, queued as the node
//     applies the entry. An end the holder's own connection may have caused is not pushed: one
//     within ownWriteWindow of a command of that connection that writes the key (UNLOCK, DEL,
//     SET, a script or transaction naming it, a flush). An expiry is always pushed.
//   - those subscribed on this node to the lock's channel, __lock__:<key> (__lock__@<db>__:<key>
//     outside database 0), by name or by a pattern that starts with __lock__: `lost <token>
//     <reason>`, or `released <token>` for a release. A pattern that does not start with
//     __lock__ (PSUBSCRIBE *) does not hear them: like keyspace notifications, they are for
//     those who ask.
//
// lockWatch remembers which of this node's connections hold which locks through LOCK: at most
// maxHeldTokens per connection (the newest, as heldTokens keeps), forgotten when the lock ends
// or the connection closes. A node that installs a snapshot compares them with its new table
// and tells each holder whose lock is gone (reason `unknown`: the entries that ended it were
// never applied here).

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// lockChannelPrefix starts every lock channel's name.
const lockChannelPrefix = "__lock__"

// heldLock is one lock a connection holds through LOCK. ownUntil: until then an end of it may be
// the connection's own doing (noteOwnWrites).
type heldLock struct {
	token    fsm.Token
	ownUntil time.Time
}

// ownWriteWindow is how long after a connection sends a command that writes a key it holds an
// end of that lock counts as its own: longer than any such command takes to apply everywhere
// (a script's time limit, a forwarded request's timeout, a follower's apply lag).
const ownWriteWindow = 10 * time.Second

type lockWatch struct {
	mu sync.Mutex
	// byKey: a table key's holders on this node; byConn: each connection's keys, newest last.
	byKey  map[string]map[*conn]*heldLock
	byConn map[*conn]*fifoMap[string, struct{}]
	// held counts the entries of byKey's maps: the apply path reads it for every lock end, and
	// takes mu only when there is someone to tell.
	held atomic.Int32
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
	} else if h == nil {
		c.watched.Add(1)
		lw.held.Add(1)
	}
	holders[c] = &heldLock{token: token}
}

// own marks c's locks on keys (nil: all of them) as written by c itself, now.
func (lw *lockWatch) own(c *conn, keys [][]byte) {
	until := time.Now().Add(ownWriteWindow)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if keys == nil {
		if held := lw.byConn[c]; held != nil {
			for k := range held.m {
				if h := lw.byKey[k][c]; h != nil {
					h.ownUntil = until
				}
			}
		}
		return
	}
	for _, k := range keys {
		if h := lw.byKey[string(k)][c]; h != nil {
			h.ownUntil = until
		}
	}
}

// released forgets c's lock on key with token: c's UNLOCK released it.
func (lw *lockWatch) released(c *conn, key []byte, token fsm.Token) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if h := lw.byKey[string(key)][c]; h != nil && h.token == token {
		lw.dropLocked(c, string(key))
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
	if _, ok := holders[c]; ok {
		c.watched.Add(-1)
		lw.held.Add(-1)
	}
	delete(holders, c)
	if len(holders) == 0 {
		delete(lw.byKey, k)
	}
	if keys := lw.byConn[c]; keys != nil {
		keys.del(k)
	}
}

// noteOwnWrites marks the locks this connection holds that cmd (args, in database db) may end
// as the connection's own doing, before cmd runs or is forwarded: its keys' (a transaction's
// EXEC: every queued command's), or every lock for a flush.
func (c *conn) noteOwnWrites(cmd *command, args [][]byte, db int) {
	if c.watched.Load() == 0 {
		return
	}
	switch {
	case cmd.name == "exec" && c.sess.multi != nil:
		var keys [][]byte
		for _, q := range c.sess.multi.queued {
			if q.cmd.name == "select" && len(q.args) == 2 {
				if n, ok := parseInt(q.args[1]); ok && n >= 0 && n < fsm.Databases {
					db = int(n)
				}
			}
			if endsLocks(q.cmd) {
				if q.cmd.name == "flushdb" || q.cmd.name == "flushall" {
					c.s.lockWatch.own(c, nil)
					return
				}
				keys = append(keys, dbKeys(db, q.cmd.keyArgs(q.args))...)
			}
		}
		c.s.lockWatch.own(c, keys)
	case !endsLocks(cmd):
	case cmd.name == "flushdb" || cmd.name == "flushall":
		c.s.lockWatch.own(c, nil)
	default:
		c.s.lockWatch.own(c, dbKeys(db, cmd.keyArgs(args)))
	}
}

// endsLocks reports whether cmd may end a lock on a key it writes: any write but LOCK and
// RENEW, which keep the holder's lock.
func endsLocks(cmd *command) bool {
	return cmd.write && cmd.name != "lock" && cmd.name != "renew" && cmd.name != "semacquire" && cmd.name != "mlock"
}

// lockEnded is the node's LockEnded hook: it runs on the apply path and must not block.
func (s *Server) lockEnded(g int, at node.LogPosition, key []byte, token fsm.Token, how node.LockEnd) {
	if base, _, ok := fsm.HolderOf(key); ok {
		key = base // a share's or a permit's: its holders know it by its key and token
	}
	s.tellHolders(key, token, how)
	if s.hub.lockInterest() {
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
		s.hub.deliverLock(g, at, lockChannel(key), body)
	}
}

// tellHolders pushes lock-lost to this node's holders of key's lock with token (any token when
// token is 0), unless the end may be their own (reason how; an expiry never is), and forgets
// them.
func (s *Server) tellHolders(key []byte, token fsm.Token, how node.LockEnd) {
	lw := s.lockWatch
	if lw.held.Load() == 0 {
		return
	}
	now := time.Now()
	type told struct {
		c     *conn
		token fsm.Token
	}
	var notify []told
	lw.mu.Lock()
	for c, h := range lw.byKey[string(key)] {
		if token != 0 && h.token != token {
			continue
		}
		if how == node.LockExpired || now.After(h.ownUntil) {
			notify = append(notify, told{c, h.token})
		}
		lw.dropLocked(c, string(key))
	}
	lw.mu.Unlock()
	if len(notify) == 0 {
		return
	}
	reason := how
	if how == node.LockReleased {
		reason = node.LockDeleted // released by someone else, with the token
	}
	var full []*conn
	for _, t := range notify {
		full = t.c.queuePush(&push{kind: pushLockLost, key: clone(userKey(key)), token: t.token, body: []byte(reason.String())}, full)
	}
	disconnectSlow(s.log, full, "lock-lost")
}

// locksFlushed is group g's LocksFlushed hook: a FLUSHDB of database db (FLUSHALL: db nil)
// ended every lock of the group in it, which this node's holders hear of from its own table of
// holders.
func (s *Server) locksFlushed(g int, db []byte) {
	lw := s.lockWatch
	var keys []string
	lw.mu.Lock()
	for k := range lw.byKey {
		if (len(db) == 0 || k[0] == db[0]) && s.servesKey(g, []byte(k)) {
			keys = append(keys, k)
		}
	}
	lw.mu.Unlock()
	for _, k := range keys {
		s.tellHolders([]byte(k), 0, node.LockFlushed)
	}
}

// recheckHolders runs after this node installed a snapshot of group g: the entries it covers
// were never applied here, so every holder of a lock of that group whose lock the new table no
// longer has (or has with another token) hears lock-lost with reason unknown.
func (s *Server) recheckHolders(g int) {
	lw := s.lockWatch
	type held struct {
		key   []byte
		token fsm.Token
	}
	var all []held
	lw.mu.Lock()
	for k, holders := range lw.byKey {
		if !s.servesKey(g, []byte(k)) {
			continue
		}
		for _, h := range holders {
			all = append(all, held{[]byte(k), h.token})
		}
	}
	lw.mu.Unlock()
	if len(all) == 0 {
		return
	}
	var gone []held
	s.groups[g].ExecLocal(func(v node.View) {
		for _, h := range all {
			if l, _, ok := v.Lookup(h.key); ok && l.Token == h.token && l.Value == nil {
				continue
			}
			if l, _, ok := v.Lookup(fsm.HolderKey(h.key, h.token)); ok && l.Token == h.token {
				continue // a share or a permit
			}
			gone = append(gone, h)
		}
	})
	for _, h := range gone {
		s.tellHolders(h.key, h.token, node.LockUnknown)
	}
}

// restored is the node's Restored hook: the snapshot's entries are never delivered here.
func (s *Server) restored(g int) {
	s.hub.dropSubscribers()
	s.recheckHolders(g)
	s.queueWaits.restored(s.groups[g])
}

// locksWatched is the node's LocksWatched hook: whether anyone on this node listens to lock
// channels, for whom a flush's locks are worth finding in the table.
func (s *Server) locksWatched() bool { return s.hub.lockInterest() }

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
