// Package fsm is raftlock's deterministic lock state machine: the replicated commands, their
// results, the compact versioned encoding of both in the raft log, and the lock table with its
// snapshot and restore.
//
// It imports nothing of raftlock's and reads no clock, no randomness and does no I/O besides the
// io.Writer/io.Reader it is handed, so every node that applies the same log computes the same
// table and the same results. Time enters only as relative lease lengths chosen by the leader.
package fsm

import "fmt"

// Token is a fencing token. The Machine assigns it at apply, from a counter it advances for every
// grant that gives a key a new holder (never from the command): a grant in the entry at log index
// i gets max(last+1, i), where last is the largest token handed out before it. So tokens strictly
// increase across every grant of every key, two grants in one entry get two tokens, and every
// node computes the same ones; snapshots carry the counter. The floor at the entry's index is
// what a token was before an entry could hold several commands (the index itself): a log written
// by an older binary replays to exactly the tokens it handed out, and a token is never below the
// index of the entry that granted it.
type Token uint64

// Kind names a replicated command.
type Kind uint8

// The replicated commands (DESIGN.md §3). Values are part of the log encoding: never renumber.
const (
	KindNoop    Kind = 1
	KindGrant   Kind = 2
	KindRelease Kind = 3
	KindRenew   Kind = 4
	KindExpire  Kind = 5
	// KindSetMember records a cluster member's client address (Key = node ID, Owner = address),
	// so every node knows where to forward and redirect clients. Not a lock.
	KindSetMember Kind = 6
	// KindRemoveMember forgets a member's client address (Key = node ID).
	KindRemoveMember Kind = 7
	// KindStoreScript keeps a Lua script (Key = its SHA1 in hex, Owner = its source) so EVALSHA
	// finds it on every node, also after a failover.
	KindStoreScript Kind = 8
	// KindFlushScripts forgets every stored script (SCRIPT FLUSH).
	KindFlushScripts Kind = 9
	// KindPublish delivers a message (Key = channel, Owner = message) to the subscribers on every
	// node, in log order with the changes around it (PUBLISH). It changes no state.
	KindPublish Kind = 10
	// KindShardPublish is KindPublish for shard channels (SPUBLISH, SSUBSCRIBE).
	KindShardPublish Kind = 11
	// KindFlush deletes every key of one database (Key = that database's number, one byte:
	// FLUSHDB) or of all of them (Key empty: FLUSHALL).
	KindFlush Kind = 12
	// KindWrite stores the whole new value of a key that holds (or will hold) a collection:
	// Value, computed by the leader (HSET, ZADD, LPUSH, ...), or the key's deletion when Value is
	// nil (the collection was emptied). Match is Absent (the key is created), Rev (the key holds
	// the collection the leader saw) or Any. A key that held a collection keeps its token; a new
	// one gets a new token. The lease is LeaseMs, or with KeepLease the key's own (none for a new
	// key): HSET keeps a hash's TTL, PERSIST drops it.
	KindWrite Kind = 13
	// KindSetUser stores an ACL user (Key = its name, Owner = its rules in the canonical form
	// ACL LIST prints after the name: "on #<sha256> ~locks:* resetchannels -@all +get"), so every
	// node enforces the same users (ACL SETUSER). The FSM keeps the text; the server parses it.
	KindSetUser Kind = 14
	// KindDelUser deletes an ACL user (Key = its name): it leaves a tombstone, so a user that a
	// node's --aclfile defines stays deleted on every node (ACL DELUSER).
	KindDelUser Kind = 15
	// KindSetCluster names the cluster (Key = its ID, chosen at random by the first leader). The
	// first one applied wins: a later one with another ID is refused (StatusConflict) and changes
	// nothing, so the ID never changes once set. Numbered apart from the kinds above so that
	// kinds added meanwhile on other branches do not collide with it.
	KindSetCluster Kind = 20
	// KindForgetUser deletes an ACL user's record outright (Key = its name), leaving no
	// tombstone: ACL DELUSER sends it for a user no node's configuration defines (the leader's
	// --aclfile and --requirepass are the judge, and every node is to be started with the same
	// ones), so deleting users gives their memory back. Only a FormatBatch cluster carries it.
	KindForgetUser Kind = 21
	// KindStoreLibrary keeps a function library (Key = its name, Owner = its source, shebang
	// line included) so FCALL finds its functions on every node, also after a failover
	// (FUNCTION LOAD, RESTORE). The FSM keeps the text; each node's server runs it to learn
	// the functions. Only a FormatFunctions cluster carries the library kinds.
	KindStoreLibrary Kind = 22
	// KindDeleteLibrary forgets one library (Key = its name: FUNCTION DELETE).
	KindDeleteLibrary Kind = 23
	// KindFlushLibraries forgets every library (FUNCTION FLUSH, RESTORE ... FLUSH).
	KindFlushLibraries Kind = 24
	// KindAcquire takes one holder's place in the shared lock (Permits 0) or the semaphore of
	// Permits permits at Key (a table key), for Owner, with a lease of LeaseMs and a lock-delay
	// of Delay: a holder of its own with its own token (kinds.go). Refused (GrantRejected) while
	// the key is held as a plain lock, within a lock-delay, held with another permit count, or
	// full. Only a FormatFunctions cluster carries it.
	KindAcquire Kind = 25
	// KindEnqueue puts a request that waits for a lock (LOCK, SEMACQUIRE or MLOCK with WAIT) in
	// the queue of Key (a table key), in the replicated state (queues.go), so every node knows
	// the queue and a new leader grants in the same order. Owner is the request
	// (EncodeWaiter); LeaseMs is how long it waits: the waiter's lease, which a committed expiry
	// ends like any lease. Its place (Result.Token) is a new value of the token counter; with
	// KeepLease it joins the waiter the previous Enqueue of its request made (an MLOCK waits
	// once, in the queue of each of its keys). Only a FormatFunctions cluster carries it.
	KindEnqueue Kind = 26
	// KindServe grants the waiter at Key (a waiter's hidden key) whose place is Token what it
	// asked for, and takes it out of its queue: only while it heads its queue and its lock can
	// be granted. Else it changes nothing: a no-op, or with KeepLease (an MLOCK's Serves, all
	// or none) a failed guard (GrantRejected, or NotFound when it waits no more). Only a
	// FormatFunctions cluster carries it.
	KindServe Kind = 27
	// The commands of a slot move (slotmoves.go): Key is EncodeMove of the move, each alone in
	// its entry. FreezeSlots and ReleaseSlots or UnfreezeSlots apply in the move's source group,
	// ImportSlots (Owner = the range's keys, EncodeRange; Token = the fence floor) and
	// AbortSlots in its target. Only a FormatFunctions cluster carries them.
	KindFreezeSlots   Kind = 28
	KindImportSlots   Kind = 29
	KindReleaseSlots  Kind = 30
	KindAbortSlots    Kind = 31
	KindUnfreezeSlots Kind = 32
	// KindPlanGroups commits a plan to run more raft groups (groupsplan.go): Key is
	// EncodeGroupsPlan of it, alone in its entry, in group 0. Only a FormatFunctions cluster
	// carries it.
	KindPlanGroups Kind = 33
)

