package server

// Transactions: MULTI, EXEC, DISCARD, WATCH, UNWATCH. EXEC runs every queued command in one
// evaluation on the leader, against an overlay as a script's redis.calls do, so the commands
// they yield replicate as one entry: all of them apply, on every node, or none (DESIGN.md §3).
// WATCH remembers what a linearizable read saw of each key and enters the connection in the
// leader's watch registry (watchRegistry). EXEC replies nil when a watched key changed since, or
// when a write touched it: as Redis's signalModifiedKey, every write command the leader evaluates
// touches the keys it writes, one that changes nothing included (INCRBY k 0, SET k same KEEPTTL,
// HSET h f same, a no-op LTRIM), while one that errors or decides not to write (WRONGTYPE, SET
// NX on a held key, ZADD of the same score, DEL of a missing key) does not. Both are checked under
// the view lock EXEC evaluates under, and touches are marked under it too, so a write is seen by
// every EXEC evaluated after it. A change that no write command makes (an expiry, a flush) is seen
// by the comparison.
//
// On a follower, MULTI and the queued commands stay local (each queued is checked as the leader
// would and answered QUEUED); EXEC sends MULTI, the queue and EXEC to the leader in one write and
// relays its reply. WATCH needs the leader's read: it is forwarded, and its watches live on the
// leader's side of this connection's upstream. If that upstream closes before EXEC (a leader
// change), EXEC replies nil, as if a watched key had changed: nobody can say it did not. So does
// EXEC of watches taken on this node when it no longer leads. (A node that loses leadership and
// wins it back before EXEC did not see the writes another leader evaluated meanwhile: the
// comparison still sees those that changed a watched key, not those that changed nothing.)

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// transaction is a connection's MULTI in progress.
type transaction struct {
	queued []queuedCommand
	// aborted: a command was refused while queueing (unknown, wrong arity, not allowed):
	// EXEC discards the transaction (EXECABORT), as Redis does.
	aborted bool
}

type queuedCommand struct {
	cmd  *command
	args [][]byte
}

// watched is what WATCH saw of a key. A change to the key changes one of them: a new holder its
// token (and value), a write or renewal its lease revision, a change of a collection its
// revision, a delete held. (A write that changes nothing, a SET KEEPTTL of the same value, changes
// none: the watch registry sees it.)
type watched struct {
	held     bool
	token    fsm.Token
	leaseRev uint64
	rev      uint64 // a collection's (fsm.Collection.Rev)
	value    string
}

// watchedOf is what v holds of key, a table key.
func watchedOf(v node.View, key []byte) watched {
	l, _, held := v.Lookup(key)
	w := watched{held: held, token: l.Token, leaseRev: l.LeaseRev, value: string(l.Owner)}
	if l.Value != nil {
		w.rev = l.Value.Rev
	}
	return w
}

// watchSet is one connection's WATCHes on this node: what WATCH saw of each key (seen, a table
// key's string), and whether a write touched one of them since (touched).
type watchSet struct {
	owner *conn
	seen  map[string]watched // used only by owner (its baton held)
	// overflowed: the connection went past maxWatchedKeys; its keys were let go, and its
	// next EXEC fails as on a touched key (owner's, as seen).
	overflowed bool
	// Guarded by watchRegistry.mu. execing: owner's EXEC is running, so owner's own writes (its
	// queued commands) do not touch it: Redis unwatches before it runs them. (EXEC's evaluation
	// may run again, and must not find what it wrote the first time.)
	touched, execing bool
}

// len is the number of keys ws watches (0 for nil).
func (ws *watchSet) len() int {
	if ws == nil {
		return 0
	}
	return len(ws.seen)
}

// maxWatchedKeys bounds the keys one connection WATCHes: at about 270 bytes each (the key twice,
// what WATCH saw of it), 1 MiB a connection.
const maxWatchedKeys = 4096

// watchRegistry is this node's record of the connections that WATCH each key, so that the
// writes it evaluates as the leader touch their watches (Redis's watched_keys and
// touchWatchedKey). The zero value is ready. Its lock comes after Replica.mu (a write touches its
// keys while it is evaluated) and nothing is called under it.
type watchRegistry struct {
	// keys counts the watched keys of every connection: while it is 0, a write command pays one
	// atomic load for the registry and nothing else (the lock hot path).
	keys atomic.Int64
	mu   struct {
		sync.Mutex
		byKey map[string][]*watchSet
	}
}

