package locks

// What the lock commands propose: LOCK, UNLOCK, RENEW (DESIGN.md §7) and the SET NX family,
// evaluated against the leader's view. The server parses the commands and replies; the rules
// that decide which command a request yields, and its guard, are here.

import (
	"bytes"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Grant sets key to owner with a lease of leaseMs (0: none), guarded by m.
func Grant(key, owner []byte, leaseMs uint64, m fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: key, Owner: owner, LeaseMs: leaseMs, Match: m}
}

// Acquire is the Grant that takes a free lock: ghost-lock cleanup releases it if the client
// hangs up before its reply (fsm.Command.Acquire, Policy.ReleaseAbandoned).
func Acquire(key, owner []byte, leaseMs uint64) fsm.Command {
	c := Grant(key, owner, leaseMs, fsm.Match{Kind: fsm.MatchFree})
	c.Acquire = true
	return c
}

// ByToken is the guard "held with token t".
func ByToken(t fsm.Token) fsm.Match { return fsm.Match{Kind: fsm.MatchToken, Token: t} }

// Request is one request for a lock of any kind on one key: LOCK, LOCK ... SHARED, SEMACQUIRE,
// or one key of an MLOCK.
type Request struct {
	Key, Owner []byte
	TTL        uint64
	// Explicit: OWNER was given, so the same owner asking again renews its lock (a retry gets
	// its token back).
	Explicit bool
	// Shared asks for a share of a shared lock; Permits > 0 for a permit of a semaphore of that
	// many; neither for a plain lock.
	Shared  bool
	Permits uint64
	// Delay is the lock-delay after the lease expires, in milliseconds (0: none).
	Delay uint64
}

// Grant is the command that takes the lock q asks for on a key that has room: a Grant of the
// free key, or the Acquire of a share or a permit. Ghost-lock cleanup releases it if the client
// hangs up before its reply.
func (q Request) Grant() fsm.Command {
	if !q.Shared && q.Permits == 0 {
		c := Acquire(q.Key, q.Owner, q.TTL)
		c.Delay = q.Delay
		return c
	}
	return fsm.Command{Kind: fsm.KindAcquire, Key: q.Key, Owner: q.Owner, LeaseMs: q.TTL, Permits: q.Permits,
		Delay: q.Delay, Acquire: true}
}

// LockEval is one attempt's evaluation of q: its grant where there is room and nobody waits, a
// Renew when the same explicit owner holds it, nothing (a refusal) otherwise. A semaphore held
// with another permit count is refused with *PermitsError in *err.
func LockEval(q Request, err *error) node.Eval {
	return func(v node.View) []fsm.Command {
		c, ok, e := Lock(v, q)
		if err != nil {
			*err = e
		}
		if ok {
			return []fsm.Command{c}
		}
		return nil
	}
}

// mode is the waiter mode of what q asks for.
func (q Request) mode() fsm.WaiterMode {
	switch {
	case q.Permits > 0:
		return fsm.WaitPermit
	case q.Shared:
		return fsm.WaitShared
	}
	return fsm.WaitLock
}

// WaitEval is one attempt's evaluation of reqs (one request, or an MLOCK's one per key) that may
// wait up to waitMs: their grants, all of them, where there is room and nobody waits (a single
// request may renew, as LockEval); else their Enqueue, one per key at one place, so the leader
// grants them in their turn; nothing when refused with an error (*PermitsError in *err).
func WaitEval(reqs []Request, waitMs uint64, err *error) node.Eval {
	return func(v node.View) []fsm.Command {
		*err = nil
		if len(reqs) == 1 {
			c, ok, e := Lock(v, reqs[0])
			if *err = e; e != nil {
				return nil
			}
			if ok {
				return []fsm.Command{c}
			}
		} else if cmds, ok := lockAll(v, reqs); ok {
			return cmds
		}
		return Enqueue(reqs, waitMs)
	}
}

// lockAll is the grants of every one of reqs (plain locks, an MLOCK's), or none.
func lockAll(v node.View, reqs []Request) ([]fsm.Command, bool) {
	cmds := make([]fsm.Command, 0, len(reqs))
	for _, q := range reqs {
		c, ok, _ := Lock(v, q)
		if !ok || c.Kind != fsm.KindGrant {
			return nil, false
		}
		cmds = append(cmds, c)
	}
	return cmds, true
}

