package fsm

// Replicated lock queues: a request that waits for a lock (LOCK, SEMACQUIRE or MLOCK with WAIT)
// is a waiter entry in the table, under a hidden key beside its key's shares (kinds.go):
//
//	waiter: marker's bytes, 'q', its place as 8 bytes big-endian
//
// so a key's waiters are contiguous and in queue order. Its place is a value of the token counter
// taken when its Enqueue applied: the order of the log, the same on every node, and across keys
// (an MLOCK's waiter has the same place in each of its keys' queues, so every queue orders any
// two waiters alike). Its Owner is the request (EncodeWaiter); its lease is its wait, ended by a
// committed expiry like any lease (the waiter gives up). A Serve grants the head of a queue what
// it asked for and takes it out, in one command; a Release of the waiter's key takes it out
// without a grant (its client hung up). Since the queue is part of the state, a new leader grants
// in the same order, and a client that waits on a follower is answered there, from the entries
// that follower applies.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const queueSuffix = 'q'

// WaiterMode is what a waiter asks for.
type WaiterMode uint8

// Waiter modes. Values are part of the log encoding: never renumber.
const (
	WaitLock   WaiterMode = 0 // a plain lock (LOCK, one key of an MLOCK)
	WaitShared WaiterMode = 1 // a share (LOCK ... SHARED)
	WaitPermit WaiterMode = 2 // a permit of a semaphore of Permits (SEMACQUIRE)
)

// WaiterRequest is what a waiter asks for, kept in its entry so that whichever leader grants it
// grants the same.
type WaiterRequest struct {
	Mode    WaiterMode
	TTL     uint64 // the lease its lock gets, ms
	Permits uint64 // WaitPermit's count
	Delay   uint64 // the lock-delay of its lock, ms
	Owner   []byte
	// Keys are an MLOCK's keys (table keys, in its order), every one of which it waits for at
	// once; nil for a request of one key.
	Keys [][]byte
}

// maxWaiterKeys bounds an MLOCK waiter's keys (the server takes at most 64).
const maxWaiterKeys = 1024

// EncodeWaiter is the Owner of an Enqueue of q.
func EncodeWaiter(q WaiterRequest) []byte {
	b := []byte{byte(q.Mode)}
	b = binary.AppendUvarint(b, q.TTL)
	b = binary.AppendUvarint(b, q.Permits)
	b = binary.AppendUvarint(b, q.Delay)
	b = appendBytes(b, q.Owner)
	b = binary.AppendUvarint(b, uint64(len(q.Keys)))
	for _, k := range q.Keys {
		b = appendBytes(b, k)
	}
	return b
}

var errWaiter = errors.New("fsm: malformed waiter request")

// DecodeWaiter reads what EncodeWaiter wrote; the byte slices alias b.
func DecodeWaiter(b []byte) (WaiterRequest, error) {
	if len(b) == 0 || b[0] > byte(WaitPermit) {
		return WaiterRequest{}, errWaiter
	}
	d := decoder{b: b[1:]}
	q := WaiterRequest{Mode: WaiterMode(b[0])}
	q.TTL, q.Permits, q.Delay = d.uvarint(), d.uvarint(), d.uvarint()
	q.Owner = d.bytes()
	n := d.uvarint()
	if d.err == nil && n > maxWaiterKeys {
		return WaiterRequest{}, errWaiter
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		q.Keys = append(q.Keys, d.bytes())
	}
	switch {
	case d.err != nil, len(d.b) != 0, q.TTL == 0, q.Mode == WaitPermit && (q.Permits == 0 || q.Permits > MaxPermits),
		q.Mode != WaitPermit && q.Permits != 0, q.Delay > MaxDelayMs, len(q.Keys) > 0 && q.Mode != WaitLock:
		return WaiterRequest{}, fmt.Errorf("%w", errWaiter)
	}
	for _, k := range q.Keys {
		if len(k) == 0 || k[0] >= Databases {
			return WaiterRequest{}, errWaiter
		}
	}
	return q, nil
}

// WaiterKey is the hidden key of the waiter at place seq in key's queue.
func WaiterKey(key []byte, seq Token) []byte {
	b := append(appendKindsKey(make([]byte, 0, kindsHead+len(key)+tokenLen), key), queueSuffix)
	return binary.BigEndian.AppendUint64(b, uint64(seq))
}

// WaiterOf returns the table key and the place of the waiter whose hidden key is k; ok is false
// for any other key.
func WaiterOf(k []byte) (key []byte, seq Token, ok bool) {
	base, suffix, ok := splitKinds(string(k))
	if !ok || len(suffix) != 1+tokenLen || suffix[0] != queueSuffix {
		return nil, 0, false
	}
	return []byte(base), Token(binary.BigEndian.Uint64([]byte(suffix[1:]))), true
}

// isWaiterKey reports whether k is a waiter's hidden key.
func isWaiterKey(k string) bool {
	_, suffix, ok := splitKinds(k)
	return ok && len(suffix) == 1+tokenLen && suffix[0] == queueSuffix
}

// Waiter is one waiter of a queue.
type Waiter struct {
	Seq     Token // its place
	Request WaiterRequest
	Lock    Lock // its entry: its lease is its wait
}

