// Package node is the vocabulary the client face (server) and the replicated node (raftnode)
// share: the view a request is evaluated against and the evaluation function, the hooks a node
// tells of what it applied (watch.go), the cluster's members, the errors a node answers with,
// and its typed figures. Both sides import it; it imports only fsm (etcd keeps such a leaf in
// server/etcdserver/errors), so neither side needs the other and no error is recognised by its
// text or by duck typing.
package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// View is what a request sees while the leader evaluates it: the applied table plus, for each
// held key, how much of its lease this node's timer says is left. raftnode implements it; the
// server reads through it. It exists only during one evaluation and must not be retained.
type View interface {
	// Lookup returns the lock on key and its remaining lease (0 when it has no lease).
	Lookup(key []byte) (l fsm.Lock, remaining time.Duration, held bool)
	// Len is the number of keys of database db (DBSIZE). Keys are table keys (fsm.DBKey).
	Len(db int) int
	// Ascend calls fn for each held key from the table key from up, in key order, with its
	// lock, while fn returns true (KEYS, SCAN). key is only valid during the call.
	Ascend(from []byte, fn func(key []byte, l fsm.Lock) bool)
	// Kinds returns what key holds beside a plain lock (fsm.Machine.Kinds: shared or semaphore
	// holders, a lock-delay) and the time left of its lock-delay.
	Kinds(key []byte) (k fsm.Kinds, delayLeft time.Duration)
	// Holders calls fn with each shared or semaphore holder of key and its remaining lease, in
	// token order, while fn returns true.
	Holders(key []byte, fn func(l fsm.Lock, remaining time.Duration) bool)
	// Waiters calls fn with each waiter of key's queue and its remaining wait, in order, while fn
	// returns true (fsm.Machine.Waiters).
	Waiters(key []byte, fn func(w fsm.Waiter, remaining time.Duration) bool)
	// QueuedKeys calls fn with every key that has waiters, in key order, while fn returns true.
	QueuedKeys(fn func(key []byte) bool)
	// Script returns the stored source of a script by its SHA1 hex digest.
	Script(sha string) (string, bool)
	// ScriptCache is how many scripts are stored and the bytes of their sources.
	ScriptCache() (scripts, bytes int)
	// User returns the replicated record of ACL user name: its canonical rules, "" when it was
	// deleted; ok false when no ACL SETUSER or DELUSER named it (fsm.Machine.User).
	User(name string) (rules string, ok bool)
	// Users returns a copy of every replicated ACL user's record: name -> canonical rules, ""
	// for a deleted user (fsm.Machine.Users).
	Users() map[string]string
	// Libraries are the stored function libraries (fsm.Machine.Libraries): immutable, so the
	// caller may keep them past the evaluation.
	Libraries() *fsm.Libraries
	// Format is the log format the cluster is in, as far as this node has applied
	// (fsm.Machine.Format): which commands every member can decode.
	Format() byte
	// Slots is the group's ownership of the hash slots, as applied (fsm.Machine.Slots).
	Slots() fsm.Slots
}

// Eval turns a request into the commands to replicate, looking at a view. Returning none makes
// the request a read or a refusal. It runs under the view lock: it must be quick, must not
// block, and may run more than once (again after waiting on a pending key), so it must reset
// whatever it records each time.
type Eval func(v View) []fsm.Command

// Pending is a request a node has evaluated and queued but not yet seen through (the server's
// Node.ProposeAll): a caller that proposes several before it waits for any, on one goroutine,
// keeps their order in the log and pays no goroutine per request.
type Pending interface {
	// Done is closed once Wait will not block; nil when the outcome is not a channel's (a read
	// waiting for its leadership check), and then Wait may block.
	Done() <-chan struct{}
	// Wait returns what Exec would have: the applied results of the request's commands in
	// order, or its error. It must be called exactly once: a lock granted to a client that has
	// hung up is released only by it, and the LOCK ... WAIT waiters the request granted hear
	// only then. (The request's keys are no longer in flight once it applied, whether or not
	// Wait was called: a caller may propose more before it waits, and so may others.)
	Wait() ([]fsm.Result, error)
}

