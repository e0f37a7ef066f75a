package server

// The lock table as the status page's locks view reads it (ops: /locks.json): LOCKS's walk
// (listLocks) run on this node's applied table, as a READONLY connection's read, with the
// leader's queue of each key it lists (LOCKWAITERS). A follower's page may lag the leader's.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// node.LockPage lists one page of database q.DB's holders from this node's applied table, with no
// leadership check, and the queues of their keys. The pattern is compiled before the view lock
// is taken, and compiling it keeps O(Config.MaxKeyBytes) whatever its length; the caller bounds
// the length it accepts. The queues are the replicated ones, read in the same view.
func (s *Server) LockPage(q node.LockPageQuery) (node.LockPage, error) {
	if q.DB < 0 || q.DB >= fsm.Databases {
		return node.LockPage{}, fmt.Errorf("%w: db %d is not 0 to %d", node.ErrInvalidLockQuery, q.DB, fsm.Databases-1)
	}
	if q.Count < 1 || q.Count > node.MaxLockPageCount {
		return node.LockPage{}, fmt.Errorf("%w: count %d is not 1 to %d", node.ErrInvalidLockQuery, q.Count, node.MaxLockPageCount)
	}
	db := byte(q.DB)
	from, ok := lockCursor(q.Cursor, db)
	if !ok {
		return node.LockPage{}, fmt.Errorf("%w: cursor %q is not one of database %d's", node.ErrInvalidLockQuery, q.Cursor, q.DB)
	}
	name := q.User
	if name == "" {
		name = "default"
	}
	user := s.users()[name]
	if user == nil {
		return node.LockPage{}, fmt.Errorf("%w: %q", node.ErrUnknownUser, name)
	}
	var pattern *glob
	if len(q.Match) > 0 {
		pattern = compileGlob(q.Match, s.cfg.MaxKeyBytes)
	}
	readable := func(key []byte) bool { return user.canKey(key, permRead) }
	var entries []lockEntry
	var next []byte
	queues := map[string][]node.LockWaiter{}
	queuesOf := func(v node.View, entries []lockEntry) {
		for _, e := range entries {
			k := fsm.DBKey(q.DB, e.key)
			if _, seen := queues[string(k)]; !seen {
				queues[string(k)] = waitersOf(v, k)
			}
		}
	}
	if s.grouped() {
		entries, next = s.spanLocks(db, from, q.Count, pattern, "", readable, queuesOf)
	} else {
		s.node.ExecLocal(func(v node.View) {
			entries, next = listLocks(v, db, from, q.Count, pattern, "", readable)
			queuesOf(v, entries)
		})
	}

	page := node.LockPage{Holders: make([]node.LockHolder, 0, len(entries)), Queues: []node.KeyQueue{}, Next: "0"}
	if next != nil {
		page.Next = hex.EncodeToString(next)
	}
	for _, e := range entries {
		pttl := time.Duration(-1)
		if e.pttl >= 0 {
			pttl = time.Duration(e.pttl) * time.Millisecond
		}
		page.Holders = append(page.Holders, node.LockHolder{Key: e.key, Kind: e.kind, Owner: e.owner, Token: e.token, PTTL: pttl,
			Since: e.since, Node: e.node})
	}
	for i, h := range page.Holders {
		if i > 0 && bytes.Equal(page.Holders[i-1].Key, h.Key) {
			continue // a key's shares and permits are contiguous in the table: its queue once
		}
		if ws := queues[string(fsm.DBKey(q.DB, h.Key))]; len(ws) > 0 {
			page.Queues = append(page.Queues, node.KeyQueue{Key: h.Key, Waiters: ws})
		}
	}
	return page, nil
}

// lockCursor is the table key a LOCKS cursor of database db starts from ("" and "0": the
// database's first), as cmdLocks reads it: a hex table key of db's, plain or hidden.
func lockCursor(cursor string, db byte) ([]byte, bool) {
	if cursor == "" || cursor == "0" {
		return []byte{db}, true
	}
	c, err := hex.DecodeString(cursor)
	if err != nil || len(c) == 0 || c[0] != db && !(fsm.Hidden(c) && len(c) > 1 && c[1] == db) {
		return nil, false
	}
	return c, true
}
