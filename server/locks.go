package server

import (
	"bytes"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// exec runs one request through the node with the connection's context. On a follower, a
// READONLY connection's reads are answered from the local applied table (possibly stale).
func (c *conn) exec(keys [][]byte, eval func(fsm.View) []fsm.Command) ([]fsm.Result, error) {
	if c.script != nil {
		// Inside a script (redis.call): evaluate on the script's overlay; the script's
		// commands replicate together when it ends.
		return c.script.ov.apply(eval(c.script.ov)), nil
	}
	if c.readonly && c.cmd != nil && !c.cmd.write && !c.s.node.IsLeader() {
		c.s.node.ExecLocal(func(v fsm.View) { eval(v) })
		return nil, nil
	}
	return c.s.node.ExecYielding(c.ctx, keys, eval, c.awaitCommit)
}

// checkKey replies with an error and returns false when key breaks the size limit.
func (c *conn) checkKey(key []byte) bool {
	if len(key) > c.s.cfg.MaxKeyBytes {
		c.w.Error("ERR key is too long: raftlock keys are at most " + itoa(int64(c.s.cfg.MaxKeyBytes)) + " bytes")
		return false
	}
	return true
}

func (c *conn) checkValue(v []byte) bool {
	if len(v) > c.s.cfg.MaxValueBytes {
		c.w.Error("ERR value is too long: raftlock values are at most " + itoa(int64(c.s.cfg.MaxValueBytes)) + " bytes")
		return false
	}
	return true
}

// leaseArg parses a relative lease in milliseconds for the named command.
func (c *conn) leaseArg(arg []byte, cmd string) (uint64, bool) {
	ms, ok := parseInt(arg)
	if !ok {
		c.w.Error(errNotInt)
		return 0, false
	}
	if ms <= 0 || ms > c.s.cfg.MaxLeaseMs {
		c.w.Error("ERR invalid expire time in '" + cmd + "' command")
		return 0, false
	}
	return uint64(ms), true
}

func grant(key, owner []byte, leaseMs uint64, m fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: key, Owner: owner, LeaseMs: leaseMs, Match: m}
}

func byToken(t fsm.Token) fsm.Match { return fsm.Match{Kind: fsm.MatchToken, Token: t} }

// maxLockWait bounds LOCK ... WAIT: a waiting LOCK holds its connection.
const maxLockWait = 60 * 1000

// LOCK key ttl_ms [OWNER id] [WAIT ms] -> :token, or nil while another owner holds key (after
// waiting up to WAIT ms for it to be released or to expire).
func cmdLock(c *conn, args [][]byte) {
	key := args[1]
	if !c.checkKey(key) {
		return
	}
	var owner, waitArg []byte
	explicit := false
	for i := 3; i < len(args); i++ {
		switch {
		case is(args[i], "owner") && i+1 < len(args) && !explicit:
			owner, explicit = args[i+1], true
		case is(args[i], "wait") && i+1 < len(args) && waitArg == nil:
			waitArg = args[i+1]
		default:
			c.w.Error(errSyntax)
			return
		}
		i++
	}
	ttl, ok := c.leaseArg(args[2], "lock")
	if !ok || explicit && !c.checkValue(owner) {
		return
	}
	var wait int64
	if waitArg != nil {
		if wait, ok = parseInt(waitArg); !ok || wait < 0 || wait > maxLockWait {
			c.w.Error("ERR invalid WAIT: milliseconds from 0 to " + itoa(maxLockWait))
			return
		}
	}
	if !explicit {
		owner = c.defaultOwner()
	}
	var deadline *time.Timer
	for {
		// Watch the key before trying, so a release between the refusal and the wait is seen.
		changed, unwatch := c.s.waiters.watch(key)
		token, granted, err := c.tryLock(key, owner, ttl, explicit)
		if err != nil || granted || wait == 0 {
			unwatch()
			switch {
			case err != nil:
				c.replyError(err)
			case granted:
				c.w.Int(int64(token))
			default:
				c.w.Null()
			}
			return
		}
		if deadline == nil {
			deadline = time.NewTimer(time.Duration(wait) * time.Millisecond)
			defer deadline.Stop()
		}
		select {
		case <-changed:
		case <-deadline.C:
			unwatch()
			c.w.Null()
			return
		case <-c.ctx.Done():
			unwatch()
			return
		}
	}
}

