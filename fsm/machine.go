package fsm

import (
	"bytes"
	"maps"
	"slices"
)

// Lock is one held key. The table stores its fields in one immutable entry (lockTable): a change
// stores a new one, so a Snapshot can share them. An Owner the table returns aliases that entry
// and must not be written to.
type Lock struct {
	// Owner is a string's value (SET's value, LOCK's OWNER); empty for a collection.
	Owner []byte
	// Value is the collection a hash, set, sorted set or list key holds; nil for a string.
	Value *Collection
	Token Token
	// LeaseRev is the log index of the entry that set the lease now in force (every command of
	// an entry shares its index): what an Expire compares.
	LeaseRev uint64
	// LeaseMs is the lease length from the time LeaseRev was applied; 0 = no lease.
	LeaseMs uint64
	// Deadline is when this node's timer for the lease in force ends, on the applier's clock
	// (SetLeaseClock, RestoreAt): LeaseMs after the lease was set or restored here. It is local
	// to the node that applied it, like the timer it stands for: never replicated, never in a
	// snapshot's bytes, and no command's outcome depends on it. Kept beside the entry so that a
	// lease costs the node no map of its own. 0 when there is no lease.
	Deadline int64
	// Delay is the lock-delay, in milliseconds, of a lock granted with one (LOCK ... DELAY):
	// when its lease expires (not when it is released) the key stays refused to every grant for
	// that long (kinds.go). 0 for none.
	Delay uint64
	// Since and Origin are when the holder was granted the lock, on the leader's clock (Unix
	// ms), and the ID of the node its client asked through (Command.Since, Command.Origin): for
	// LOCKS to show, never compared. A waiter's entry keeps when and where it queued. 0 and nil
	// when not recorded (a Redis write that takes no lock, a lock granted before format 6).
	Since  int64
	Origin []byte
}

// Type is the type of the value the lock's key holds.
func (l Lock) Type() Type {
	if l.Value == nil {
		return TypeString
	}
	return l.Value.Type
}

// Machine is the lock table. It is not safe for concurrent use: the caller (raftnode) serializes
// Apply with its reads. Snapshot returns a copy that may be used concurrently with Apply.
type Machine struct {
	table *lockTable
	// members maps node IDs to the client addresses they advertise, and clusterIDKey to the
	// cluster's ID (KindSetCluster): kept here, snapshots carry it without a new version.
	members map[string]string
	// scripts maps SHA1 hex digests to Lua sources.
	scripts map[string]string
	// users maps ACL user names to their canonical rules; "" is a deleted user's tombstone.
	users map[string]string
	// libraries are the function libraries (never nil).
	libraries *Libraries
	// applied is the index of the last entry given to Apply; restored from snapshots.
	applied uint64
	// lastToken is the largest token handed out (Token's counter); restored from snapshots.
	lastToken Token
	// counts are the keys and the leases of each database (a table key's first byte, keys.go).
	counts dbCounts
	// leaseClock is the caller's clock reading for the leases applied now (SetLeaseClock).
	leaseClock int64
	// entrySeq is the place the last Enqueue of the request being applied took, which an
	// Enqueue with KeepLease joins (an MLOCK's); 0 at each request's start.
	entrySeq Token
	// format is the cluster's log format (format.go): raised by applied entries, restored from
	// snapshots (one of snapshotV4 or later was taken in FormatTyped or later).
	format byte
	// slots is the group's ownership of the hash slots (slotmoves.go); immutable records,
	// replaced by each move command, so a Snapshot shares them.
	slots Slots
	// plan is the last groups plan group 0 committed (groupsplan.go), nil before any.
	plan *GroupsPlan
}

// dbCounts counts the keys, and the keys with a lease, of each database, and the leases of all
// of them (Leases is asked on every armed lease: a sum over the databases would cost each
// grant). A key's database is its first byte (keys.go); the counts of first bytes past the
// databases, which no key written today has, live in a map made when one first appears:
// arrays of 256 would add 4 KiB to every Machine, zeroed at each script's scratch table.
type dbCounts struct {
	keys, leases [Databases]int
	other        map[byte]*[2]int // keys, leases of a first byte >= Databases
	allLeases    int
}

// clone is a copy of c that shares none of its counters.
func (c dbCounts) clone() dbCounts {
	if c.other != nil {
		other := make(map[byte]*[2]int, len(c.other))
		for k, v := range c.other {
			n := *v
			other[k] = &n
		}
		c.other = other
	}
	return c
}

