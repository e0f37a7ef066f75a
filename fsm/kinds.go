package fsm

// Lock kinds beside the plain lock: shared locks, semaphores and lock-delays (DESIGN.md §7).
//
// A plain lock is its key's entry. A shared lock or a semaphore has any number of holders, each
// with its own token, owner and lease, so each holder is an entry of its own, and so is the
// key's count of holders (its marker) and a lock-delay in force. They live in the table under
// hidden keys that start with kindsPrefix, a byte no database's key starts with, so nothing of
// the Redis surface sees them (SCAN, KEYS, DBSIZE walk the databases' ranges only) and every
// lease, timer, expiry, renewal, ghost release and snapshot works on them as on any entry:
//
//	marker:  kindsPrefix, db, len(key) as 4 bytes big-endian, key
//	delay:   marker's bytes, 'd'
//	holder:  marker's bytes, the holder's token as 8 bytes big-endian
//
// so every hidden entry of one key is contiguous, its holders in token order, and the suffix's
// length tells the three apart. A database's hidden entries are contiguous too (FLUSHDB).
//
// A marker is an entry without a lease whose Owner holds the permit count (0: a shared lock) and
// the holder count as uvarints, and whose Token is its first holder's (a snapshot refuses a
// token of 0). A lock-delay is an entry whose lease is the delay and whose Token is the token
// of the holder whose lease expired.

import (
	"encoding/binary"
	"unsafe"
)

// kindsPrefix begins every hidden key of the lock kinds.
const kindsPrefix = 0xFE

// MaxPermits bounds a semaphore's permits and a shared lock's holders: a key's holders are
// listed whole by LOCKINFO and walked by an OWNER's retry, so they cannot be unbounded.
const MaxPermits = 1 << 16

// MaxDelayMs bounds a lock-delay (Consul bounds its own to 60 s): a key refused for longer than
// a minute after a silent holder is a key lost to an outage, not a safety margin.
const MaxDelayMs = 60 * 1000

const (
	kindsHead   = 1 + 1 + 4 // prefix, db, key length
	delaySuffix = 'd'
	tokenLen    = 8
)

// appendKindsKey appends the marker key of the table key key (db byte first) to dst.
func appendKindsKey(dst []byte, key []byte) []byte {
	dst = append(dst, kindsPrefix, key[0])
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(key)-1))
	return append(dst, key[1:]...)
}

// MarkerKey is the hidden key of key's holder count (key: a table key).
func MarkerKey(key []byte) []byte {
	return appendKindsKey(make([]byte, 0, kindsHead+len(key)-1), key)
}

// DelayKey is the hidden key of key's lock-delay.
func DelayKey(key []byte) []byte {
	return append(appendKindsKey(make([]byte, 0, kindsHead+len(key)), key), delaySuffix)
}

// HolderKey is the hidden key of the holder of key with token t.
func HolderKey(key []byte, t Token) []byte {
	return binary.BigEndian.AppendUint64(appendKindsKey(make([]byte, 0, kindsHead+len(key)-1+tokenLen), key), uint64(t))
}

// Hidden reports whether key is one of the lock kinds' hidden keys.
func Hidden(key []byte) bool { return len(key) > 0 && key[0] == kindsPrefix }

// splitKinds returns the table key a hidden key belongs to and its suffix; ok is false for a key
// that is not a well-formed hidden key.
func splitKinds(k string) (base string, suffix string, ok bool) {
	if len(k) < kindsHead || k[0] != kindsPrefix {
		return "", "", false
	}
	n := int(binary.BigEndian.Uint32([]byte(k[2:6])))
	if n > len(k)-kindsHead {
		return "", "", false
	}
	return k[1:2] + k[kindsHead:kindsHead+n], k[kindsHead+n:], true
}

// HolderOf returns the table key and the token of the holder whose hidden key is k; ok is
// false when k is not a holder's key (a plain key, a marker, a lock-delay).
func HolderOf(k []byte) (key []byte, t Token, ok bool) {
	base, suffix, ok := splitKinds(unsafe.String(unsafe.SliceData(k), len(k)))
	if !ok || len(suffix) != tokenLen {
		return nil, 0, false
	}
	return []byte(base), Token(binary.BigEndian.Uint64([]byte(suffix))), true
}

// BaseKey is the table key a key's changes concern: the key itself, or for a hidden key the key
// it belongs to (a holder's release frees a permit of that key, a lock-delay's end frees it).
func BaseKey(k []byte) []byte {
	if !Hidden(k) {
		return k
	}
	base, _, ok := splitKinds(string(k))
	if !ok {
		return k
	}
	return []byte(base)
}

