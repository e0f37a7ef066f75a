package locks

// What the lock commands propose: LOCK, UNLOCK, RENEW (DESIGN.md §7) and the SET NX family,
// evaluated against the leader's view. The server parses the commands and replies; the rules
// that decide which command a request yields, and its guard, are here.

import (
	"bytes"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Grant sets key to owner with a lease of leaseMs (0: none), guarded by m.
func Grant(key, owner []byte, leaseMs uint64, m fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: key, Owner: owner, LeaseMs: leaseMs, Match: m}
}

// Acquire is the Grant that takes a free lock: ghost-lock cleanup releases it if the client
// hangs up before its reply (fsm.Command.Acquire, Policy.Abandoned).
func Acquire(key, owner []byte, leaseMs uint64) fsm.Command {
	c := Grant(key, owner, leaseMs, fsm.Match{Kind: fsm.MatchAbsent})
	c.Acquire = true
	return c
}

// ByToken is the guard "held with token t".
func ByToken(t fsm.Token) fsm.Match { return fsm.Match{Kind: fsm.MatchToken, Token: t} }

// LockEval is one LOCK attempt's evaluation: a Grant on a free key, a Renew when the same
// explicit owner holds it, nothing (a refusal) otherwise.
func LockEval(key, owner []byte, ttl uint64, explicit bool) node.Eval {
	return func(v node.View) []fsm.Command {
		if c, ok := Lock(v, key, owner, ttl, explicit); ok {
			return []fsm.Command{c}
		}
		return nil
	}
}

// Lock is what one LOCK attempt proposes, if anything: the grant of a free key, or a renewal
// for the same owner asking again (OWNER given: a retry gets its token back).
func Lock(v node.View, key, owner []byte, ttl uint64, explicit bool) (fsm.Command, bool) {
	l, _, held := v.Lookup(key)
	if !held {
		return Acquire(key, owner, ttl), true
	}
	if explicit && l.Value == nil && bytes.Equal(l.Owner, owner) {
		return Renew(key, l.Token, ttl), true
	}
	return fsm.Command{}, false
}

// Unlock releases key if it is held with token.
func Unlock(key []byte, token fsm.Token) fsm.Command {
	return fsm.Command{Kind: fsm.KindRelease, Key: key, Match: ByToken(token)}
}

// Renew gives key a new lease of ttl ms if it is held with token.
func Renew(key []byte, token fsm.Token, ttl uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindRenew, Key: key, LeaseMs: ttl, Match: ByToken(token)}
}

// IfHolder is the evaluation that yields cmd if key is held with token, nothing otherwise
// (UNLOCK, RENEW).
func IfHolder(key []byte, token fsm.Token, cmd fsm.Command) node.Eval {
	return func(v node.View) []fsm.Command {
		if !Holds(v, key, token) {
			return nil
		}
		return []fsm.Command{cmd}
	}
}

// Holds reports whether key is held with token.
func Holds(v node.View, key []byte, token fsm.Token) bool {
	l, _, held := v.Lookup(key)
	return held && l.Token == token
}

// Set is what SET key value [NX] [PX lease] [KEEPTTL] proposes once its conditions held (NX,
// XX, GET are the server's to check): with NX it takes a free lock (Acquire's guard and ghost
// cleanup), otherwise it overwrites the holder l it saw (held) by its token, or a free key.
func Set(key, value []byte, lease uint64, keep, nx bool, l fsm.Lock, held bool) fsm.Command {
	m := fsm.Match{Kind: fsm.MatchAny}
	switch {
	case nx:
		m.Kind = fsm.MatchAbsent
	case held:
		m = ByToken(l.Token)
	}
	c := Grant(key, value, lease, m)
	c.KeepLease = keep
	c.Acquire = nx // SET … NX and SETNX take a lock; a plain SET overwrites
	return c
}