// slots returns the key and lease counters of database db.
func (c *dbCounts) slots(db byte) (keys, leases *int) {
	if db < Databases {
		return &c.keys[db], &c.leases[db]
	}
	if c.other == nil {
		c.other = map[byte]*[2]int{}
	}
	o := c.other[db]
	if o == nil {
		o = new([2]int)
		c.other[db] = o
	}
	return &o[0], &o[1]
}

// key adds d to the key count of database db.
func (c *dbCounts) key(db byte, d int) {
	k, _ := c.slots(db)
	*k += d
}

// lease adds d to the lease counts of database db.
func (c *dbCounts) lease(db byte, d int) {
	_, l := c.slots(db)
	*l += d
	c.allLeases += d
}

// of returns the key and lease counts of database db.
func (c *dbCounts) of(db int) (keys, leases int) {
	switch {
	case db >= 0 && db < Databases:
		return c.keys[db], c.leases[db]
	case db > 255:
		return 0, 0
	}
	if o := c.other[byte(db)]; o != nil {
		return o[0], o[1]
	}
	return 0, 0
}

// maxDeadlineMs keeps Deadline arithmetic far from int64's overflow (about 292 years of
// nanoseconds): a longer lease ends after 100 years, which is never on any clock that matters.
const maxDeadlineMs = 100 * 365 * 24 * 3600 * 1000

// SetLeaseClock sets the clock reading, in nanoseconds of the caller's own clock, at which the
// entries applied from now on are applied: each lease they set gets Deadline = now + LeaseMs. It
// is the node's local view of time, given, never read: the replicated state (everything a
// snapshot holds, every Result) does not depend on it.
func (m *Machine) SetLeaseClock(now int64) { m.leaseClock = now }

// deadline is when a lease of ms set now ends on the lease clock; 0 for no lease.
func (m *Machine) deadline(ms uint64) int64 {
	if ms == 0 {
		return 0
	}
	return m.leaseClock + int64(min(ms, maxDeadlineMs))*1e6
}

// New returns an empty table.
func New() *Machine {
	return &Machine{table: newLockTable(newOriginNames()), members: map[string]string{}, scripts: map[string]string{},
		users: map[string]string{}, libraries: emptyLibraries, format: FormatKeyed}
}

// Reset empties m and makes it as New returns it, keeping its memory where that is cheap to
// keep: a script's scratch table (server's overlay) is reset and reused rather than made for
// every run. Nothing read from m before changes: its entries are immutable and its collections
// are let go, not cleared.
func (m *Machine) Reset() {
	m.table.reset()
	clear(m.members)
	clear(m.scripts)
	clear(m.users)
	*m = Machine{table: m.table, members: m.members, scripts: m.scripts, users: m.users, libraries: emptyLibraries, format: FormatKeyed}
	// A scratch table checks no ownership: its group is configured (SetGroup) on replicas only.
}

// User returns the replicated record of ACL user name: its canonical rules, or "" when it was
// deleted; ok is false when no ACL SETUSER or DELUSER ever named it.
func (m *Machine) User(name string) (rules string, ok bool) {
	rules, ok = m.users[name]
	return rules, ok
}

// Users returns a copy of the replicated ACL users, tombstones ("") included.
func (m *Machine) Users() map[string]string { return maps.Clone(m.users) }

// Script returns the stored source of the script with this SHA1 hex digest.
func (m *Machine) Script(sha string) (string, bool) {
	src, ok := m.scripts[sha]
	return src, ok
}

// Scripts is the number of stored scripts.
func (m *Machine) Scripts() int { return len(m.scripts) }

// ScriptBytes is the bytes of the stored scripts' sources (a walk over them: the cache is
// capped at a few thousand).
func (m *Machine) ScriptBytes() int {
	n := 0
	for _, src := range m.scripts {
		n += len(src)
	}
	return n
}

// Put stores a lock directly, bypassing the log. Only for scratch tables (a script's predicted
// effects, tests); a replicated Machine changes only through Apply. The token counter moves up
// to l.Token, so a later grant still hands out a greater one.
func (m *Machine) Put(key []byte, l Lock) {
	m.set(string(key), l)
	m.lastToken = max(m.lastToken, l.Token)
}

// LastToken is the largest fencing token handed out so far (or held, after a restore).
func (m *Machine) LastToken() Token { return m.lastToken }