// LeaseKey is the key whose lease the result r of cmd set, the one to arm a timer for: an
// Acquire's holder, an Expire's lock-delay (r.LeaseMs > 0), else the command's own key.
func LeaseKey(cmd Command, r Result) []byte {
	switch {
	case cmd.Kind == KindAcquire && r.Status == StatusGranted:
		return HolderKey(cmd.Key, r.Token)
	case cmd.Kind == KindServe && r.Status == StatusGranted:
		return serveKey(cmd, r)
	case cmd.Kind == KindEnqueue && r.Status == StatusQueued:
		return WaiterKey(cmd.Key, r.Token)
	case cmd.Kind == KindExpire && r.LeaseMs > 0:
		base, _, ok := splitKinds(string(cmd.Key))
		if !ok {
			return DelayKey(cmd.Key)
		}
		return DelayKey([]byte(base))
	}
	return cmd.Key
}

// Kinds is what a key holds beside a plain lock, for a proposer and for LOCKINFO.
type Kinds struct {
	// Holders and Permits: the key's shared or semaphore holders and its permit count (0: a
	// shared lock); Holders is 0 when it has none.
	Holders, Permits uint64
	// Delay is the lock-delay in force (a Lock whose lease is what is left of it), when Delayed.
	Delay   Lock
	Delayed bool
	// Waiting: requests wait in the key's queue (queues.go); one that does not wait must not
	// take the key ahead of them.
	Waiting bool
}

// Blocks reports whether k refuses a plain lock's grant: someone holds a share or a permit, or a
// lock-delay is in force.
func (k Kinds) Blocks() bool { return k.Holders > 0 || k.Delayed }

// Kinds returns what key (a table key) holds beside a plain lock. While no key has any, it costs
// a counter's read.
func (m *Machine) Kinds(key []byte) Kinds {
	k := m.holdersAndDelay(key)
	if m.anyKinds() && len(key) > 0 {
		k.Waiting = m.head(key) != 0
	}
	return k
}

// holdersAndDelay is Kinds without Waiting, which a grant at apply does not ask (the queue's
// order is the proposer's to keep), so applying one walks no queue.
func (m *Machine) holdersAndDelay(key []byte) Kinds {
	var k Kinds
	if !m.anyKinds() || len(key) == 0 {
		return k
	}
	var buf [64]byte
	mk := appendKindsKey(buf[:0], key)
	if l, ok := m.table.Get(string(mk)); ok {
		k.Permits, k.Holders = decodeMarker(l)
	}
	if l, ok := m.table.Get(string(append(mk, delaySuffix))); ok {
		k.Delay, k.Delayed = l, true
	}
	return k
}

// Holders calls fn with each holder of key's shared lock or semaphore, in token order, while fn
// returns true.
func (m *Machine) Holders(key []byte, fn func(l Lock) bool) {
	if !m.anyKinds() {
		return
	}
	prefix := string(appendKindsKey(nil, key))
	m.table.Ascend(prefix, func(k string, l Lock) bool {
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			return false
		}
		if len(k) == len(prefix)+tokenLen {
			return fn(l)
		}
		return true // the marker, the lock-delay
	})
}

// AnyKinds reports whether any key holds more than a plain lock (a share, a permit, a
// lock-delay or a waiter): while none does, no key has anyone waiting, which a caller can know
// for a counter's read instead of a lookup per key.
func (m *Machine) AnyKinds() bool { return m.anyKinds() }

// anyKinds reports whether the table holds any hidden entry.
func (m *Machine) anyKinds() bool {
	keys, _ := m.counts.of(kindsPrefix)
	return keys > 0
}

// decodeMarker reads a marker's permit and holder counts.
func decodeMarker(l Lock) (permits, holders uint64) {
	permits, n := binary.Uvarint(l.Owner)
	if n <= 0 {
		return 0, 0
	}
	holders, _ = binary.Uvarint(l.Owner[n:])
	return permits, holders
}

// marker is the entry of a key's permit and holder counts.
func marker(permits, holders uint64, t Token) Lock {
	owner := binary.AppendUvarint(nil, permits)
	return Lock{Owner: binary.AppendUvarint(owner, holders), Token: t}
}

// acquire applies an Acquire (KindAcquire).
func (m *Machine) acquire(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	if cur, held := m.table.Get(key); held {
		return Result{Status: StatusGrantRejected, Token: cur.Token}
	}
	k := m.holdersAndDelay(cmd.Key)
	switch {
	case k.Delayed:
		return Result{Status: StatusGrantRejected, Token: k.Delay.Token}
	case k.Holders > 0 && k.Permits != cmd.Permits,
		cmd.Permits > 0 && k.Holders >= cmd.Permits,
		k.Holders >= MaxPermits:
		return Result{Status: StatusGrantRejected}
	}
	t := m.nextToken(index)
	owner := append([]byte{}, cmd.Owner...)
	m.set(string(HolderKey(cmd.Key, t)), Lock{Owner: owner, Token: t, LeaseRev: index, LeaseMs: cmd.LeaseMs,
		Deadline: m.deadline(cmd.LeaseMs), Delay: cmd.Delay, Since: cmd.Since, Origin: cmd.Origin})
	mk := string(MarkerKey(cmd.Key))
	first := t
	if cur, ok := m.table.Get(mk); ok {
		first = cur.Token
	}
	m.set(mk, marker(cmd.Permits, k.Holders+1, first))
	return Result{Status: StatusGranted, Token: t, LeaseRev: index, LeaseMs: cmd.LeaseMs, Holder: true}
}

