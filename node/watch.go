package node

import "github.com/raftlock/raftlock/fsm"

// Watchers are the hooks a node tells of what its applied entries did (the server's
// Node.Watch): the client face's invalidations, LOCK ... WAIT wake-ups, subscribers and ACL
// users come from them. Each runs on the node's apply goroutine with no lock held, before the
// applied batch's requests hear back, and must not block. A nil hook is not called.
type Watchers struct {
	// Changed is told of the keys each applied batch changed (nil keys: any may have).
	Changed func(keys [][]byte)
	// Published delivers each applied message (PUBLISH; SPUBLISH: shard) to this node's
	// subscribers and says how many got it. It runs after Changed, in log order; channel and
	// message are only valid during the call. at is the entry that carried it (as for KeyEvent
	// and LockEnded): a subscriber that subscribed when this node's log already held that entry
	// does not hear it (LogEnd.Holds).
	Published func(at LogPosition, channel, message []byte, shard bool) int
	// KeyEvent is told of each key an applied entry deleted or expired (keyspace
	// notifications), in log order with the messages; key is only valid during the call.
	// While it is nil the node records no events at all.
	KeyEvent func(at LogPosition, key []byte, ev KeyEvent)
	// LockEnded is told of each lock an applied entry ended (fsm.Result.Ended: key, the token
	// it had, how), in log order with the messages; key is only valid during the call. A
	// FLUSHDB or FLUSHALL tells it of every lock it removed, which the node finds by walking
	// the database before the flush, and only while LocksWatched says someone listens.
	LockEnded func(at LogPosition, key []byte, token fsm.Token, how LockEnd)
	// LocksWatched reports whether anyone on this node listens to every lock's end, for whom a
	// flush walks its database; nil: no one. It is called with the node's view lock held, and
	// must only read a flag.
	LocksWatched func() bool
	// LocksFlushed is told of each applied FLUSHDB (db: its database's number, one byte) and
	// FLUSHALL (db empty), in log order with the messages, after LockEnded heard of the locks
	// it removed, if LocksWatched asked for them.
	LocksFlushed func(db []byte)
	// Waited is told of each waiter's end (fsm/queues.go), in log order with the messages: seq
	// its place, key its key (an MLOCK's: once per key, all in one batch), token its lock's
	// token when a Serve granted it, 0 when it left the queue without a grant (its wait expired,
	// or it was released). key is only valid during the call.
	Waited func(seq fsm.Token, key []byte, token fsm.Token)
	// Restored is told that a snapshot replaced the node's table: the messages of the entries
	// it covers are never delivered on this node.
	Restored func()
	// UsersChanged is told that the replicated ACL users changed (an ACL SETUSER or DELUSER
	// applied, a snapshot restored), before the batch's requests hear back: the server reads
	// them again (View.Users).
	UsersChanged func()
}

// Leadership is the leader a node knows of, as a request needs it to be served or forwarded.
type Leadership struct {
	// ID and ClientAddr are the leader's ID and the address it serves clients on, empty when
	// unknown.
	ID, ClientAddr string
	// Changed is closed at the next change of the leader, of the node's readiness, or of the
	// member table. It was taken before ID and ClientAddr were read: a request that finds no
	// leader waits on it and misses no change.
	Changed <-chan struct{}
}

// LogPosition is a raft log entry's index and term: which entry an applied message came from.
type LogPosition struct {
	Index, Term uint64
}

// LogEnd is where a node's log ended at one moment (when a client subscribed): its last entry,
// and how far it was known to be committed then.
type LogEnd struct {
	Last      LogPosition
	Committed uint64
}

// Holds reports whether the log held the entry at e at that moment, so that e's messages were
// published before it. It did if e was committed by then (a committed entry is in every later
// log); or if e is at or before the last entry and of its term: only that term's leader makes
// entries of that term, and the log agreed with that leader's up to its last entry (Raft's log
// matching), which kept its own entries. An entry of another term at such an index may be one
// the log did not hold (one of an earlier term that a later leader committed after replacing
// the log's tail, or one of a later term): its messages are delivered. An index past the last
// entry is new; no entry is at index 0.
func (l LogEnd) Holds(e LogPosition) bool {
	return e.Index > 0 && (e.Index <= l.Committed || e.Index <= l.Last.Index && e.Term == l.Last.Term)
}