// Member returns the client address node id advertised.
func (m *Machine) Member(id string) (string, bool) {
	a, ok := m.members[id]
	return a, ok
}

// Members returns a copy of the member address table.
func (m *Machine) Members() map[string]string {
	out := maps.Clone(m.members)
	delete(out, clusterIDKey)
	return out
}

// MemberCount is how many members have an address in the table.
func (m *Machine) MemberCount() int {
	n := len(m.members)
	if _, ok := m.members[clusterIDKey]; ok {
		n--
	}
	return n
}

// clusterIDKey is where members holds the cluster ID. No node ID can take it: it starts with a
// NUL byte, which node IDs may not contain (ValidNodeID).
const clusterIDKey = "\x00cluster-id"

// ClusterID is the cluster's ID, empty until a SetCluster command applied.
func (m *Machine) ClusterID() string { return m.members[clusterIDKey] }

// ValidNodeID reports whether id can name a node: 1 to 128 printable ASCII bytes, no spaces.
// Every node ID reaches the member table, where clusterIDKey must stay out of its way.
func ValidNodeID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// Applied is the index of the last entry applied (or restored).
func (m *Machine) Applied() uint64 { return m.applied }

// Len is the number of held keys.
func (m *Machine) Len() int { return m.table.Len() }

// LenDB is the number of keys of database db.
func (m *Machine) LenDB(db int) int {
	keys, _ := m.counts.of(db)
	return keys
}

// Leases is the number of held keys that have a lease.
func (m *Machine) Leases() int { return m.counts.allLeases }

// LeasesDB is the number of keys of database db that have a lease.
func (m *Machine) LeasesDB(db int) int {
	_, leases := m.counts.of(db)
	return leases
}

// set stores l at key and keeps the per-database counts; every change to the table goes through
// set or del.
func (m *Machine) set(key string, l Lock) (stored string) {
	stored, prev, existed := m.table.Set(key, l)
	switch {
	case !existed:
		m.counts.key(key[0], 1)
	case prev.LeaseMs > 0:
		m.counts.lease(key[0], -1)
	}
	if l.LeaseMs > 0 {
		m.counts.lease(key[0], 1)
	}
	return stored
}

func (m *Machine) del(key string) {
	if prev, existed := m.table.Delete(key); existed {
		m.counts.key(key[0], -1)
		if prev.LeaseMs > 0 {
			m.counts.lease(key[0], -1)
		}
	}
}

// Entry returns the lock on key as Get does, with the table's own copy of the key: a caller
// that keeps the key (a lease timer) shares its bytes instead of holding a second copy.
func (m *Machine) Entry(key []byte) (stored string, l Lock, ok bool) {
	return m.table.Entry(string(key))
}

// Get returns the lock on key, if it is held.
func (m *Machine) Get(key []byte) (Lock, bool) {
	return m.table.Get(string(key))
}

// Scan calls fn for each held key in key order until fn returns false.
func (m *Machine) Scan(fn func(key string, l Lock) bool) { m.table.Scan(fn) }

// Ascend calls fn for every key from from (a table key) up, in key order, while fn returns true.
func (m *Machine) Ascend(from string, fn func(key string, l Lock) bool) { m.table.Ascend(from, fn) }

// Advance records that the entry at index was applied without changing the table (raft's own
// entries: configuration changes, no-ops).
func (m *Machine) Advance(index uint64) {
	if index > m.applied {
		m.applied = index
	}
}

// Apply applies an entry of the one command cmd at log index index and returns its result: the
// same as ApplyEntry(nil, index, []Command{cmd})[0]. A failed guard changed nothing, so a
// single-command entry needs no undo.
func (m *Machine) Apply(index uint64, cmd Command) Result {
	m.Advance(index)
	m.entrySeq = 0
	return m.apply(index, cmd)
}