// blockedByKinds reports whether key, free of a plain lock, refuses one's grant (a LOCK, a SET
// NX): shared or semaphore holders hold it, or a lock-delay is in force. The token is theirs.
func (m *Machine) blockedByKinds(key []byte) (Token, bool) {
	k := m.holdersAndDelay(key)
	switch {
	case k.Delayed:
		return k.Delay.Token, true
	case k.Holders > 0:
		return 0, true
	}
	return 0, false
}

// ended keeps the lock kinds' books after the lock l at key left the table: a holder's marker
// counts one holder less (and goes with the last), and a lease that expired on a lock with a
// lock-delay starts the delay (expired at the entry at index). It returns the length of the
// lock-delay it started, 0 for none.
func (m *Machine) ended(index uint64, key string, l Lock, expired bool) (delay uint64) {
	base := key
	if key[0] == kindsPrefix {
		b, suffix, ok := splitKinds(key)
		if !ok || len(suffix) != tokenLen {
			return 0 // a marker or a lock-delay: nothing counts them
		}
		base = b
		mk := string(MarkerKey([]byte(base)))
		if cur, ok := m.table.Get(mk); ok {
			permits, holders := decodeMarker(cur)
			if holders <= 1 {
				m.del(mk)
			} else {
				m.set(mk, marker(permits, holders-1, cur.Token))
			}
		}
	}
	if !expired || l.Delay == 0 {
		return 0
	}
	// A delay in force goes on at least as long as it was to: a shorter one after it (another
	// share's expiry) must not end it early. Its new lease runs from now, so it ends late,
	// never early.
	delay = l.Delay
	dk := string(DelayKey([]byte(base)))
	if cur, ok := m.table.Get(dk); ok {
		delay = max(delay, cur.LeaseMs)
	}
	m.set(dk, Lock{Owner: []byte{}, Token: l.Token, LeaseRev: index, LeaseMs: delay, Deadline: m.deadline(delay)})
	return delay
}

// IsLockKey reports whether key is a lock's: a plain key, or a holder's hidden key. A marker's,
// a lock-delay's or a waiter's end is no lock's end (no lost-lock notice).
func IsLockKey(key string) bool {
	if key == "" || key[0] != kindsPrefix {
		return true // a plain key
	}
	_, suffix, ok := splitKinds(key)
	return ok && len(suffix) == tokenLen
}

// KindsFrom is where the hidden entries of database db begin, for an Ascend over them
// (Hidden tells where they end: the next database's).
func KindsFrom(db byte) string { return string([]byte{kindsPrefix, db}) }

// flushKinds deletes the hidden entries of database db.
func (m *Machine) flushKinds(db byte) bool {
	if !m.anyKinds() {
		return false
	}
	var doomed []string
	m.table.Ascend(string([]byte{kindsPrefix, db}), func(k string, _ Lock) bool {
		if len(k) < 2 || k[0] != kindsPrefix || k[1] != db {
			return false
		}
		if !isWaiterKey(k) { // requests that wait are not keys: they wait on
			doomed = append(doomed, k)
		}
		return true
	})
	for _, k := range doomed {
		m.del(k)
	}
	return len(doomed) > 0
}

// saveKinds records, for an entry that may need undoing, the hidden entries cmd may change
// beside its own key: the marker and lock-delay of the key it concerns.
func (u *undoLog) saveKinds(m *Machine, cmd Command) {
	if cmd.Kind != KindAcquire && cmd.Kind != KindExpire && !Hidden(cmd.Key) {
		return
	}
	base := BaseKey(cmd.Key)
	if len(base) == 0 || Hidden(base) {
		return
	}
	keys := []string{string(MarkerKey(base)), string(DelayKey(base))}
	if cmd.Kind == KindServe {
		keys = append(keys, string(base)) // a plain lock's grant
	}
	for _, k := range keys {
		r := undoRecord{kind: KindGrant, key: k}
		r.lock, r.present = m.table.Get(k)
		u.records = append(u.records, r)
	}
}

// savedKinds records the holder an applied Acquire added, so a rollback takes it out.
func (u *undoLog) savedKinds(cmd Command, r Result) {
	switch {
	case r.Holder && r.Status == StatusGranted:
		u.records = append(u.records, undoRecord{kind: KindGrant, key: string(LeaseKey(cmd, r))})
	case cmd.Kind == KindEnqueue && r.Status == StatusQueued:
		u.records = append(u.records, undoRecord{kind: KindGrant, key: string(WaiterKey(cmd.Key, r.Token))})
	}
}