// tryLock makes one LOCK attempt: a grant on a free key, a renewal when the same explicit owner
// holds it (a retry gets its token back), a refusal otherwise.
func (c *conn) tryLock(key, owner []byte, ttl uint64, explicit bool) (fsm.Token, bool, error) {
	refused := false
	res, err := c.exec([][]byte{key}, func(v fsm.View) []fsm.Command {
		refused = false
		l, _, held := v.Lookup(key)
		if !held {
			return []fsm.Command{grant(key, owner, ttl, fsm.Match{Kind: fsm.MatchAbsent})}
		}
		if explicit && bytes.Equal(l.Owner, owner) {
			// The same owner asking again (a retry): renew and return the same token.
			return []fsm.Command{{Kind: fsm.KindRenew, Key: key, LeaseMs: ttl, Match: byToken(l.Token)}}
		}
		refused = true
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	if !refused {
		switch r := res[0]; r.Status {
		case fsm.StatusGranted, fsm.StatusRenewed:
			c.s.stats.grants.Add(1)
			c.tokens[string(key)] = r.Token
			return r.Token, true, nil
		}
	}
	c.s.stats.refusals.Add(1)
	return 0, false, nil
}

// tokenArg returns the token a token-less UNLOCK/RENEW means: the one this connection holds.
func (c *conn) tokenArg(key []byte, arg []byte, cmd string) (fsm.Token, bool) {
	if arg != nil {
		t, ok := parseToken(arg)
		if !ok {
			c.w.Error("ERR invalid token: a fencing token is a positive integer")
			return 0, false
		}
		return fsm.Token(t), true
	}
	t, ok := c.tokens[string(key)]
	if !ok {
		c.w.Error("ERR this connection holds no lock on '" + string(key) + "': use " + cmd)
		return 0, false
	}
	return t, true
}

// holderToken reads the token of UNLOCK key [token] and RENEW key [token] ttl_ms: args[2] when
// args has all n entries, else the one this connection remembers for the key.
func (c *conn) holderToken(args [][]byte, n int, name string) (fsm.Token, bool) {
	if len(args) > n {
		c.w.Error("ERR wrong number of arguments for '" + name + "' command")
		return 0, false
	}
	var tokArg []byte
	if len(args) == n {
		tokArg = args[2]
	}
	return c.tokenArg(args[1], tokArg, strings.ToUpper(name)+" with the token")
}

// UNLOCK key [token] -> :1 released, :0 not held with that token.
func cmdUnlock(c *conn, args [][]byte) {
	key := args[1]
	token, ok := c.holderToken(args, 3, "unlock")
	if !ok {
		return
	}
	released, ok := c.applyIfHolder(key, token, fsm.Command{Kind: fsm.KindRelease, Key: key, Match: byToken(token)}, fsm.StatusReleased)
	if !ok {
		return
	}
	if t, ok := c.tokens[string(key)]; ok && t == token {
		delete(c.tokens, string(key))
	}
	if released {
		c.s.stats.releases.Add(1)
	}
	c.w.Int(b2i(released))
}

// RENEW key [token] ttl_ms -> :1 renewed, :0 not held with that token.
func cmdRenew(c *conn, args [][]byte) {
	key := args[1]
	token, ok := c.holderToken(args, 4, "renew")
	if !ok {
		return
	}
	ttl, ok := c.leaseArg(args[len(args)-1], "renew")
	if !ok {
		return
	}
	renewed, ok := c.applyIfHolder(key, token, fsm.Command{Kind: fsm.KindRenew, Key: key, LeaseMs: ttl, Match: byToken(token)}, fsm.StatusRenewed)
	if ok {
		c.w.Int(b2i(renewed))
	}
}

// LOCKINFO key -> {owner, token, pttl} or nil. pttl is -1 for a lock without a lease.
func cmdLockInfo(c *conn, args [][]byte) {
	l, pttl, held, ok := c.readKey(args[1])
	if !ok {
		return
	}
	if !held {
		c.w.Null()
		return
	}
	c.w.Map(3)
	c.w.BulkString("owner")
	c.w.Bulk(l.Owner)
	c.w.BulkString("token")
	c.w.Int(int64(l.Token))
	c.w.BulkString("pttl")
	c.w.Int(pttl)
}

// readKey reads one key linearizably (or from the local table on a READONLY follower
// connection): the lock, its remaining lease in ms (-1 without one, -2 when free). On an error it
// has replied already and returns ok false.
func (c *conn) readKey(key []byte) (l fsm.Lock, pttl int64, held, ok bool) {
	_, err := c.exec([][]byte{key}, func(v fsm.View) []fsm.Command {
		l, pttl, held = lookupTTL(v, key)
		return nil
	})
	if err != nil {
		c.replyError(err)
		return l, pttl, held, false
	}
	return l, pttl, held, true
}

// applyIfHolder replicates cmd if key is held with token, and reports whether it applied with
// the status want. On an error it has replied already and returns ok false.
func (c *conn) applyIfHolder(key []byte, token fsm.Token, cmd fsm.Command, want fsm.Status) (applied, ok bool) {
	res, err := c.exec([][]byte{key}, func(v fsm.View) []fsm.Command {
		if l, _, held := v.Lookup(key); !held || l.Token != token {
			return nil
		}
		return []fsm.Command{cmd}
	})
	if err != nil {
		c.replyError(err)
		return false, false
	}
	return len(res) == 1 && res[0].Status == want, true
}

// lookupTTL returns the lock on key and its remaining lease in ms (-1 without a lease).
func lookupTTL(v fsm.View, key []byte) (fsm.Lock, int64, bool) {
	l, rem, held := v.Lookup(key)
	if !held {
		return l, -2, false
	}
	if l.LeaseMs == 0 {
		return l, -1, true
	}
	return l, rem.Milliseconds(), true
}

// VALIDATE key token -> :1 while token is the holder's, else :0.
func cmdValidate(c *conn, args [][]byte) {
	t, ok := parseToken(args[2])
	if !ok {
		c.w.Error("ERR invalid token: a fencing token is a positive integer")
		return
	}
	l, _, held, ok := c.readKey(args[1])
	if !ok {
		return
	}
	valid := held && l.Token == fsm.Token(t)
	c.w.Int(b2i(valid))
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