// add records what ws's WATCH saw of keys (table keys): the first WATCH of a key counts, as in
// Redis, and enters ws in the key's list.
func (wr *watchRegistry) add(ws *watchSet, keys [][]byte, seen []watched) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.mu.byKey == nil {
		wr.mu.byKey = map[string][]*watchSet{}
	}
	for i, k := range keys {
		if _, ok := ws.seen[string(k)]; ok {
			continue
		}
		ws.seen[string(k)] = seen[i]
		wr.mu.byKey[string(k)] = append(wr.mu.byKey[string(k)], ws)
		wr.keys.Add(1)
	}
}

// forget takes ws (nil: none) out of every key's list.
func (wr *watchRegistry) forget(ws *watchSet) {
	if ws.len() == 0 {
		return
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	for k := range ws.seen {
		list := slices.DeleteFunc(wr.mu.byKey[k], func(x *watchSet) bool { return x == ws })
		if len(list) == 0 {
			delete(wr.mu.byKey, k)
		} else {
			wr.mu.byKey[k] = list
		}
		wr.keys.Add(-1)
	}
}

// active reports whether any key is watched on this node.
func (wr *watchRegistry) active() bool { return wr.keys.Load() > 0 }

// touch marks the watches of key (a table key) as touched by a write of connection by: their
// EXEC will reply nil.
func (wr *watchRegistry) touch(key []byte, by *conn) {
	if !wr.active() {
		return
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	for _, ws := range wr.mu.byKey[string(key)] {
		ws.touched = ws.touched || !(ws.execing && ws.owner == by)
	}
}

// touchedSince reports whether a write touched one of ws's keys since it watched them.
func (wr *watchRegistry) touchedSince(ws *watchSet) bool {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return ws.touched
}

// execing marks ws's EXEC as running (watchSet.execing), until ws is forgotten.
func (wr *watchRegistry) execing(ws *watchSet) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	ws.execing = true
}

// touching wraps a write command's evaluation so that it touches the keys of the commands it
// yields (Redis's signalModifiedKey). A command that yields nothing touches nothing unless it
// says so itself (request.touch).
func (wr *watchRegistry) touching(eval node.Eval, by *conn) node.Eval {
	return func(v node.View) []fsm.Command {
		cmds := eval(v)
		for _, c := range cmds {
			switch c.Kind {
			case fsm.KindGrant, fsm.KindRelease, fsm.KindRenew, fsm.KindExpire, fsm.KindSetMember, fsm.KindRemoveMember, fsm.KindWrite:
				wr.touch(c.Key, by)
			}
		}
		return cmds
	}
}

// touch marks key (a table key) as written by this request although it yields no command for
// it: a write Redis signals even when it changes nothing (LTRIM that keeps every element). It is
// called while the request is evaluated.
func (r *request) touch(key []byte) {
	r.s.watches.touch(key, r.c)
}

// maxQueued bounds the commands one transaction may queue: EXEC evaluates them all under the
// view lock, and replicates their effects as one entry; maxQueuedBytes bounds what they hold
// (commandBytes), as Redis's client-query-buffer-limit bounds what a client's queue may hold.
// maxExecReply bounds the replies EXEC builds while it holds the view lock.
const (
	maxQueued      = 1024
	maxQueuedBytes = 8 << 20
	maxExecReply   = 64 << 20
)

// runsInMulti reports whether cmd runs at once inside MULTI rather than being queued.
func runsInMulti(cmd *command) bool {
	switch cmd.name {
	case "exec", "discard", "multi", "watch", "quit", "reset":
		return true
	}
	return false
}

// flagTransaction marks the transaction being queued as failed: a command was refused.
func (c *conn) flagTransaction() {
	if c.sess.multi != nil {
		c.sess.multi.aborted = true
	}
}

// queue adds a command to the transaction, or refuses it (and fails the transaction).
func (c *conn) queue(w *resp.Writer, cmd *command, args [][]byte) {
	tx := c.sess.multi
	switch {
	case cmd.name == "lock" || cmd.name == "semacquire" || cmd.name == "mlock":
		tx.aborted = true
		w.Error("ERR " + strings.ToUpper(cmd.name) + " is not allowed inside MULTI: its token is only known once the grant has applied; use SET key value NX PX ms")
		return
	case cmd.name == "flushdb" || cmd.name == "flushall":
		// EXEC's overlay cannot show a whole database gone to the commands after it.
		tx.aborted = true
		w.Error("ERR " + strings.ToUpper(cmd.name) + " is not allowed inside MULTI: send it on its own")
		return
	case len(tx.queued) >= maxQueued:
		tx.aborted = true
		w.Error("ERR too many commands in this transaction: raftlock queues at most " + itoa(maxQueued))
		return
	case c.s.overMemory.Load():
		// As Redis: above maxmemory, no command is queued, even a read.
		tx.aborted = true
		w.Error(errOOM)
		return
	}
	// The queue holds its commands past their read-ahead: they stay counted in the node's
	// read-ahead budget, without waiting for room (a transaction is refused instead).
	size := commandBytes(args)
	switch {
	case c.multiBytes+size > maxQueuedBytes:
		tx.aborted = true
		w.Error("ERR transaction too large: raftlock queues at most " + itoa(maxQueuedBytes) + " bytes of commands")
		return
	case !c.s.readAhead.tryAcquire(size):
		tx.aborted = true
		w.Error("ERR max read-ahead bytes reached on this node (" + itoa(c.s.readAhead.limit) + " bytes of commands not yet executed): the transaction is refused")
		return
	}
	if c.s.grouped() {
		// A transaction runs in one group (joinTxHome); a command without keys runs in
		// whichever, but one that must reach every group cannot run in a transaction.
		msg := ""
		switch keys := cmd.keyArgs(args); {
		case spansGroups(cmd, args):
			msg = "ERR " + strings.ToUpper(cmd.name) + " is not allowed inside MULTI on a cluster of several raft groups: send it on its own"
		case cmd.leader && len(keys) > 0 && !c.joinTxHome(keys):
			msg = errCrossSlot
		}
		if msg != "" {
			c.s.readAhead.release(size)
			tx.aborted = true
			w.Error(msg)
			return
		}
	}
	c.multiBytes += size
	tx.queued = append(tx.queued, queuedCommand{cmd: cmd, args: args})
	w.SimpleString("QUEUED")
}

// txHome is the replica of the group this connection's transaction runs in: the group of its
// WATCHed and queued keys (joinTxHome), group 0 when it has none.
func (c *conn) txHome() Replica {
	if c.sess.txHome != nil {
		return c.sess.txHome
	}
	return c.s.node
}

// joinTxHome makes keys' group (group 0 for none) the transaction's, and reports false when the
// transaction is already another group's, or keys are in different slots: in a several-group
// cluster a transaction runs in one group, as in Redis Cluster on one node.
func (c *conn) joinTxHome(keys [][]byte) bool {
	g, ok := c.s.groupOfKeys(keys)
	if !ok {
		return false
	}
	home := c.s.groups[g]
	if c.sess.txHome != nil && c.sess.txHome != home {
		return false
	}
	c.sess.txHome = home
	return true
}

// releaseQueued gives back what the transaction's queued commands held of the node's
// read-ahead budget: at EXEC, DISCARD and MULTI (after a RESET dropped a transaction), and
// when the connection ends.
func (c *conn) releaseQueued() {
	c.s.readAhead.release(c.multiBytes)
	c.multiBytes = 0
}

// MULTI
func cmdMulti(r *request) {
	if r.c.sess.multi != nil {
		r.w.Error("ERR MULTI calls can not be nested")
		return
	}
	r.c.releaseQueued() // a transaction RESET dropped
	r.c.sess.multi = &transaction{}
	r.w.SimpleString("OK")
}

// DISCARD
func cmdDiscard(r *request) {
	if r.c.sess.multi == nil {
		r.w.Error("ERR DISCARD without MULTI")
		return
	}
	r.c.sess.multi = nil
	r.c.releaseQueued()
	r.unwatch()
	r.w.SimpleString("OK")
}

// WATCH key [key ...]
func cmdWatch(r *request) {
	c := r.c
	if c.sess.multi != nil {
		r.w.Error("ERR WATCH inside MULTI is not allowed")
		return
	}
	keys := r.args[1:]
	if c.s.grouped() {
		if !c.joinTxHome(keys) {
			r.w.Error(errCrossSlot)
			return
		}
		r.home = c.txHome()
	}
	if !r.home.IsLeader() && !c.awaitLeaderOf(r.home) {
		if reply, ok := r.forward([][][]byte{r.args}, false); ok {
			if string(reply) == "+OK\r\n" {
				c.hop.watching = true
			}
			r.w.Raw(reply)
		}
		return
	}
	if len(keys) > maxWatchedKeys {
		r.w.Error("ERR too many keys to WATCH: raftlock watches at most " + itoa(maxWatchedKeys) + " keys per connection")
		return
	}
	if ws := c.sess.watches; ws != nil && ws.overflowed {
		r.w.SimpleString("OK") // the next EXEC fails whatever these keys do
		return
	}
	keys = dbKeys(r.db, keys)
	seen := make([]watched, len(keys))
	_, err := r.exec(keys, func(v node.View) []fsm.Command {
		for i, k := range keys {
			seen[i] = watchedOf(v, k)
		}
		return nil
	})
	if err != nil {
		r.replyError(err)
		return
	}
	if c.sess.watches.len()+len(keys) > maxWatchedKeys {
		// Key after key watched with no EXEC, DISCARD or UNWATCH: a pooled connection given
		// back after a WATCH that led nowhere, again and again, would keep every key (Redis
		// does). Past the bound the watches go, and the next EXEC fails as on a touched key:
		// a spurious abort, which a client of WATCH retries, never a missed one.
		r.s.watches.forget(c.sess.watches)
		c.sess.watches = &watchSet{owner: c, seen: map[string]watched{}, overflowed: true}
		r.w.SimpleString("OK")
		return
	}
	if c.sess.watches == nil {
		c.sess.watches = &watchSet{owner: c, seen: map[string]watched{}}
	}
	// Entered after the read: a write evaluated between the two is either seen by the
	// comparison (it changed the key) or changed nothing, and so may be ordered before WATCH.
	r.s.watches.add(c.sess.watches, keys, seen)
	r.w.SimpleString("OK")
}

// UNWATCH
func cmdUnwatch(r *request) {
	r.unwatch()
	r.w.SimpleString("OK")
}

// unwatch forgets this connection's watches, here and on the leader's side of its upstream.
func (r *request) unwatch() {
	c := r.c
	r.s.watches.forget(c.sess.watches)
	c.sess.watches = nil
	if c.sess.multi == nil {
		c.sess.txHome = nil
	}
	c.hop.watchLost = false
	if !c.hop.watching {
		return
	}
	c.hop.watching = false
	if !c.upstreamFits(r.home, r.w.Protocol(), r.db) {
		c.closeUpstream() // the leader's side forgets the watches with the link
		return
	}
	var sink bytes.Buffer
	quiet := *r
	quiet.w = resp.NewWriter(&sink) // a failure only means the watches went with the link
	quiet.forward([][][]byte{{[]byte("UNWATCH")}}, false)
}

// abortExec refuses EXEC before it runs (wrong arity, not permitted, RESP2 subscribed mode, the
// key bound), as Redis's execCommandAbort: the transaction, if one is open, is discarded with the
// connection's watches, and the reply says why: the refusal's text after "EXECABORT Transaction
// discarded because of: ", without its ERR. A following EXEC gets "EXEC without MULTI".
func (c *conn) abortExec(w *resp.Writer, cmd *command, args [][]byte, msg string) {
	c.sess.multi = nil
	c.releaseQueued()
	(&request{s: c.s, c: c, w: w, cmd: cmd, args: args, db: c.sess.db, home: c.txHome()}).unwatch()
	w.Error("EXECABORT Transaction discarded because of: " + strings.TrimPrefix(msg, "ERR "))
}

// EXEC
func cmdExec(r *request) {
	c := r.c
	tx := c.sess.multi
	if tx == nil {
		r.w.Error("ERR EXEC without MULTI")
		return
	}
	r.home = c.txHome()
	defer func() { c.sess.txHome = nil }()
	defer c.releaseQueued()
	c.sess.multi = nil
	if tx.aborted {
		r.unwatch()
		r.w.Error("EXECABORT Transaction discarded because of previous errors.")
		return
	}
	if c.hop.watching {
		// Watches live on the leader's side of the upstream: if the leader moved, the upstream
		// (and they) are gone, whether or not it was noticed yet.
		if addr := r.home.Leadership().ClientAddr; c.hop.up == nil || c.hop.up.addr != addr {
			c.closeUpstream()
		}
	}
	for _, q := range tx.queued {
		if q.cmd.denyOOM && c.s.full() {
			// Redis checks the key bound again at EXEC: the queue would create keys past it.
			c.abortExec(r.w, r.cmd, r.args, errOOM)
			return
		}
	}
	if ws := c.sess.watches; ws != nil && ws.overflowed {
		r.unwatch()
		r.w.NullArray()
		return
	}
	needsLeader := c.sess.watches.len() > 0 || c.hop.watching || c.hop.watchLost
	for _, q := range tx.queued {
		needsLeader = needsLeader || q.cmd.leader
	}
	switch {
	case !needsLeader:
		r.execLocal(tx, nil)
	case c.hop.watchLost || c.hop.watching && r.home.IsLeader() || c.sess.watches.len() > 0 && !c.awaitLeaderOf(r.home):
		// The watches were taken by another leader than the one that would run EXEC now.
		r.unwatch()
		r.w.NullArray()
	case r.home.IsLeader() || c.awaitLeaderOf(r.home):
		// The watches stay in the registry until EXEC's evaluation has checked them.
		ws := c.sess.watches
		c.sess.watches = nil
		r.execLocal(tx, ws)
		r.s.watches.forget(ws)
	default:
		r.execForwarded(tx)
	}
}

// execForwarded sends the transaction to the leader in one write and relays EXEC's reply.
func (r *request) execForwarded(tx *transaction) {
	c := r.c
	for _, q := range tx.queued {
		if !q.cmd.leader && !forwardableInMulti(q.cmd) {
			// It would change the follower's link to the leader, not the client's connection.
			r.unwatch()
			r.w.Error("EXECABORT Transaction discarded: '" + q.cmd.name + "' changes the connection and cannot run in a transaction sent through a follower; send it on its own, or to the leader")
			return
		}
	}
	if c.hop.watching && !c.upstreamFits(r.home, r.w.Protocol(), r.db) {
		// The watches live on the leader's side of the current upstream; a new one has none.
		r.unwatch()
		r.w.NullArray()
		return
	}
	cmds := make([][][]byte, 0, len(tx.queued)+2)
	cmds = append(cmds, [][]byte{[]byte("MULTI")})
	for i, q := range tx.queued {
		qr := *r
		qr.db = (&transaction{queued: tx.queued[:i+1]}).finalDB(r.db)
		args, ok := qr.rewriteTokenlessOf(q.cmd, q.args)
		if !ok {
			// The token is unknown here: no other command of the transaction runs either.
			r.unwatch()
			return
		}
		cmds = append(cmds, args)
	}
	cmds = append(cmds, r.args)
	reply, ok := r.forward(cmds, true)
	c.hop.watching = false // EXEC unwatches on the leader, whatever it replied
	if !ok {
		return
	}
	if db := tx.finalDB(r.db); db != r.db {
		// A queued SELECT moved the leader's side of the upstream to another database: this
		// side follows if EXEC ran, and the upstream is dialled afresh in any case.
		if len(reply) > 1 && reply[0] == '*' && reply[1] != '-' {
			c.sess.db = db
		}
		c.closeUpstream()
	}
	r.w.Raw(reply)
}

// forwardableInMulti reports whether a command that is not the leader's may still be queued in a
// transaction a follower forwards: it changes nothing of the connection (SELECT's change is
// followed here, see execForwarded).
func forwardableInMulti(cmd *command) bool {
	switch cmd.name {
	case "ping", "echo", "select", "time", "publish", "spublish":
		return true
	}
	return false
}

// finalDB is the database the connection is in after the queue's SELECTs, from db.
func (tx *transaction) finalDB(db int) int {
	for _, q := range tx.queued {
		if n, ok := parseInt(q.args[len(q.args)-1]); q.cmd.name == "select" && len(q.args) == 2 && ok && n >= 0 && n < fsm.Databases {
			db = int(n)
		}
	}
	return db
}

// execLocal runs the transaction on this node: the commands that read or write keys in one
// evaluation on the leader's view (one entry), after checking the watches under the same lock;
// then the others (connection and introspection commands, which must not run under the view
// lock), each reply in its place.
func (r *request) execLocal(tx *transaction, ws *watchSet) {
	c := r.c
	var keys [][]byte
	if ws != nil {
		r.s.watches.execing(ws)
		for k := range ws.seen {
			keys = append(keys, []byte(k))
		}
	}
	// Each queued command runs in the database the queue had SELECTed before it.
	dbs := make([]int, len(tx.queued))
	for i, q := range tx.queued {
		dbs[i] = (&transaction{queued: tx.queued[:i+1]}).finalDB(r.db)
		if q.cmd.leader {
			keys = append(keys, dbKeys(dbs[i], q.cmd.keyArgs(q.args))...)
			if t := c.sess.track.mode; t != trackOff && t != trackBcast && !q.cmd.write && !q.cmd.movable {
				for _, k := range q.cmd.keyArgs(q.args) {
					c.s.tracker.read(c, fsm.DBKey(dbs[i], k))
				}
			}
		}
	}
	proto := c.out.Protocol()
	replies := make([]bytes.Buffer, len(tx.queued))
	// As Redis, EXEC checks each command again: the user's rules may have changed since it
	// was queued. A command refused now gets the error in its place and does not run.
	denied := make([]bool, len(tx.queued))
	for i, q := range tx.queued {
		if d, ok := c.permit(q.cmd, q.args, "multi"); !ok {
			denied[i] = true
			w := resp.NewWriter(&replies[i])
			w.Error("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: " + d.execReason())
			w.Flush()
		}
	}
	var (
		dirty  bool
		tooBig bool // the replies passed maxExecReply: nothing is proposed
		ov     *overlay
	)
	hasKeyCommands := len(keys) > 0
	for _, q := range tx.queued {
		hasKeyCommands = hasKeyCommands || q.cmd.leader
	}
	var res []fsm.Result
	if hasKeyCommands {
		var err error
		eval := func(v node.View) []fsm.Command {
			dirty, tooBig, ov = false, false, newOverlay(v)
			defer ov.release()
			size := 0
			if ws != nil {
				if r.s.watches.touchedSince(ws) {
					dirty = true
					return nil
				}
				for k, w := range ws.seen {
					if watchedOf(v, []byte(k)) != w {
						dirty = true
						return nil
					}
				}
			}
			// One time limit for every script queued, and a short one: the evaluation holds the
			// view lock, so every other request on the node waits for the transaction's scripts
			// (a script on its own runs outside the lock once it passes lockedScriptBudget).
			ctx, cancel := context.WithTimeoutCause(c.ctx, min(r.s.cfg.ScriptTimeout, execScriptTime), errExecScriptTime)
			defer cancel()
			run := &scriptRun{ov: ov, tx: true, ctx: ctx}
			for i, q := range tx.queued {
				if denied[i] {
					continue
				}
				replies[i].Reset()
				if !q.cmd.leader {
					continue
				}
				w := resp.NewWriter(&replies[i])
				w.SetProtocol(proto)
				args := q.args
				if !q.cmd.movable {
					args = withDBKeys(q.cmd, args, dbs[i])
				}
				q.cmd.run(&request{s: r.s, c: c, w: w, cmd: q.cmd, args: args, db: dbs[i], path: onScript, script: run, home: r.home})
				w.Flush()
				if size += replies[i].Len(); size > maxExecReply {
					tooBig = true
					return nil
				}
			}
			return ov.cmds
		}
		// Its keys' slots may have moved since they were queued (slotmoves.go): it runs only
		// where they all are still served, else nothing of it does (-TRYAGAIN).
		var slots []int
		for _, k := range keys {
			if slot := fsm.SlotOf(k); !slices.Contains(slots, slot) {
				slots = append(slots, slot)
			}
		}
		guard, eval := r.s.guardForSlots(slots, eval)
		res, err = r.exec(keys, eval)
		if err == nil {
			err = guard.err()
		}
		switch {
		case err != nil:
			r.replyError(err)
			return
		case dirty:
			r.w.NullArray()
			return
		case tooBig:
			r.w.Error("ERR the transaction's replies would pass " + itoa(maxExecReply>>20) + " MiB; nothing was applied")
			return
		case !ov.appliedAsPredicted(res):
			r.w.Error("ERR the transaction's commands did not apply as they were evaluated (a key changed between EXEC and its replication: a leadership change intervened); none was applied, run it again")
			return
		}
	}
	for i, q := range tx.queued {
		if q.cmd.leader || denied[i] {
			continue
		}
		w := resp.NewWriter(&replies[i])
		w.SetProtocol(proto)
		// Not the leader's: it runs as on its own, where a request without keys does (group
		// 0: an ACL change must reach the users' table).
		q.cmd.run(&request{s: r.s, c: c, w: w, cmd: q.cmd, args: q.args, db: dbs[i], home: r.s.node})
		w.Flush()
	}
	r.w.Array(len(replies))
	for i := range replies {
		r.w.Raw(replies[i].Bytes())
	}
}