// Enqueue is the commands that put reqs (one request, or an MLOCK's one per key) in their keys'
// queues, waiting up to waitMs, at one place.
func Enqueue(reqs []Request, waitMs uint64) []fsm.Command {
	w := fsm.WaiterRequest{Mode: reqs[0].mode(), TTL: reqs[0].TTL, Permits: reqs[0].Permits, Delay: reqs[0].Delay, Owner: reqs[0].Owner}
	if len(reqs) > 1 {
		for _, q := range reqs {
			w.Keys = append(w.Keys, q.Key)
		}
	}
	owner := fsm.EncodeWaiter(w)
	cmds := make([]fsm.Command, len(reqs))
	for i, q := range reqs {
		cmds[i] = fsm.Command{Kind: fsm.KindEnqueue, Key: q.Key, Owner: owner, LeaseMs: waitMs, KeepLease: i > 0}
	}
	return cmds
}

// Lock is what one attempt of q proposes, if anything: the grant where there is room and nobody
// waits ahead of it, or a renewal for the same owner asking again (OWNER given: a retry gets its
// token back). A semaphore held with another permit count is an error.
func Lock(v node.View, q Request) (fsm.Command, bool, error) {
	l, _, held := v.Lookup(q.Key)
	if held {
		if q.Explicit && !q.Shared && q.Permits == 0 && l.Value == nil && bytes.Equal(l.Owner, q.Owner) {
			return Renew(q.Key, l.Token, q.TTL), true, nil
		}
		return fsm.Command{}, false, nil
	}
	k, _ := v.Kinds(q.Key)
	if !q.Shared && q.Permits == 0 {
		if k.Blocks() || k.Waiting {
			return fsm.Command{}, false, nil
		}
		return q.Grant(), true, nil
	}
	if k.Holders > 0 && k.Permits != q.Permits {
		return fsm.Command{}, false, &PermitsError{Permits: k.Permits}
	}
	if q.Explicit && k.Holders > 0 {
		var mine fsm.Lock
		v.Holders(q.Key, func(h fsm.Lock, _ time.Duration) bool {
			if bytes.Equal(h.Owner, q.Owner) {
				mine = h
				return false
			}
			return true
		})
		if mine.Token != 0 {
			return Renew(fsm.HolderKey(q.Key, mine.Token), mine.Token, q.TTL), true, nil
		}
	}
	if k.Waiting || !newRoom(v).fitsOne(q.Key, q.mode(), q.Permits) {
		return fsm.Command{}, false, nil
	}
	return q.Grant(), true, nil
}

// HolderCommand is cmd (a Release or a Renew by token) aimed at whoever holds key with token:
// the key's plain lock, or its share or permit of that token. ok is false when nobody does.
func HolderCommand(v node.View, cmd fsm.Command, token fsm.Token) (fsm.Command, bool) {
	if l, _, held := v.Lookup(cmd.Key); held {
		return cmd, l.Token == token
	}
	hk := fsm.HolderKey(cmd.Key, token)
	if l, _, held := v.Lookup(hk); !held || l.Token != token {
		return cmd, false
	}
	cmd.Key = hk
	return cmd, true
}

// Unlock releases key if it is held with token.
func Unlock(key []byte, token fsm.Token) fsm.Command {
	return fsm.Command{Kind: fsm.KindRelease, Key: key, Match: ByToken(token)}
}

// Renew gives key a new lease of ttl ms if it is held with token.
func Renew(key []byte, token fsm.Token, ttl uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindRenew, Key: key, LeaseMs: ttl, Match: ByToken(token)}
}

// IfHolder is the evaluation that yields cmd if key is held with token (as its plain lock, or a
// share or a permit of it: then cmd goes to that holder's key), nothing otherwise (UNLOCK,
// RENEW, SEMRELEASE).
func IfHolder(key []byte, token fsm.Token, cmd fsm.Command) node.Eval {
	return func(v node.View) []fsm.Command {
		c, ok := HolderCommand(v, cmd, token)
		if !ok {
			return nil
		}
		return []fsm.Command{c}
	}
}

// Holds reports whether key is held with token: its plain lock, or a share or a permit of it.
func Holds(v node.View, key []byte, token fsm.Token) bool {
	_, ok := HolderCommand(v, fsm.Command{Key: key}, token)
	return ok
}

// Set is what SET key value [NX] [PX lease] [KEEPTTL] proposes once its conditions held (NX,
// XX, GET are the server's to check): with NX it takes a free lock (Acquire's guard and ghost
// cleanup), otherwise it overwrites the holder l it saw (held) by its token, or a free key.
func Set(key, value []byte, lease uint64, keep, nx bool, l fsm.Lock, held bool) fsm.Command {
	m := fsm.Match{Kind: fsm.MatchAny}
	switch {
	case nx:
		m.Kind = fsm.MatchFree
	case held:
		m = ByToken(l.Token)
	}
	c := Grant(key, value, lease, m)
	c.KeepLease = keep
	c.Acquire = nx // SET … NX and SETNX take a lock; a plain SET overwrites
	return c
}