// ApplyEntry applies the entry at log index index, the ordered commands of one request, and
// appends one result per command to dst (nil, or a buffer the caller shares between entries).
// It applies all of it or none of it (DESIGN.md §3): each command's guard is checked in order
// against the table as the commands before it left it (a script may set a key and then delete
// it), and when one fails (Result.GuardFailed) everything the entry changed is put back, the
// table, members, scripts and token counter as they were before it. The failed command then has its own result and every other one StatusAborted.
// Either way the entry counts as applied (Applied advances), as a no-op when it was aborted.
//
// Commands must be valid (Command.Validate); an invalid one changes nothing and yields Noop.
// The undo costs nothing for an entry of one command, nor for one whose commands cannot fail
// (an expiry batch: Expire has no failing outcome), and O(commands) otherwise: never a copy of
// the table.
func (m *Machine) ApplyEntry(dst []Result, index uint64, cmds []Command) []Result {
	m.Advance(index)
	m.entrySeq = 0
	start := len(dst)
	dst = slices.Grow(dst, len(cmds))[:start+len(cmds)]
	out := dst[start:]
	if m.slots.recs != nil && len(cmds) > 1 && m.refuseEntryBySlots(out, cmds) {
		return dst
	}
	if len(cmds) == 1 || !anyGuarded(cmds) {
		for i, c := range cmds {
			out[i] = m.apply(index, c)
		}
		return dst
	}
	u := undoLog{lastToken: m.lastToken, records: make([]undoRecord, 0, len(cmds))}
	for i, c := range cmds {
		u.save(m, c)
		out[i] = m.apply(index, c)
		u.savedKinds(c, out[i])
		if out[i].GuardFailed() {
			u.rollback(m)
			for j := range out {
				if j != i {
					out[j] = Result{Status: StatusAborted}
				}
			}
			return dst
		}
	}
	return dst
}

// anyGuarded reports whether a guard of cmds can fail: a Release, a Renew or a Grant that
// requires some state of its key.
func anyGuarded(cmds []Command) bool {
	for _, c := range cmds {
		switch {
		case c.Kind == KindRelease, c.Kind == KindRenew, c.Kind == KindSetCluster, c.Kind == KindAcquire, isMoveKind(c.Kind), c.Kind == KindPlanGroups,
			c.Kind == KindServe && c.KeepLease,
			(c.Kind == KindGrant || c.Kind == KindWrite) && c.Match.Kind != MatchAny:
			return true
		}
	}
	return false
}

func (m *Machine) apply(index uint64, cmd Command) Result {
	if cmd.Validate() != nil {
		return Result{Status: StatusNoop}
	}
	if m.slots.recs != nil {
		if r, refused := m.refusedBySlots(cmd); refused {
			return r
		}
	}
	switch cmd.Kind {
	case KindFreezeSlots, KindImportSlots, KindReleaseSlots, KindAbortSlots, KindUnfreezeSlots:
		return m.applyMove(index, cmd)
	case KindPlanGroups:
		return m.applyPlan(cmd)
	case KindGrant:
		return m.grant(index, cmd)
	case KindRelease:
		return m.release(cmd)
	case KindRenew:
		return m.renew(index, cmd)
	case KindExpire:
		return m.expire(index, cmd)
	case KindAcquire:
		return m.acquire(index, cmd)
	case KindEnqueue:
		return m.enqueue(index, cmd)
	case KindServe:
		return m.serve(index, cmd)
	case KindSetMember:
		if string(cmd.Key) == clusterIDKey {
			return Result{Status: StatusNoop} // only SetCluster sets it
		}
		m.members[string(cmd.Key)] = string(cmd.Owner)
		return Result{Status: StatusMember}
	case KindSetCluster:
		cur, ok := m.members[clusterIDKey]
		switch {
		case !ok:
			m.members[clusterIDKey] = string(cmd.Key)
			return Result{Status: StatusMember}
		case cur == string(cmd.Key):
			return Result{Status: StatusMember, Existed: true}
		}
		return Result{Status: StatusConflict, Existed: true}
	case KindRemoveMember:
		if string(cmd.Key) == clusterIDKey {
			return Result{Status: StatusNoop} // the cluster ID is never forgotten
		}
		_, existed := m.members[string(cmd.Key)]
		delete(m.members, string(cmd.Key))
		return Result{Status: StatusMember, Existed: existed}
	case KindStoreScript:
		_, existed := m.scripts[string(cmd.Key)]
		m.scripts[string(cmd.Key)] = string(cmd.Owner)
		return Result{Status: StatusScript, Existed: existed}
	case KindFlushScripts:
		clear(m.scripts)
		return Result{Status: StatusScript}
	case KindSetUser, KindDelUser:
		_, existed := m.users[string(cmd.Key)]
		rules := string(cmd.Owner)
		if cmd.Kind == KindDelUser {
			rules = "" // the tombstone
		}
		m.users[string(cmd.Key)] = rules
		return Result{Status: StatusUser, Existed: existed}
	case KindForgetUser:
		_, existed := m.users[string(cmd.Key)]
		delete(m.users, string(cmd.Key))
		return Result{Status: StatusUser, Existed: existed}
	case KindStoreLibrary:
		_, existed := m.libraries.Get(string(cmd.Key))
		m.libraries = m.libraries.with(string(cmd.Key), string(cmd.Owner))
		return Result{Status: StatusLibrary, Existed: existed}
	case KindDeleteLibrary:
		_, existed := m.libraries.Get(string(cmd.Key))
		m.libraries = m.libraries.without(string(cmd.Key))
		return Result{Status: StatusLibrary, Existed: existed}
	case KindFlushLibraries:
		existed := m.libraries.Len() > 0
		m.libraries = emptyLibraries
		return Result{Status: StatusLibrary, Existed: existed}
	case KindPublish, KindShardPublish:
		return Result{Status: StatusPublished}
	case KindFlush:
		return m.flush(cmd.Key)
	case KindWrite:
		return m.write(index, cmd)
	}
	return Result{Status: StatusNoop}
}

