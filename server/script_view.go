package server

import (
	"bytes"
	"maps"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// readLog is the view a script runs on outside the view lock (script_optimistic.go): each read
// takes the view lock just for itself (Replica.ExecLocal) and is noted with what it found. Under
// the lock again, valid tells whether every read would find the same now: if so, the script
// run is the one it would have been had it run then, holding the lock throughout (a script is
// a function of what it reads), and its effects and reply stand; if not, it runs again.
//
// Lease time is the one thing not compared exactly: a read notes whether a key's lease had
// ended, not how much of it was left, so a PTTL inside a script is as of when it was read.
type readLog struct {
	node Replica
	// seen indexes locks by key: a key read again is not noted again, and if it is found
	// changed, the run cannot be the one of any single moment (changed).
	seen    map[string]int
	changed bool
	// entries counts what valid will look at; past maxReadLog the log stops (overflow).
	entries  int
	overflow bool
	locks    []lockRead
	lens     []lenRead
	scans    []scanRead
	scripts  []scriptRead
	users    []userRead
	allUsers []map[string]string
	cache    []cacheRead
	kinds    []kindsRead
	// libs is the libraries an FCALL found its function in (nil: none read). They are
	// immutable, replaced by every change: the same ones, or the run is not of this moment.
	libs *fsm.Libraries
}

var _ node.View = (*readLog)(nil)

type lockRead struct {
	key   []byte
	l     fsm.Lock
	held  bool
	ended bool // its lease had run out (held until the expiry applies)
}

type lenRead struct{ db, n int }

// kindsRead is one Kinds: whether the key's shares, permits or lock-delay refused a plain lock.
type kindsRead struct {
	key    []byte
	blocks bool
}

// scanRead is one Ascend: the keys it saw from from on, in order, and whether its callback
// stopped it (rather than the table's end).
type scanRead struct {
	from    []byte
	keys    [][]byte
	locks   []fsm.Lock
	stopped bool
}

type scriptRead struct {
	sha string
	ok  bool
}

type userRead struct {
	name, rules string
	ok          bool
}

type cacheRead struct{ scripts, bytes int }

func newReadLog(n Replica) *readLog { return &readLog{node: n} }

// maxReadLog bounds what the check of a run outside the lock looks at, holding the lock: the
// keys it read and the entries its scans went through (a lookup each, about a microsecond).
const maxReadLog = 10000

func (r *readLog) Lookup(key []byte) (l fsm.Lock, rem time.Duration, held bool) {
	r.node.ExecLocal(func(v node.View) { l, rem, held = v.Lookup(key) })
	read := lockRead{l: l, held: held, ended: leaseEnded(l, rem, held)}
	if i, ok := r.seen[string(key)]; ok {
		if !read.same(r.locks[i]) {
			r.changed = true
		}
		return l, rem, held
	}
	if !r.count(1) {
		return l, rem, held
	}
	if r.seen == nil {
		r.seen = make(map[string]int)
	}
	read.key = bytes.Clone(key)
	r.seen[string(read.key)] = len(r.locks)
	r.locks = append(r.locks, read)
	return l, rem, held
}

// same reports whether two reads of one key found the same.
func (a lockRead) same(b lockRead) bool {
	return a.held == b.held && (!a.held || sameLock(a.l, b.l) && a.ended == b.ended)
}

// count notes n more entries to check, and reports false once there are too many.
func (r *readLog) count(n int) bool {
	if r.entries += n; r.entries > maxReadLog {
		r.overflow = true
	}
	return !r.overflow
}

func leaseEnded(l fsm.Lock, rem time.Duration, held bool) bool {
	return held && l.LeaseMs > 0 && rem <= 0
}

func (r *readLog) Slots() (s fsm.Slots) {
	r.node.ExecLocal(func(v node.View) { s = v.Slots() })
	return s
}

func (r *readLog) Kinds(key []byte) (k fsm.Kinds, left time.Duration) {
	r.node.ExecLocal(func(v node.View) { k, left = v.Kinds(key) })
	if r.count(1) {
		r.kinds = append(r.kinds, kindsRead{key: bytes.Clone(key), blocks: k.Blocks()})
	}
	return k, left
}

// Holders is not logged: a run that lists holders (LOCKINFO of a shared lock) runs again
// holding the lock, where what it reads cannot change under it.
func (r *readLog) Holders(key []byte, fn func(fsm.Lock, time.Duration) bool) {
	r.changed = true
	r.node.ExecLocal(func(v node.View) { v.Holders(key, fn) })
}

// Waiters and QueuedKeys are not logged: a run that reads a queue (LOCKWAITERS) runs again
// holding the lock.
func (r *readLog) Waiters(key []byte, fn func(fsm.Waiter, time.Duration) bool) {
	r.changed = true
	r.node.ExecLocal(func(v node.View) { v.Waiters(key, fn) })
}

func (r *readLog) QueuedKeys(fn func([]byte) bool) {
	r.changed = true
	r.node.ExecLocal(func(v node.View) { v.QueuedKeys(fn) })
}

func (r *readLog) Len(db int) (n int) {
	r.node.ExecLocal(func(v node.View) { n = v.Len(db) })
	r.lens = append(r.lens, lenRead{db: db, n: n})
	return n
}

// Ascend reads the keys under the view lock and calls fn on them as it goes, as the view
// does: fn is the handler's (KEYS, SCAN), quick per key.
func (r *readLog) Ascend(from []byte, fn func(key []byte, l fsm.Lock) bool) {
	s := scanRead{from: bytes.Clone(from)}
	r.node.ExecLocal(func(v node.View) {
		v.Ascend(from, func(key []byte, l fsm.Lock) bool {
			if !r.count(1) {
				return false // the run is refused (overflow): what fn misses does not matter
			}
			s.keys = append(s.keys, bytes.Clone(key))
			s.locks = append(s.locks, l)
			if !fn(key, l) {
				s.stopped = true
				return false
			}
			return true
		})
	})
	r.scans = append(r.scans, s)
}

func (r *readLog) Script(sha string) (src string, ok bool) {
	r.node.ExecLocal(func(v node.View) { src, ok = v.Script(sha) })
	r.scripts = append(r.scripts, scriptRead{sha: sha, ok: ok})
	return src, ok
}

func (r *readLog) ScriptCache() (scripts, size int) {
	r.node.ExecLocal(func(v node.View) { scripts, size = v.ScriptCache() })
	r.cache = append(r.cache, cacheRead{scripts: scripts, bytes: size})
	return scripts, size
}

func (r *readLog) User(name string) (rules string, ok bool) {
	r.node.ExecLocal(func(v node.View) { rules, ok = v.User(name) })
	r.users = append(r.users, userRead{name: name, rules: rules, ok: ok})
	return rules, ok
}

func (r *readLog) Users() (users map[string]string) {
	r.node.ExecLocal(func(v node.View) { users = v.Users() })
	r.allUsers = append(r.allUsers, users)
	return users
}

func (r *readLog) Libraries() (libs *fsm.Libraries) {
	r.node.ExecLocal(func(v node.View) { libs = v.Libraries() })
	if r.libs != nil && r.libs != libs {
		r.changed = true
	}
	r.libs = libs
	return libs
}

// Format is not checked again: a cluster's format only ever grows, and a script's commands
// are judged against the format again when they are proposed (fsm.NeedsFormat).
func (r *readLog) Format() (format byte) {
	r.node.ExecLocal(func(v node.View) { format = v.Format() })
	return format
}

// valid reports whether every read of the log finds the same in v (under the view lock).
func (r *readLog) valid(v node.View) bool {
	if r.changed || r.overflow || r.libs != nil && v.Libraries() != r.libs {
		return false
	}
	for _, x := range r.locks {
		l, rem, held := v.Lookup(x.key)
		if !x.same(lockRead{l: l, held: held, ended: leaseEnded(l, rem, held)}) {
			return false
		}
	}
	for _, x := range r.lens {
		if v.Len(x.db) != x.n {
			return false
		}
	}
	for _, x := range r.kinds {
		if k, _ := v.Kinds(x.key); k.Blocks() != x.blocks {
			return false
		}
	}
	for _, x := range r.scripts {
		if _, ok := v.Script(x.sha); ok != x.ok {
			return false
		}
	}
	for _, x := range r.cache {
		if n, size := v.ScriptCache(); n != x.scripts || size != x.bytes {
			return false
		}
	}
	for _, x := range r.users {
		if rules, ok := v.User(x.name); ok != x.ok || rules != x.rules {
			return false
		}
	}
	for _, x := range r.allUsers {
		if !maps.Equal(v.Users(), x) {
			return false
		}
	}
	for _, x := range r.scans {
		if !x.valid(v) {
			return false
		}
	}
	return true
}

// valid reports whether the same Ascend in v sees the same keys with the same locks, up to
// where the recorded one stopped (or to the end, like it).
func (s *scanRead) valid(v node.View) bool {
	i, same := 0, true
	v.Ascend(s.from, func(key []byte, l fsm.Lock) bool {
		if i == len(s.keys) {
			same = s.stopped // it went on past where the recorded one ended
			return false
		}
		if !bytes.Equal(key, s.keys[i]) || !sameLock(l, s.locks[i]) {
			same = false
			return false
		}
		i++
		return !(s.stopped && i == len(s.keys))
	})
	return same && i == len(s.keys)
}

// sameLock reports whether a and b are the same state of a key: the same holder and token,
// the same lease, the same value (a collection's revision changes with every write to it).
func sameLock(a, b fsm.Lock) bool {
	if a.Token != b.Token || a.LeaseRev != b.LeaseRev || a.LeaseMs != b.LeaseMs || !bytes.Equal(a.Owner, b.Owner) {
		return false
	}
	switch {
	case a.Value == b.Value:
		return true
	case a.Value == nil || b.Value == nil:
		return false
	}
	return a.Value.Type == b.Value.Type && a.Value.Rev == b.Value.Rev && a.Value.Rev != 0
}