// Proposal is one request of several proposed together, in order (the server's
// Node.ProposeAll): its keys and evaluation, as Propose takes them, and what Propose would
// have returned.
type Proposal struct {
	Keys    [][]byte
	Eval    Eval
	Pending Pending
	Err     error
}

// KeyEvent is what an applied entry did to a key, for keyspace notifications
// (notify-keyspace-events): every node reports the events of the entries it applies.
type KeyEvent uint8

const (
	// KeyDeleted: a DEL, UNLINK, GETDEL, UNLOCK or an emptied collection removed the key.
	KeyDeleted KeyEvent = iota + 1
	// KeyExpired: the key's lease ran out (a committed Expire removed it).
	KeyExpired
)

// KeyEventOf is the keyspace event an applied command's result is, 0 for none.
func KeyEventOf(c fsm.Command, r fsm.Result) KeyEvent {
	switch {
	case fsm.Hidden(c.Key):
		return 0 // a share's, a permit's or a lock-delay's: no Redis key
	case r.Status == fsm.StatusReleased, r.Status == fsm.StatusWritten && r.Existed && c.Value == nil:
		return KeyDeleted
	case r.Status == fsm.StatusExpired && r.Existed:
		return KeyExpired
	}
	return 0
}

// LockEnd is how an applied entry ended a lock (fsm.Result.Ended), for lost-lock notices:
// every node reports the ends of the entries it applies.
type LockEnd uint8

const (
	// LockReleased: a release freed it: an UNLOCK, or a DEL, GETDEL or script deleting the
	// key (each is a release by the token its proposer saw).
	LockReleased LockEnd = iota + 1
	// LockExpired: its lease ran out (a committed Expire).
	LockExpired
	// LockDeleted: a write removed the key without a release (a holder hears a release by
	// anyone but itself as this too).
	LockDeleted
	// LockOverwritten: a SET (or LOCK, after a lease ended in the same entry) gave the key to
	// another holder, or a write replaced it with another type.
	LockOverwritten
	// LockFlushed: a FLUSHDB or FLUSHALL removed it.
	LockFlushed
	// LockUnknown: the node installed a snapshot whose table no longer has it: the entries that
	// ended it were never applied on this node.
	LockUnknown
)

// String is the reason's name in a lock-lost notice.
func (e LockEnd) String() string {
	switch e {
	case LockReleased:
		return "released"
	case LockExpired:
		return "expired"
	case LockDeleted:
		return "deleted"
	case LockOverwritten:
		return "overwritten"
	case LockFlushed:
		return "flushed"
	case LockUnknown:
		return "unknown"
	}
	return "unknown"
}

// LockEndOf is how an applied command whose result ended a lock ended it.
func LockEndOf(c fsm.Command) LockEnd {
	switch c.Kind {
	case fsm.KindRelease:
		// UNLOCK, and a DEL, GETDEL or script of a lock key: the proposer guards each with the
		// token it saw, so the log does not tell them apart.
		return LockReleased
	case fsm.KindExpire:
		return LockExpired
	case fsm.KindWrite:
		if c.Value == nil {
			return LockDeleted
		}
	}
	return LockOverwritten
}

// Member is one server of the cluster: its raft configuration entry plus the client address it
// announced (replicated through the log).
type Member struct {
	ID         string
	RaftAddr   string
	ClientAddr string // empty until the member has announced itself
	Voter      bool
	Leader     bool
}

// DiskFault is an error saying a node's disk cannot keep its raft log (store.DiskError
// satisfies it; raftnode passes it on to the server, which answers it with MISCONF): DiskFull
// reports a full disk, which refuses writes until space is freed and wrote nothing, rather
// than a failed one, which stopped the node acknowledging writes until it is restarted.
type DiskFault interface {
	error
	DiskFull() bool
}