// flush deletes every key of database db (one byte), or of all of them (db empty).
func (m *Machine) flush(db []byte) Result {
	if len(db) == 0 {
		waiters := m.queuedEntries()
		existed := m.table.Len() > len(waiters)
		m.table = newLockTable(m.table.origins)
		m.counts = dbCounts{}
		for _, w := range waiters { // requests that wait are not keys: they wait on
			m.set(w.key, w.l)
		}
		return Result{Status: StatusFlushed, Existed: existed}
	}
	hidden := m.flushKinds(db[0])
	var doomed []string
	m.table.Ascend(string(db), func(key string, _ Lock) bool {
		if key[0] != db[0] {
			return false
		}
		doomed = append(doomed, key)
		return true
	})
	for _, k := range doomed {
		m.del(k)
	}
	return Result{Status: StatusFlushed, Existed: len(doomed) > 0 || hidden}
}

// undoLog holds what an entry's commands overwrote, so a failed guard can put it back.
type undoLog struct {
	lastToken Token
	records   []undoRecord
}

// undoRecord is the state one command found: of its key in the table (Grant, Release, Renew,
// Expire), in members (SetMember, RemoveMember), in scripts (StoreScript) or in users (SetUser, DelUser), the whole scripts
// map (FlushScripts), the libraries (immutable, so kept as they are), or the whole table, an
// O(1) copy, with the slot ownership (Flush, a move command).
type undoRecord struct {
	kind    Kind
	key     string
	lock    Lock
	value   string
	present bool
	scripts map[string]string
	libs    *Libraries
	table   *lockTable
	counts  *dbCounts // with table: a Flush's or a move's, kept apart so other records stay small
	slots   Slots     // with table: a move command's
	plan    *GroupsPlan
}

// save records the state cmd is about to change. It runs before every command of an entry that
// may need undoing; a key touched twice is recorded twice, and rollback replays the records
// backwards, so the first record wins.
func (u *undoLog) save(m *Machine, cmd Command) {
	u.saveKinds(m, cmd)
	r := undoRecord{kind: cmd.Kind, key: string(cmd.Key)}
	switch cmd.Kind {
	case KindGrant, KindRelease, KindRenew, KindExpire, KindWrite, KindAcquire, KindEnqueue, KindServe:
		r.lock, r.present = m.table.Get(r.key)
	case KindSetMember, KindRemoveMember:
		r.value, r.present = m.members[r.key]
	case KindSetCluster:
		r.kind, r.key = KindSetMember, clusterIDKey // restored like a member's entry
		r.value, r.present = m.members[r.key]
	case KindStoreScript:
		r.value, r.present = m.scripts[r.key]
	case KindSetUser, KindDelUser, KindForgetUser:
		r.value, r.present = m.users[r.key]
	case KindFlushScripts:
		r.scripts = maps.Clone(m.scripts)
	case KindStoreLibrary, KindDeleteLibrary, KindFlushLibraries:
		r.libs = m.libraries
	case KindFlush, KindFreezeSlots, KindImportSlots, KindReleaseSlots, KindAbortSlots, KindUnfreezeSlots:
		counts := m.counts.clone()
		r.table, r.counts, r.slots = m.table.Copy(), &counts, m.slots
	case KindPlanGroups:
		r.plan = m.plan
	default:
		return // changes nothing
	}
	u.records = append(u.records, r)
}

