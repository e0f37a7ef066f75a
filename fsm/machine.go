package fsm

import (
	"bytes"
	"maps"

	"github.com/tidwall/btree"
)

// Lock is one held key. Values stored in the table are never mutated in place: a change stores a
// new Lock, so a Snapshot can share them.
type Lock struct {
	Owner []byte
	Token Token
	// LeaseRev is the log index of the entry that set the lease now in force.
	LeaseRev uint64
	// LeaseMs is the lease length from the time LeaseRev was applied; 0 = no lease.
	LeaseMs uint64
}

// Machine is the lock table. It is not safe for concurrent use: the caller (raftnode) serializes
// Apply with its reads. Snapshot returns a copy that may be used concurrently with Apply.
type Machine struct {
	table *btree.Map[string, Lock]
	// members maps node IDs to the client addresses they advertise.
	members map[string]string
	// scripts maps SHA1 hex digests to Lua sources.
	scripts map[string]string
	// applied is the index of the last entry given to Apply; restored from snapshots.
	applied uint64
}

// btreeDegree trades memory per node for depth; 32 keeps a million locks four levels deep.
const btreeDegree = 32

// New returns an empty table.
func New() *Machine {
	return &Machine{table: btree.NewMap[string, Lock](btreeDegree), members: map[string]string{}, scripts: map[string]string{}}
}

// Script returns the stored source of the script with this SHA1 hex digest.
func (m *Machine) Script(sha string) (string, bool) {
	src, ok := m.scripts[sha]
	return src, ok
}

// Scripts is the number of stored scripts.
func (m *Machine) Scripts() int { return len(m.scripts) }

// Put stores a lock directly, bypassing the log. Only for scratch tables (a script's predicted
// effects, tests); a replicated Machine changes only through Apply.
func (m *Machine) Put(key []byte, l Lock) { m.table.Set(string(key), l) }

// Member returns the client address node id advertised.
func (m *Machine) Member(id string) (string, bool) {
	a, ok := m.members[id]
	return a, ok
}

// Members returns a copy of the member address table.
func (m *Machine) Members() map[string]string { return maps.Clone(m.members) }

// Applied is the index of the last entry applied (or restored).
func (m *Machine) Applied() uint64 { return m.applied }

// Len is the number of held keys.
func (m *Machine) Len() int { return m.table.Len() }

// Get returns the lock on key, if it is held.
func (m *Machine) Get(key []byte) (Lock, bool) {
	return m.table.Get(string(key))
}

// Scan calls fn for each held key in key order until fn returns false.
func (m *Machine) Scan(fn func(key string, l Lock) bool) { m.table.Scan(fn) }

// Advance records that the entry at index was applied without changing the table (raft's own
// entries: configuration changes, no-ops).
func (m *Machine) Advance(index uint64) {
	if index > m.applied {
		m.applied = index
	}
}

// Apply applies cmd, the entry at log index index, and returns its result. cmd must be valid
// (Command.Validate); an invalid one changes nothing and yields Noop.
func (m *Machine) Apply(index uint64, cmd Command) Result {
	m.Advance(index)
	if cmd.Validate() != nil {
		return Result{Status: StatusNoop}
	}
	switch cmd.Kind {
	case KindGrant:
		return m.grant(index, cmd)
	case KindRelease:
		return m.release(cmd)
	case KindRenew:
		return m.renew(index, cmd)
	case KindExpire:
		return m.expire(cmd)
	case KindSetMember:
		m.members[string(cmd.Key)] = string(cmd.Owner)
		return Result{Status: StatusMember}
	case KindRemoveMember:
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
	case KindPublish, KindShardPublish:
		return Result{Status: StatusPublished}
	}
	return Result{Status: StatusNoop}
}

func (m *Machine) grant(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	switch cmd.Match.Kind {
	case MatchAbsent:
		if held {
			return Result{Status: StatusGrantRejected, Token: cur.Token}
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
		Token:    Token(index),
		LeaseRev: index,
		LeaseMs:  cmd.LeaseMs,
	}
	if next.Owner == nil {
		next.Owner = []byte{}
	}
	if held && bytes.Equal(cur.Owner, cmd.Owner) {
		// The same holder setting its lock again keeps its token: the token changes only when
		// the holder does.
		next.Token = cur.Token
	}
	if cmd.KeepLease {
		if held {
			next.LeaseRev, next.LeaseMs = cur.LeaseRev, cur.LeaseMs
		} else {
			next.LeaseMs = 0
		}
	}
	m.table.Set(key, next)
	r := Result{Status: StatusGranted, Token: next.Token, LeaseRev: next.LeaseRev, LeaseMs: next.LeaseMs, Existed: held}
	if held {
		r.PrevOwner = cur.Owner
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

func (m *Machine) release(cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	if !held || !matches(cur, cmd) {
		return Result{Status: StatusNotFound}
	}
	m.table.Delete(key)
	return Result{Status: StatusReleased, Token: cur.Token}
}

func (m *Machine) renew(index uint64, cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	if !held || !matches(cur, cmd) {
		return Result{Status: StatusNotFound}
	}
	next := cur
	next.LeaseRev, next.LeaseMs = index, cmd.LeaseMs
	m.table.Set(key, next)
	return Result{Status: StatusRenewed, Token: next.Token, LeaseRev: next.LeaseRev, LeaseMs: next.LeaseMs}
}

func (m *Machine) expire(cmd Command) Result {
	key := string(cmd.Key)
	cur, held := m.table.Get(key)
	// Both must match: a re-grant changes the token, a renew changes the lease revision.
	if !held || cur.Token != cmd.Token || cur.LeaseRev != cmd.LeaseRev || cur.LeaseMs == 0 {
		return Result{Status: StatusExpired, Existed: false}
	}
	m.table.Delete(key)
	return Result{Status: StatusExpired, Existed: true, Token: cur.Token}
}