var (
	// ErrUncertain means a proposal was made but the node cannot tell whether it committed: it
	// lost leadership or shut down while waiting. The client must not take it as "not granted".
	ErrUncertain = errors.New("node: outcome unknown")
	// ErrShutdown means the node is closing and takes no more requests.
	ErrShutdown = errors.New("node: shutting down")
	// ErrNoSuchMember means an ID is not in the cluster's configuration.
	ErrNoSuchMember = errors.New("no such member")
	// ErrQuorumAtRisk means a membership change was refused because it would leave fewer
	// reachable voters than a quorum (etcd's strict reconfiguration check).
	ErrQuorumAtRisk = errors.New("membership change refused: it would leave fewer reachable voters than a quorum")
	// ErrLiveVoter means a voter the leader reaches was not removed: removing a live, healthy
	// voter needs FORCE (RAFT REMOVE id FORCE).
	ErrLiveVoter = errors.New("membership change refused: the voter is live")
	// ErrNotCaughtUp means a non-voter was not promoted: it has not shown it holds the log up
	// to near the leader's last entry.
	ErrNotCaughtUp = errors.New("not caught up")
	// ErrForeignCluster means a node belongs to another cluster than the one it was to join.
	ErrForeignCluster = errors.New("node belongs to another cluster")
	// ErrNotMember means an announcement came for a node, or a raft address, that the
	// committed configuration does not hold.
	ErrNotMember = errors.New("not a member")
	// ErrPlanNotRun means a membership change waits for every member to run the raft groups
	// its cluster planned (RAFT GROUPS): a node restarting into the plan starts the groups it
	// added with the plan's voters.
	ErrPlanNotRun = errors.New("the cluster's members change only once every member runs the raft groups it planned")
	// ErrMemberTable means a member's client address was not recorded: it is too long, or the
	// replicated member table is full.
	ErrMemberTable = errors.New("member address refused")
)

// SlotError means a request's keys are in a hash slot its raft group does not serve now
// (docs/groups.md, "Moving slots"): Frozen while a move of the slot is in flight, else moved
// away. Nothing applied; the request belongs to whichever group serves the slot once the move
// ends.
type SlotError struct{ Frozen bool }

func (e *SlotError) Error() string {
	if e.Frozen {
		return "node: the key's hash slot is moving to another raft group"
	}
	return "node: the key's hash slot is served by another raft group"
}

// NotLeaderError means the node is not a leader ready to serve: nothing was proposed. LeaderID
// and LeaderAddr (raft address) name the leader it knows of, empty when none is known (or when
// it is itself the leader, still catching up after its election).
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "node: no leader"
	}
	return fmt.Sprintf("node: not leader (leader is %s at %s)", e.LeaderID, e.LeaderAddr)
}

// Membership is a node's answer to whether a member is in the newest configuration it knows
// to be committed (RAFT MEMBER): a removed node that never applied its removal asks the leader.
type Membership struct {
	LeaderReady bool   // the answering node is the ready leader
	Known       bool   // it has seen a committed configuration
	ConfigIndex uint64 // that configuration's log index
	Member      bool   // the member is in it
}

// ErrOlderMembers means a write needs a log format that a member of the cluster, still running
// an older raftlock, cannot read: the rolling upgrade must finish first (fsm/format.go).
var ErrOlderMembers = errors.New("this write needs every member of the cluster to run this raftlock version or newer, " +
	"and the cluster is still in an older version's log format (a rolling upgrade is under way, or a member " +
	"has not been reached yet): finish upgrading every member, then retry")

// ErrOlderBinary means a member runs a raftlock release too old to read the cluster's log
// format, so it is not promoted to voter.
var ErrOlderBinary = errors.New("member runs an older release")