// rollback puts back everything recorded, newest first.
func (u *undoLog) rollback(m *Machine) {
	for i := len(u.records) - 1; i >= 0; i-- {
		r := u.records[i]
		switch r.kind {
		case KindGrant, KindRelease, KindRenew, KindExpire, KindWrite, KindAcquire, KindEnqueue, KindServe:
			if r.present {
				m.set(r.key, r.lock)
			} else {
				m.del(r.key)
			}
		case KindSetMember, KindRemoveMember:
			restoreEntry(m.members, r.key, r.value, r.present)
		case KindStoreScript:
			restoreEntry(m.scripts, r.key, r.value, r.present)
		case KindSetUser, KindDelUser, KindForgetUser:
			restoreEntry(m.users, r.key, r.value, r.present)
		case KindFlushScripts:
			m.scripts = r.scripts
		case KindStoreLibrary, KindDeleteLibrary, KindFlushLibraries:
			m.libraries = r.libs
		case KindFlush, KindFreezeSlots, KindImportSlots, KindReleaseSlots, KindAbortSlots, KindUnfreezeSlots:
			m.table, m.counts, m.slots = r.table, *r.counts, r.slots
		case KindPlanGroups:
			m.plan = r.plan
		}
	}
	m.lastToken = u.lastToken
}

func restoreEntry(into map[string]string, key, value string, present bool) {
	if present {
		into[key] = value
	} else {
		delete(into, key)
	}
}

// nextToken advances the token counter for a grant to a new holder in the entry at index (see
// Token). 2^64 grants do not happen, so last+1 does not wrap.
func (m *Machine) nextToken(index uint64) Token {
	m.lastToken = max(m.lastToken+1, Token(index))
	return m.lastToken
}

func (m *Machine) grant(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	switch cmd.Match.Kind {
	case MatchAbsent:
		if held {
			return Result{Status: StatusGrantRejected, Token: cur.Token}
		}
	case MatchFree:
		if held {
			return Result{Status: StatusGrantRejected, Token: cur.Token}
		}
		if t, blocked := m.blockedByKinds(cmd.Key); blocked {
			return Result{Status: StatusGrantRejected, Token: t}
		}
	case MatchToken:
		if !held || cur.Token != cmd.Match.Token {
			return Result{Status: StatusGrantRejected, Token: cur.Token}
		}
	case MatchOwner:
		// A script replacing a lock it set itself earlier: it cannot know that grant's token.
		if !held || !bytes.Equal(cur.Owner, cmd.Match.Owner) {
			return Result{Status: StatusGrantRejected, Token: cur.Token}
		}
	}
	next := Lock{
		Owner:    bytes.Clone(cmd.Owner),
		LeaseRev: index,
		LeaseMs:  cmd.LeaseMs,
		Deadline: m.deadline(cmd.LeaseMs),
		Delay:    cmd.Delay,
		Since:    cmd.Since,
		Origin:   cmd.Origin,
	}
	if next.Owner == nil {
		next.Owner = []byte{}
	}
	if held && cur.Value == nil && bytes.Equal(cur.Owner, cmd.Owner) {
		// The same holder setting its lock again keeps its token: the token changes only when
		// the holder does. It has held it since its first grant.
		next.Token = cur.Token
		if cur.Since != 0 {
			next.Since, next.Origin = cur.Since, cur.Origin
		}
	} else {
		next.Token = m.nextToken(index)
	}
	if cmd.KeepLease {
		if held {
			next.LeaseRev, next.LeaseMs, next.Deadline = cur.LeaseRev, cur.LeaseMs, cur.Deadline
		} else {
			next.LeaseMs, next.Deadline = 0, 0
		}
	}
	stored := m.set(key, next)
	r := Result{Status: StatusGranted, Token: next.Token, LeaseRev: next.LeaseRev, LeaseMs: next.LeaseMs, Existed: held,
		Stored: stored, Deadline: next.Deadline}
	if held {
		r.PrevOwner = cur.Owner
		if cur.Value == nil && cur.Token != next.Token {
			r.Ended = cur.Token
		}
	}
	return r
}