// Waiters calls fn with each waiter of key's queue in order while fn returns true.
func (m *Machine) Waiters(key []byte, fn func(w Waiter) bool) {
	if !m.anyKinds() {
		return
	}
	prefix := string(append(appendKindsKey(nil, key), queueSuffix))
	m.table.Ascend(prefix, func(k string, l Lock) bool {
		if len(k) != len(prefix)+tokenLen || k[:len(prefix)] != prefix {
			return false
		}
		q, err := DecodeWaiter(l.Owner)
		if err != nil {
			return true // never stored: Enqueue validates it
		}
		return fn(Waiter{Seq: l.Token, Request: q, Lock: l})
	})
}

// head is the place of the first waiter of key's queue, 0 when none waits.
func (m *Machine) head(key []byte) Token {
	var seq Token
	m.Waiters(key, func(w Waiter) bool {
		seq = w.Seq
		return false
	})
	return seq
}

// QueuedKeys calls fn with every key (table key) that has waiters, in key order, once each (a
// new leader's look at every queue).
func (m *Machine) QueuedKeys(fn func(key []byte) bool) {
	if !m.anyKinds() {
		return
	}
	var last string
	m.table.Ascend(string([]byte{kindsPrefix}), func(k string, _ Lock) bool {
		if k[0] != kindsPrefix {
			return false
		}
		if !isWaiterKey(k) {
			return true
		}
		base, _, _ := splitKinds(k)
		if base == last {
			return true
		}
		last = base
		return fn([]byte(base))
	})
}

// queuedEntry is a waiter's entry, kept through a FLUSHALL.
type queuedEntry struct {
	key string
	l   Lock
}

// queuedEntries are every waiter's entry.
func (m *Machine) queuedEntries() []queuedEntry {
	var out []queuedEntry
	if !m.anyKinds() {
		return nil
	}
	m.table.Ascend(string([]byte{kindsPrefix}), func(k string, l Lock) bool {
		if k[0] != kindsPrefix {
			return false
		}
		if isWaiterKey(k) {
			out = append(out, queuedEntry{k, l})
		}
		return true
	})
	return out
}

// enqueue applies an Enqueue.
func (m *Machine) enqueue(index uint64, cmd Command) Result {
	seq := m.entrySeq
	if !cmd.KeepLease || seq == 0 {
		if cmd.KeepLease {
			return Result{Status: StatusNotFound} // no waiter of this request to join
		}
		seq = m.nextToken(index)
	}
	m.entrySeq = seq
	m.set(string(WaiterKey(cmd.Key, seq)), Lock{Owner: append([]byte{}, cmd.Owner...), Token: seq, LeaseRev: index,
		LeaseMs: cmd.LeaseMs, Deadline: m.deadline(cmd.LeaseMs), Since: cmd.Since, Origin: cmd.Origin})
	return Result{Status: StatusQueued, Token: seq, LeaseRev: index, LeaseMs: cmd.LeaseMs}
}

// serve applies a Serve: the head waiter of its queue gets what it asked for. One that cannot
// (the waiter left, is not the head, or its lock does not fit) changes nothing; it is a failed
// guard, which undoes its entry, only with KeepLease (an MLOCK's Serves, all or none), else a
// no-op: a Serve rides in the entry of a release or an expiry, which must apply whatever became
// of the waiter meanwhile (it may withdraw, or its wait expire, in the same round).
func (m *Machine) serve(index uint64, cmd Command) Result {
	r := m.serveHead(index, cmd)
	if r.GuardFailed() && !cmd.KeepLease {
		return Result{Status: StatusNoop}
	}
	return r
}

func (m *Machine) serveHead(index uint64, cmd Command) Result {
	wk := string(cmd.Key)
	w, ok := m.table.Get(wk)
	base, _, _ := splitKinds(wk)
	if !ok || w.Token != cmd.Token || m.head([]byte(base)) != cmd.Token {
		return Result{Status: StatusNotFound}
	}
	q, err := DecodeWaiter(w.Owner)
	if err != nil {
		return Result{Status: StatusNotFound}
	}
	// The holder is granted now (the Serve's time) through the node its waiter queued through.
	var r Result
	if q.Mode == WaitLock {
		r = m.grant(index, Command{Kind: KindGrant, Key: []byte(base), Owner: q.Owner, LeaseMs: q.TTL,
			Match: Match{Kind: MatchFree}, Delay: q.Delay, Since: cmd.Since, Origin: w.Origin})
	} else {
		r = m.acquire(index, Command{Kind: KindAcquire, Key: []byte(base), Owner: q.Owner, LeaseMs: q.TTL,
			Permits: q.Permits, Delay: q.Delay, Since: cmd.Since, Origin: w.Origin})
	}
	if r.Status != StatusGranted {
		return r
	}
	m.del(wk)
	r.Served = cmd.Token
	return r
}

// serveKey is the key whose lease a Serve's grant set (LeaseKey): the waiter's key for a plain
// lock, its share's or permit's hidden key otherwise.
func serveKey(cmd Command, r Result) []byte {
	base, _, _ := splitKinds(string(cmd.Key))
	if r.Holder {
		return HolderKey([]byte(base), r.Token)
	}
	return []byte(base)
}