func (k Kind) String() string {
	switch k {
	case KindNoop:
		return "noop"
	case KindGrant:
		return "grant"
	case KindRelease:
		return "release"
	case KindRenew:
		return "renew"
	case KindExpire:
		return "expire"
	case KindSetMember:
		return "set-member"
	case KindRemoveMember:
		return "remove-member"
	case KindStoreScript:
		return "store-script"
	case KindFlushScripts:
		return "flush-scripts"
	case KindPublish:
		return "publish"
	case KindShardPublish:
		return "shard-publish"
	case KindFlush:
		return "flush"
	case KindWrite:
		return "write"
	case KindSetUser:
		return "set-user"
	case KindDelUser:
		return "del-user"
	case KindSetCluster:
		return "set-cluster"
	case KindForgetUser:
		return "forget-user"
	case KindStoreLibrary:
		return "store-library"
	case KindDeleteLibrary:
		return "delete-library"
	case KindFlushLibraries:
		return "flush-libraries"
	case KindAcquire:
		return "acquire"
	case KindEnqueue:
		return "enqueue"
	case KindServe:
		return "serve"
	case KindFreezeSlots:
		return "freeze-slots"
	case KindImportSlots:
		return "import-slots"
	case KindReleaseSlots:
		return "release-slots"
	case KindAbortSlots:
		return "abort-slots"
	case KindUnfreezeSlots:
		return "unfreeze-slots"
	case KindPlanGroups:
		return "plan-groups"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MatchKind says which state of a key a command requires before it applies.
type MatchKind uint8

// Match kinds. Values are part of the log encoding: never renumber.
const (
	// MatchAny applies whatever the key holds (plain SET, admin DEL).
	MatchAny MatchKind = 1
	// MatchAbsent applies only to a free key (LOCK, SET NX).
	MatchAbsent MatchKind = 2
	// MatchToken applies only while the holder's token is Match.Token: the proposer saw that
	// holder, so the command can never apply to a state it did not see.
	MatchToken MatchKind = 3
	// MatchOwner applies only while the holder's owner value is Match.Owner.
	MatchOwner MatchKind = 4
	// MatchLease applies only while the holder's token is Match.Token and its lease was set by
	// the entry at Command.LeaseRev: not after a renewal or a same-owner re-grant (a release of a
	// ghost lock must spare the lock a retrying owner was just told it holds).
	MatchLease MatchKind = 5
	// MatchRev applies only while the key holds the collection the entry at Match.Rev wrote
	// (Collection.Rev): a Write guarded by it never stores a value computed from another.
	MatchRev MatchKind = 6
	// MatchFree applies only to a free key that also has no shares, no permits and no lock-delay
	// in force (kinds.go): the guard of a Grant that takes a lock (LOCK, SET ... NX, SETNX,
	// MLOCK). MatchAbsent, which a write that creates a key (MSET, INCR) carries, looks at the
	// key alone. In a format older than FormatFunctions no key has any of those, and a proposer
	// sends MatchAbsent instead (ForFormat).
	MatchFree MatchKind = 7
)

// Match is the guard a Grant, Release or Renew carries. The FSM checks it again at apply time, so
// a late, duplicated or reordered command is a no-op with a clear result.
type Match struct {
	Kind  MatchKind
	Token Token  // MatchToken
	Owner []byte // MatchOwner
	Rev   uint64 // MatchRev
}

// Command is one replicated lock-table change. Which fields matter depends on Kind:
//
//	Grant:   Key, Owner, LeaseMs, KeepLease, Match (Any, Absent, Token or Owner), Delay
//	Acquire: Key, Owner, LeaseMs (> 0), Permits, Delay
//	Enqueue: Key, Owner (the request, EncodeWaiter), LeaseMs (the wait, > 0), KeepLease
//	Serve:   Key (the waiter's), Token (its place), KeepLease (all or none)
//	Release: Key, Match (Any, Token, Owner, or Lease with LeaseRev)
//	Renew:   Key, Match (Any, Token, Owner, or Lease with LeaseRev), LeaseMs (> 0)
//	Expire:  Key, Token, LeaseRev
//	SetMember: Key (node ID), Owner (client address); RemoveMember: Key
//	Write:   Key, Value (nil: delete), LeaseMs, KeepLease, Match (Any, Absent or Rev)
//	StoreScript: Key (SHA1 hex), Owner (source); FlushScripts: nothing
//	SetUser: Key (user name), Owner (canonical rules); DelUser: Key
//	SetCluster: Key (cluster ID)
//	StoreLibrary: Key (library name), Owner (source); DeleteLibrary: Key; FlushLibraries: nothing
//	FreezeSlots, ReleaseSlots, AbortSlots, UnfreezeSlots: Key (EncodeMove)
//	ImportSlots: Key (EncodeMove), Owner (EncodeRange), Token (the fence floor)
//	Noop:    nothing
type Command struct {
	Kind Kind
	Key  []byte
	// Owner is the value a client set for the lock (SET's value, LOCK's OWNER).
	Owner []byte
	// LeaseMs is the lease length, relative to the time each node applies the entry. 0 = no lease.
	LeaseMs uint64
	// KeepLease keeps the holder's current lease on a Grant (SET ... KEEPTTL).
	KeepLease bool
	Match     Match
	// Token and LeaseRev identify the exact lease an Expire ends: without LeaseRev, a Renew that
	// committed just before a late Expire would be acknowledged and then wiped out.
	Token    Token
	LeaseRev uint64
	// Value is a Write's new value.
	Value *Collection
	// Permits is an Acquire's permit count: 0 for a shared lock, n for a semaphore of n.
	Permits uint64
	// Delay is the lock-delay, in milliseconds, of the lock a Grant or an Acquire takes
	// (Lock.Delay): how long its key stays refused after its lease expires.
	Delay uint64
	// Since and Origin say when and through which node a lock-taking command was asked for:
	// the leader's clock when it proposed it (Unix ms; 0 = not recorded) and the ID of the node
	// whose client asked (LOCKS, LOCKWAITERS). The proposer sets them (StampHeld); they are
	// shown, never compared, so no command's outcome depends on them.
	Since  int64
	Origin []byte
	// Acquire marks, on the proposer only (it is not part of the log), a Grant that takes a
	// lock (LOCK, SET … NX, SETNX): if the client hangs up before it hears it was granted, the
	// lock is released again (ghost-lock cleanup). A Grant that overwrites or counts (SET,
	// INCR, …) stays written, as in Redis, whoever hung up.
	Acquire bool
}

// MaxMemberAddr bounds a member's client address in KindSetMember: a host:port needs far less,
// and the member table is replicated to every node and kept in every snapshot.
const MaxMemberAddr = 256

// Validate reports whether c is a well-formed command. Apply only sees validated commands; a
// proposer validates before it proposes, and Decode validates what it decodes.
func (c Command) Validate() error {
	switch c.Kind {
	case KindNoop:
		return nil
	case KindGrant:
		switch c.Match.Kind {
		case MatchAny, MatchAbsent, MatchToken, MatchOwner, MatchFree:
		default:
			return fmt.Errorf("fsm: grant with match %d", c.Match.Kind)
		}
	case KindRelease, KindRenew:
		switch c.Match.Kind {
		case MatchAny, MatchToken, MatchOwner, MatchLease:
		default:
			return fmt.Errorf("fsm: %s with match %d", c.Kind, c.Match.Kind)
		}
		if c.Kind == KindRenew && c.LeaseMs == 0 {
			return fmt.Errorf("fsm: renew without a lease")
		}
	case KindExpire:
		if c.Token == 0 {
			return fmt.Errorf("fsm: expire without a token")
		}
	case KindEnqueue:
		if c.LeaseMs == 0 {
			return fmt.Errorf("fsm: enqueue without a wait")
		}
		if len(c.Key) == 0 || c.Key[0] >= Databases {
			return fmt.Errorf("fsm: enqueue of a key outside the databases")
		}
		if _, err := DecodeWaiter(c.Owner); err != nil {
			return err
		}
	case KindServe:
		if c.Token == 0 || !isWaiterKey(string(c.Key)) {
			return fmt.Errorf("fsm: serve of no waiter")
		}
	case KindAcquire:
		if c.LeaseMs == 0 {
			return fmt.Errorf("fsm: acquire without a lease")
		}
		if c.Permits > MaxPermits {
			return fmt.Errorf("fsm: acquire of %d permits (at most %d)", c.Permits, MaxPermits)
		}
		if len(c.Key) == 0 || c.Key[0] >= Databases {
			return fmt.Errorf("fsm: acquire of a key outside the databases")
		}
	case KindSetMember:
		if len(c.Owner) == 0 {
			return fmt.Errorf("fsm: set-member without an address")
		}
		if len(c.Owner) > MaxMemberAddr {
			return fmt.Errorf("fsm: set-member address of %d bytes (at most %d)", len(c.Owner), MaxMemberAddr)
		}
	case KindRemoveMember, KindDelUser, KindSetCluster, KindForgetUser, KindDeleteLibrary:
	case KindSetUser:
		if len(c.Owner) == 0 {
			return fmt.Errorf("fsm: set-user without rules")
		}
	case KindStoreScript:
		if len(c.Owner) == 0 {
			return fmt.Errorf("fsm: store-script without a source")
		}
	case KindStoreLibrary:
		if len(c.Owner) == 0 {
			return fmt.Errorf("fsm: store-library without a source")
		}
	case KindFlushScripts, KindPublish, KindShardPublish, KindFlushLibraries:
		return nil // a channel may be empty, as in Redis
	case KindWrite:
		switch c.Match.Kind {
		case MatchAny, MatchAbsent, MatchRev:
		default:
			return fmt.Errorf("fsm: write with match %d", c.Match.Kind)
		}
		if c.Value != nil {
			if err := c.Value.validate(); err != nil {
				return err
			}
		}
	case KindFreezeSlots, KindImportSlots, KindReleaseSlots, KindAbortSlots, KindUnfreezeSlots:
		if _, err := DecodeMove(c.Key); err != nil {
			return err
		}
		if c.Kind != KindImportSlots && (len(c.Owner) != 0 || c.Token != 0) {
			return fmt.Errorf("fsm: %s with keys or a floor", c.Kind)
		}
		if len(c.Owner) > MaxMoveBytes {
			return fmt.Errorf("fsm: %s of %d bytes (at most %d)", c.Kind, len(c.Owner), MaxMoveBytes)
		}
	case KindPlanGroups:
		if _, err := DecodeGroupsPlan(c.Key); err != nil {
			return err
		}
		if len(c.Owner) != 0 || c.Token != 0 {
			return fmt.Errorf("fsm: %s with an owner or a token", c.Kind)
		}
	case KindFlush:
		if len(c.Key) > 1 || len(c.Key) == 1 && c.Key[0] >= Databases {
			return fmt.Errorf("fsm: flush of database %x", c.Key)
		}
		return nil
	default:
		return fmt.Errorf("fsm: unknown command kind %d", uint8(c.Kind))
	}
	if len(c.Key) == 0 {
		return fmt.Errorf("fsm: %s with an empty key", c.Kind)
	}
	if c.Delay > MaxDelayMs || c.Delay != 0 && c.Kind != KindGrant && c.Kind != KindAcquire {
		return fmt.Errorf("fsm: %s with a lock-delay of %d ms", c.Kind, c.Delay)
	}
	if c.Permits != 0 && c.Kind != KindAcquire {
		return fmt.Errorf("fsm: %s with permits", c.Kind)
	}
	if c.hasHeldFields() {
		switch {
		case c.Kind != KindGrant && c.Kind != KindAcquire && c.Kind != KindEnqueue && c.Kind != KindServe:
			return fmt.Errorf("fsm: %s with a grant time or an origin", c.Kind)
		case c.Since < 0:
			return fmt.Errorf("fsm: %s with a grant time of %d", c.Kind, c.Since)
		case len(c.Origin) > MaxOrigin:
			return fmt.Errorf("fsm: %s with an origin of %d bytes (at most %d)", c.Kind, len(c.Origin), MaxOrigin)
		}
	}
	return nil
}

// MaxOrigin bounds a command's Origin, a node's ID: it is kept with every lock it names.
const MaxOrigin = 255

// hasHeldFields reports whether c carries Since or Origin.
func (c Command) hasHeldFields() bool { return c.Since != 0 || len(c.Origin) != 0 }

// Status is the outcome of applying a command.
type Status uint8

// Statuses. Values are part of the result encoding: never renumber.
const (
	StatusNoop          Status = 1
	StatusGranted       Status = 2
	StatusGrantRejected Status = 3
	StatusReleased      Status = 4
	StatusNotFound      Status = 5
	StatusRenewed       Status = 6
	StatusExpired       Status = 7
	StatusMember        Status = 8
	StatusScript        Status = 9
	StatusPublished     Status = 10
	// StatusAborted: the command belonged to an entry one of whose guards failed, so none of
	// the entry applied (Machine.ApplyEntry). The failed command has its own result.
	StatusAborted Status = 11
	// StatusFlushed: a Flush ran; Existed says whether it deleted anything.
	StatusFlushed Status = 12
	// StatusWritten: a Write stored its value (or deleted the key: Existed says whether it was
	// held). Token, LeaseRev and LeaseMs are the key's after it.
	StatusWritten Status = 13
	// StatusConflict: a Write whose Match did not hold changed nothing.
	StatusConflict Status = 14
	// StatusUser: a SetUser or DelUser ran; Existed says whether the user had a record.
	StatusUser Status = 15
	// StatusLibrary: a library command ran; Existed says whether the library (StoreLibrary,
	// DeleteLibrary) or any library (FlushLibraries) was stored before.
	StatusLibrary Status = 16
	// StatusQueued: an Enqueue put its request in the queue; Token is its place.
	StatusQueued Status = 17
	// StatusSlotFrozen: the command's key is in a slot this group is moving away, frozen until
	// the move ends; nothing changed. Its proposer waits for the move and routes it again.
	StatusSlotFrozen Status = 18
	// StatusSlotMoved: the command's key is in a slot this group does not serve (it moved, or
	// routing was stale); nothing changed. Its proposer routes it again.
	StatusSlotMoved Status = 19
	// StatusSlots: a move command applied (slotmoves.go); a refused one is StatusConflict.
	StatusSlots Status = 20
	// StatusGroupsPlanned: a groups plan applied (groupsplan.go); a refused one is
	// StatusConflict.
	StatusGroupsPlanned Status = 21
)

func (s Status) String() string {
	switch s {
	case StatusNoop:
		return "noop"
	case StatusGranted:
		return "granted"
	case StatusGrantRejected:
		return "grant-rejected"
	case StatusReleased:
		return "released"
	case StatusNotFound:
		return "not-found"
	case StatusRenewed:
		return "renewed"
	case StatusExpired:
		return "expired"
	case StatusMember:
		return "member"
	case StatusScript:
		return "script"
	case StatusPublished:
		return "published"
	case StatusFlushed:
		return "flushed"
	case StatusAborted:
		return "aborted"
	case StatusWritten:
		return "written"
	case StatusConflict:
		return "conflict"
	case StatusUser:
		return "user"
	case StatusLibrary:
		return "library"
	case StatusQueued:
		return "queued"
	case StatusSlotFrozen:
		return "slot-frozen"
	case StatusSlotMoved:
		return "slot-moved"
	case StatusSlots:
		return "slots"
	case StatusGroupsPlanned:
		return "groups-planned"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Result is what applying a command produced.
type Result struct {
	Status Status
	// Token: Granted -> the holder's token (new, or kept when the same owner set it again);
	// GrantRejected -> the current holder's token (0 when the key is free); Released/Renewed ->
	// the token of the lock concerned.
	Token Token
	// LeaseRev is the log index that set the lease now in force (Granted, Renewed), so every node
	// arms its timer for the same lease.
	LeaseRev uint64
	// LeaseMs is the lease now in force (Granted, Renewed); 0 = none.
	LeaseMs uint64
	// Existed: Expired -> a lock was removed. Granted -> the key was held before (SET ... GET).
	Existed bool
	// PrevOwner is the owner before a Grant replaced it (SET ... GET), nil when it was free.
	PrevOwner []byte
	// Ended is the token of a lock (a key without a typed value) that this command ended, 0 for
	// none: a Release's or an Expire's lock, the lock a Write deleted or replaced with a typed
	// value, the lock a Grant gave to another holder (a new token). Lost-lock notices come from
	// it (node.LockEnd); like Receivers, it is computed on apply, not replicated.
	Ended Token
	// Served is the place of the waiter a Serve granted (its lock's token is Token), computed
	// on apply like Ended: the node its client waits on answers it from this.
	Served Token
	// Holder: the grant made a share or a permit (Acquire, or a Serve of one), whose lease is on
	// its own hidden key (HolderKey), not on the command's key.
	Holder bool
	// Receivers: Published -> how many subscribers on the node that applied the entry got the
	// message. The FSM leaves it 0; the applying node fills it in from its own subscribers (it
	// is local, not replicated: what PUBLISH replies on the leader).
	Receivers int
	// Stored and Deadline: a Grant's key as the table keeps it and its lease's end on this
	// node's lease clock, so the lease timer it arms needs no lookup of what the apply just
	// stored (and shares the table's bytes of the key). Local, like Receivers; "" otherwise.
	Stored   string
	Deadline int64
}

// GuardFailed reports whether r is a failed guard: the command found the key not as its proposer
// saw it, and changed nothing. These are GrantRejected (a Grant whose Match, absent, token or
// owner, does not hold), NotFound (a Release or Renew whose key is free or whose Match does
// not hold), Conflict (a Write whose Match does not hold, a refused move command) and the
// refusals of a key whose slot this group does not serve now (Rerouted). A failed guard aborts the entry that holds it (Machine.ApplyEntry).
//
// Every other result is an outcome, not a failure: Expired{Existed: false}, an Expire of a lease
// that was renewed, re-granted or released meanwhile, is idempotent by design (the leader's
// timers race the holders' renewals), and member, script and noop commands have no guard.
func (r Result) GuardFailed() bool {
	return r.Status == StatusGrantRejected || r.Status == StatusNotFound || r.Status == StatusConflict ||
		r.Status == StatusSlotFrozen || r.Status == StatusSlotMoved
}

// Rerouted reports whether r says the command's key is not this group's to change now (its
// slot is moving or moved): the request applied as nothing and belongs elsewhere.
func (r Result) Rerouted() bool { return r.Status == StatusSlotFrozen || r.Status == StatusSlotMoved }

// Aborted reports whether results, those of one entry, say it applied as nothing: it held
// several commands and one's guard failed, so the others are StatusAborted. A single-command
// entry whose guard failed is not aborted: its result is the request's outcome (a refusal).
func Aborted(results []Result) bool {
	for _, r := range results {
		if r.Status == StatusAborted {
			return true
		}
	}
	return false
}
