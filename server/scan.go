package server

// KEYS and SCAN: listing a database's keys. SCAN's cursor must be a number (clients parse it
// as one) while the table is ordered by key, so a cursor names an entry of the node's cursor
// table, which remembers where its iteration resumes: every key present for the whole
// iteration is returned once, whatever is added or removed meanwhile. The table is bounded
// (oldest cursors go first) and local to the node that serves SCAN (the leader, or a READONLY
// follower): an unknown cursor is refused, and the client starts again at 0.

import (
	"math/rand/v2"
	"strconv"
	"sync"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

const (
	// maxCursors bounds the SCAN iterations a node remembers.
	maxCursors = 4096
	// maxScanCount bounds the keys one SCAN or KEYS looks at: it holds the view lock while it
	// does.
	maxScanCount = 100000
)

// cursors maps SCAN cursors to where their iteration resumes, keeping the newest maxCursors.
type cursors struct {
	mu struct {
		sync.Mutex
		next fifoMap[uint64, scanPosition]
	}
}

type scanPosition struct {
	db   int
	from []byte // the table key to resume at
}

func newCursors() *cursors { return &cursors{} }

// save remembers p under a new cursor, forgetting the oldest one past maxCursors.
func (cs *cursors) save(p scanPosition) uint64 {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	id := rand.Uint64()>>1 | 1 // never 0, and within int64 for clients that parse it so
	for _, taken := cs.mu.next.get(id); taken; _, taken = cs.mu.next.get(id) {
		id = rand.Uint64()>>1 | 1
	}
	cs.mu.next.put(id, p, maxCursors)
	return id
}

// put remembers p under id again (a SCAN that failed after taking it), as the newest.
func (cs *cursors) put(id uint64, p scanPosition) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.mu.next.put(id, p, maxCursors)
}

// take returns and forgets cursor id's position.
func (cs *cursors) take(id uint64) (scanPosition, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.mu.next.take(id)
}

// KEYS pattern -> every key of the database that matches (in key order; Redis's order is its
// hash table's).
func cmdKeys(r *request) {
	pattern := compileGlob(r.args[1], r.s.cfg.MaxKeyBytes) // before the view lock
	var (
		keys [][]byte
		more []byte
	)
	var err error
	if r.spans {
		keys, more = r.s.spanKeys(r.db, []byte{byte(r.db)}, maxScanCount, pattern, nil)
	} else {
		_, err = r.exec(nil, func(v node.View) []fsm.Command {
			keys, more = listKeys(v, r.db, []byte{byte(r.db)}, maxScanCount, pattern, nil)
			return nil
		})
	}
	switch {
	case err != nil:
		r.replyError(err)
		return
	case more != nil:
		// It would hold the view lock, and build a reply, for the whole database.
		r.w.Error("ERR KEYS would look at more than " + itoa(maxScanCount) + " keys: use SCAN")
		return
	}
	r.w.Array(len(keys))
	for _, k := range keys {
		r.w.Bulk(k)
	}
}

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type] -> [next cursor, keys].
func cmdScan(r *request) {
	cur, err := strconv.ParseUint(string(r.args[1]), 10, 64)
	if err != nil {
		r.w.Error("ERR invalid cursor")
		return
	}
	var (
		pattern *glob
		count   int64 = 10
		typ     []byte
	)
	for j := 2; j < len(r.args); j += 2 {
		if j+1 >= len(r.args) {
			r.w.Error(errSyntax)
			return
		}
		switch a, v := r.args[j], r.args[j+1]; {
		case is(a, "match"):
			pattern = compileGlob(v, r.s.cfg.MaxKeyBytes) // before the view lock
		case is(a, "count"):
			n, ok := parseInt(v)
			switch {
			case !ok:
				r.w.Error(errNotInt)
				return
			case n < 1:
				r.w.Error(errSyntax)
				return
			}
			count = min(n, maxScanCount)
		case is(a, "type"):
			typ = v
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	pos := scanPosition{db: r.db, from: []byte{byte(r.db)}}
	if cur != 0 {
		var ok bool
		if pos, ok = r.s.cursors.take(cur); !ok || pos.db != r.db {
			r.w.Error("ERR invalid cursor: this node does not know it (it expired, or another node served the scan); start again with SCAN 0")
			return
		}
	}
	var (
		keys [][]byte
		next []byte // nil: the iteration is over
	)
	if r.spans {
		keys, next = r.s.spanKeys(r.db, pos.from, count, pattern, typ)
	} else {
		_, err = r.exec(nil, func(v node.View) []fsm.Command {
			keys, next = listKeys(v, r.db, pos.from, count, pattern, typ)
			return nil
		})
	}
	if err != nil {
		if cur != 0 {
			r.s.cursors.put(cur, pos) // the iteration goes on from where it was
		}
		r.replyError(err)
		return
	}
	nextCursor := uint64(0)
	if next != nil {
		nextCursor = r.s.cursors.save(scanPosition{db: r.db, from: next})
	}
	r.w.Array(2)
	r.w.BulkString(strconv.FormatUint(nextCursor, 10))
	r.w.Array(len(keys))
	for _, k := range keys {
		r.w.Bulk(k)
	}
}

// listKeys returns the client keys of database db, from the table key from up, in key order,
// that match pattern (nil: any; compiled before the view lock, so the work under it does not
// grow with the pattern's length) and are of type typ (nil: any), looking at no more than limit
// keys (0: all of them). next is the table key to resume at, nil when none is left.
func listKeys(v node.View, db int, from []byte, limit int64, pattern *glob, typ []byte) (keys [][]byte, next []byte) {
	seen := int64(0)
	v.Ascend(from, func(key []byte, l fsm.Lock) bool {
		if int(key[0]) != db {
			return false
		}
		if limit > 0 && seen == limit {
			next = append([]byte(nil), key...)
			return false
		}
		seen++
		k := userKey(key)
		if (pattern == nil || pattern.match(k)) && (typ == nil || is(typ, l.Type().String())) {
			keys = append(keys, append([]byte(nil), k...))
		}
		return true
	})
	return keys, next
}
