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
	// does not hear it (LogPosition.Holds).
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

// LogPosition is a raft log entry's index and term: where a node's log ended when a client
// subscribed, or which entry an applied message came from.
type LogPosition struct {
	Index, Term uint64
}

// Holds reports whether a log that ended at p (its last entry) held the committed entry at e
// already, so that the entry's messages were published before that moment: e is at or before
// p's index and of p's term or an earlier one. The log held every committed entry up to its end
// that is not of a later term than its last (Raft's log matching: the log agreed with the
// leader of its last entry's term up to there); an acknowledged message's entry committed in its
// own term, before any leader of a later term was elected, so one of an earlier term at an
// index up to p's was published before that moment too. An entry of a later term at such an
// index replaced what the log held: it is new. The zero position holds nothing.
func (p LogPosition) Holds(e LogPosition) bool {
	return e.Index <= p.Index && e.Term <= p.Term
}
