package server

// The lock table as the status page's locks view reads it (ops: /locks.json): LOCKS's walk
// (listLocks) run on this node's applied table, as a READONLY connection's read, with the
// leader's queue of each key it lists (LOCKWAITERS). A follower's page may lag the leader's.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// MaxLockPageCount bounds LockPageQuery.Count: the table entries one page walks under the view
// lock, and so the holders it lists.
const MaxLockPageCount = 100

// ErrInvalidLockQuery is wrapped by LockPage's error for a query it cannot serve: its text
// names the field.
var ErrInvalidLockQuery = errors.New("server: invalid lock page query")

// ErrUnknownUser is wrapped by LockPage's error when LockPageQuery.User is not a user in force
// (deleted since the caller authenticated it).
var ErrUnknownUser = errors.New("server: no such user")

// LockPageQuery is one page of the locks view.
type LockPageQuery struct {
	// User is whose key permissions filter the holders, as LOCKS filters them for its caller
	// (an owner is a string's value); "" is the default user.
	User string
	// DB is the database, 0 to fsm.Databases-1.
	DB int
	// Cursor is where the page starts: "" or "0" at the beginning, else a page's Next.
	Cursor string
	// Match, if not empty, is a glob the keys must match, as LOCKS MATCH takes it.
	Match []byte
	// Count is the table entries the page looks at, 1 to MaxLockPageCount (LOCKS's COUNT): the
	// holders listed are at most that many, and may be none on a page that is not the last.
	Count int
}

// LockPage is one page of holders, and the queues of the keys among them that have waiters.
type LockPage struct {
	Holders []LockHolder
	// Queues are the leader's (Deps.Queue): on a follower, which forwards every
	// LOCK ... WAIT, they are empty. In the order their keys first appear in Holders.
	Queues []KeyQueue
	// Next is the cursor of the following page; "0" when the walk is done.
	Next string
}

// LockHolder is one plain lock, share or permit: one entry of LOCKS.
type LockHolder struct {
	Key   []byte
	Kind  string // "lock", "shared" or "semaphore"
	Owner []byte
	Token fsm.Token
	PTTL  time.Duration // negative: no lease
}

// KeyQueue is the requests waiting on Key, in the order they will be served (LOCKWAITERS).
type KeyQueue struct {
	Key     []byte
	Waiters []Waiter
}

// LockPage lists one page of database q.DB's holders from this node's applied table, with no
// leadership check, and the queues of their keys. The pattern is compiled before the view lock
// is taken, and compiling it keeps O(Config.MaxKeyBytes) whatever its length; the caller bounds
// the length it accepts. The queues are the replicated ones, read in the same view.
func (s *Server) LockPage(q LockPageQuery) (LockPage, error) {
	if q.DB < 0 || q.DB >= fsm.Databases {
		return LockPage{}, fmt.Errorf("%w: db %d is not 0 to %d", ErrInvalidLockQuery, q.DB, fsm.Databases-1)
	}
	if q.Count < 1 || q.Count > MaxLockPageCount {
		return LockPage{}, fmt.Errorf("%w: count %d is not 1 to %d", ErrInvalidLockQuery, q.Count, MaxLockPageCount)
	}
	db := byte(q.DB)
	from, ok := lockCursor(q.Cursor, db)
	if !ok {
		return LockPage{}, fmt.Errorf("%w: cursor %q is not one of database %d's", ErrInvalidLockQuery, q.Cursor, q.DB)
	}
	name := q.User
	if name == "" {
		name = "default"
	}
	user := s.users()[name]
	if user == nil {
		return LockPage{}, fmt.Errorf("%w: %q", ErrUnknownUser, name)
	}
	var pattern *glob
	if len(q.Match) > 0 {
		pattern = compileGlob(q.Match, s.cfg.MaxKeyBytes)
	}
	readable := func(key []byte) bool { return user.canKey(key, permRead) }
	var entries []lockEntry
	var next []byte
	queues := map[string][]Waiter{}
	s.node.ExecLocal(func(v node.View) {
		entries, next = listLocks(v, db, from, q.Count, pattern, "", readable)
		for _, e := range entries {
			k := fsm.DBKey(q.DB, e.key)
			if _, seen := queues[string(k)]; !seen {
				queues[string(k)] = waitersOf(v, k)
			}
		}
	})

	page := LockPage{Holders: make([]LockHolder, 0, len(entries)), Queues: []KeyQueue{}, Next: "0"}
	if next != nil {
		page.Next = hex.EncodeToString(next)
	}
	for _, e := range entries {
		pttl := time.Duration(-1)
		if e.pttl >= 0 {
			pttl = time.Duration(e.pttl) * time.Millisecond
		}
		page.Holders = append(page.Holders, LockHolder{Key: e.key, Kind: e.kind, Owner: e.owner, Token: e.token, PTTL: pttl})
	}
	for i, h := range page.Holders {
		if i > 0 && bytes.Equal(page.Holders[i-1].Key, h.Key) {
			continue // a key's shares and permits are contiguous in the table: its queue once
		}
		if ws := queues[string(fsm.DBKey(q.DB, h.Key))]; len(ws) > 0 {
			page.Queues = append(page.Queues, KeyQueue{Key: h.Key, Waiters: ws})
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