// write stores a Write's value (DESIGN.md §3), or deletes the key when it has none.
func (m *Machine) write(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	switch cmd.Match.Kind {
	case MatchAbsent:
		if held {
			return Result{Status: StatusConflict, Token: cur.Token}
		}
	case MatchRev:
		if !held || cur.Value == nil || cur.Value.Rev != cmd.Match.Rev {
			return Result{Status: StatusConflict, Token: cur.Token}
		}
	}
	if cmd.Value == nil {
		r := Result{Status: StatusWritten, Existed: held}
		if held {
			m.del(key)
			if cur.Value == nil {
				r.Ended = cur.Token
			}
		}
		return r
	}
	next := Lock{Owner: []byte{}, Value: cmd.Value.stored(index), LeaseRev: index, LeaseMs: cmd.LeaseMs, Deadline: m.deadline(cmd.LeaseMs)}
	if held && cur.Value != nil {
		// The collection goes on: the same key, the same holder.
		next.Token = cur.Token
		if cmd.KeepLease { // HSET on a hash with a TTL keeps the TTL, as in Redis
			next.LeaseRev, next.LeaseMs, next.Deadline = cur.LeaseRev, cur.LeaseMs, cur.Deadline
		}
	} else {
		next.Token = m.nextToken(index)
		if cmd.KeepLease {
			next.LeaseMs, next.Deadline = 0, 0
		}
	}
	m.set(key, next)
	r := Result{Status: StatusWritten, Token: next.Token, LeaseRev: next.LeaseRev, LeaseMs: next.LeaseMs, Existed: held}
	if held && cur.Value == nil {
		r.Ended = cur.Token
	}
	return r
}

// matches reports whether the lock l satisfies the guard of a Release or Renew.
func matches(l Lock, cmd Command) bool {
	mt := cmd.Match
	switch mt.Kind {
	case MatchAny:
		return true
	case MatchToken:
		return l.Token == mt.Token
	case MatchOwner:
		return bytes.Equal(l.Owner, mt.Owner)
	case MatchLease:
		return l.Token == mt.Token && l.LeaseRev == cmd.LeaseRev
	}
	return false
}

// Frees reports whether cmd, a Release or an Expire, deletes the lock l its key holds: the
// rule release and expire apply, for a proposer deciding who gets the key next.
func Frees(l Lock, cmd Command) bool {
	switch cmd.Kind {
	case KindRelease:
		return matches(l, cmd)
	case KindExpire:
		return expires(l, cmd)
	}
	return false
}

// FreesKey reports whether cmd, a Release or an Expire of the lock l, leaves its key free for
// another grant in the same entry: Frees, and no lock-delay starts (an expiry of a lock with one
// keeps the key refused).
func FreesKey(l Lock, cmd Command) bool {
	return Frees(l, cmd) && (cmd.Kind != KindExpire || l.Delay == 0)
}

// expires reports whether an Expire ends the lease of l: both must match, since a re-grant
// changes the token and a renew the lease revision.
func expires(l Lock, cmd Command) bool {
	return l.Token == cmd.Token && l.LeaseRev == cmd.LeaseRev && l.LeaseMs != 0
}

func (m *Machine) release(cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	if !held || !matches(cur, cmd) {
		return Result{Status: StatusNotFound}
	}
	m.del(key)
	r := Result{Status: StatusReleased, Token: cur.Token}
	if cur.Value == nil && IsLockKey(key) {
		r.Ended = cur.Token
	}
	m.ended(0, key, cur, false)
	return r
}

func (m *Machine) renew(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	if !held || !matches(cur, cmd) {
		return Result{Status: StatusNotFound}
	}
	next := cur
	next.LeaseRev, next.LeaseMs, next.Deadline = index, cmd.LeaseMs, m.deadline(cmd.LeaseMs)
	m.set(key, next)
	return Result{Status: StatusRenewed, Token: next.Token, LeaseRev: next.LeaseRev, LeaseMs: next.LeaseMs}
}

// expire applies an Expire in the entry at index. A lock with a lock-delay leaves one behind,
// whose lease the result gives (LeaseRev, LeaseMs: LeaseKey's timer).
func (m *Machine) expire(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	if !held || !expires(cur, cmd) {
		return Result{Status: StatusExpired, Existed: false}
	}
	m.del(key)
	r := Result{Status: StatusExpired, Existed: true, Token: cur.Token}
	if cur.Value == nil && IsLockKey(key) {
		r.Ended = cur.Token
	}
	if delay := m.ended(index, key, cur, true); delay > 0 {
		r.LeaseRev, r.LeaseMs = index, delay
	}
	return r
}
