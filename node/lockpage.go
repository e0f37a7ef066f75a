package node

// The locks view of the status page (ops: /locks.json), which the server serves
// (server.Server.LockPage): its query and its page, here so that ops needs no server.

import (
	"errors"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// MaxLockPageCount bounds LockPageQuery.Count: the table entries one page walks under the view
// lock, and so the holders it lists.
const MaxLockPageCount = 100

// ErrInvalidLockQuery is wrapped by LockPage's error for a query it cannot serve: its text
// names the field.
var ErrInvalidLockQuery = errors.New("invalid lock page query")

// ErrUnknownUser is wrapped by LockPage's error when LockPageQuery.User is not a user in force
// (deleted since the caller authenticated it).
var ErrUnknownUser = errors.New("no such user")

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
	// Queues are the replicated queues of the keys among Holders that have waiters, in the order
	// their keys first appear in Holders.
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
	// Since is when the holder was granted it, on the leader's clock, and Node the ID of the
	// node its client asked through (fsm.Lock.Since, Origin): zero and "" when not recorded (a
	// key written by SET, a lock granted before log format 6).
	Since time.Time
	Node  string
}

// KeyQueue is the requests waiting on Key, in the order they will be served (LOCKWAITERS).
type KeyQueue struct {
	Key     []byte
	Waiters []LockWaiter
}

// LockWaiter is one request waiting in a key's queue (LOCKWAITERS, the status page's locks view).
type LockWaiter struct {
	Owner []byte
	// Kind is "lock", "shared", "semaphore" or "mlock".
	Kind string
	// Place is its place: the queue's order, the same on every node.
	Place fsm.Token
	// Waited is how long it has waited, and Left how long it will still wait, on this node's
	// lease clock (its wait is its waiter's lease).
	Waited, Left time.Duration
	// Since is when it queued, on the leader's clock, and Node the ID of the node its client
	// is on: zero and "" when not recorded (a waiter queued before log format 6).
	Since time.Time
	Node  string
}
