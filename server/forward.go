package server

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/resp"
)

// maxRelayedReply bounds one reply relayed from the leader.
const maxRelayedReply = 16 << 20

// upstream is a follower's connection to the leader on behalf of one client connection. Each
// client gets its own, so replies can never mix, the leader sees one client per client (its
// token-less UNLOCK and ghost-lock cleanup work), and a client hang-up closes it.
type upstream struct {
	addr  string
	proto int
	db    int // the database it SELECTed
	nc    net.Conn
	br    *bufio.Reader
	w     *resp.Writer
	stop  func() bool // unregisters the close-on-hang-up hook
	// turn is closed when the reply to the last command sent has been read. Pipelined
	// commands send theirs in order and each reads its reply after the one before it.
	turn chan struct{}
	// used is when it was dialled or last read a reply (UnixNano): the leader closes links
	// idle past its --timeout like any client's, so an idle one is checked before reuse.
	used atomic.Int64
}

// upstreamProbeAfter: a link idle this long is probed before reuse (the shortest --timeout a
// leader may have is 1 s).
const upstreamProbeAfter = 500 * time.Millisecond

// upstreamProbeWait is how long the probe of an idle link waits for the leader's close.
const upstreamProbeWait = time.Millisecond

// fresh reports whether u may carry the next request: it is in use (a reply pending), or was
// used recently, or, idle for a while, the leader has not closed it, and it is idle for less
// than half of this node's idleTimeout (every node should have the same --timeout, so the
// leader will not close it while the request is on its way). keep says it holds state that a
// new link would lose (WATCHes): then only a link the leader closed is given up.
func (u *upstream) fresh(now time.Time, idleTimeout time.Duration, keep bool) bool {
	select {
	case <-u.turn:
	default:
		return true // replies pending: alive, and its reader owns br
	}
	idle := now.Sub(time.Unix(0, u.used.Load()))
	if idle < upstreamProbeAfter {
		return true
	}
	if idleTimeout > 0 && idle >= idleTimeout/2 && !keep {
		return false
	}
	// Nothing is due from the leader: a read that returns at once finds the link closed (or,
	// with bytes, out of step); a timeout finds it open. (A deadline already past would fail
	// the read before it looks at the socket.)
	u.nc.SetReadDeadline(now.Add(upstreamProbeWait))
	_, err := u.br.Peek(1)
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (u *upstream) close() {
	u.stop()
	u.nc.Close()
}

// dialUpstream connects to the leader at addr, marks the connection as a forwarding hop (so the
// leader never forwards it again) and matches the client's protocol.
func (c *conn) dialUpstream(addr string, proto, db int) (*upstream, error) {
	d := net.Dialer{Timeout: 2 * time.Second}
	var nc net.Conn
	var err error
	if c.s.cfg.PeerTLS != nil {
		// The leader's client port speaks TLS too: verify its certificate against the CA and
		// present this node's, as a client of the leader's port must.
		td := tls.Dialer{NetDialer: &d, Config: c.s.cfg.PeerTLS}
		nc, err = td.DialContext(c.ctx, "tcp", addr)
	} else {
		nc, err = d.DialContext(c.ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	u := &upstream{addr: addr, proto: proto, db: db, nc: nc, br: bufio.NewReader(nc), w: resp.NewWriter(nc), turn: make(chan struct{})}
	close(u.turn)
	// The client is gone: drop the leader connection at once, so the leader releases any lock
	// it grants this client from now on (ghost-lock cleanup happens there).
	u.stop = context.AfterFunc(c.ctx, func() { nc.Close() })
	u.used.Store(time.Now().UnixNano())
	// The link logs in as a peer (RAFT FORWARDED is @admin) and then acts for the client's
	// user: the leader checks the client's requests as that user's. The client's password
	// stays on this node.
	n := 0
	if pw := c.s.cfg.PeerPassword; pw != "" {
		writeCommand(u.w, [][]byte{[]byte("AUTH"), []byte(cmp.Or(c.s.cfg.PeerUser, "default")), []byte(pw)})
		n++
	}
	// The locks this client takes name this node (LOCKS): said while the link is still the
	// peer's (RAFT ORIGIN is @admin), before it acts for the client's user. A leader older than
	// RAFT ORIGIN refuses it, which costs nothing but the name: its reply is the one error
	// allowed.
	origin := -1
	if id := c.s.cfg.NodeID; id != "" {
		writeCommand(u.w, [][]byte{[]byte("RAFT"), []byte("ORIGIN"), []byte(id)})
		origin = n
		n++
	}
	writeCommand(u.w, [][]byte{[]byte("RAFT"), []byte("FORWARDED"), []byte(*c.user.Load())})
	n++
	if u.proto == 3 {
		writeCommand(u.w, [][]byte{[]byte("HELLO"), []byte("3")})
		n++
	}
	if db != 0 {
		writeCommand(u.w, [][]byte{[]byte("SELECT"), []byte(itoa(int64(db)))})
		n++
	}
	nc.SetDeadline(time.Now().Add(c.s.cfg.ForwardTimeout))
	if err := u.w.Flush(); err != nil {
		u.close()
		return nil, err
	}
	for i := 0; i < n; i++ {
		reply, err := resp.ReadReply(u.br, maxRelayedReply)
		if err != nil {
			u.close()
			return nil, err
		}
		if reply[0] == '-' && i != origin {
			u.close()
			return nil, errors.New(string(reply[1 : len(reply)-2]))
		}
	}
	return u, nil
}

func writeCommand(w *resp.Writer, args [][]byte) {
	w.Array(len(args))
	for _, a := range args {
		w.Bulk(a)
	}
}

// upstreamFits reports whether the current upstream is the one forward would use now for a
// request of home's group (its leader's address, the protocol, the database, and still open): else forward dials a new one.
func (c *conn) upstreamFits(home Replica, proto, db int) bool {
	addr := home.Leadership().ClientAddr
	u := c.hop.up
	return u != nil && u.addr == addr && u.proto == proto && u.db == db && u.fresh(time.Now(), c.s.cfg.IdleTimeout, c.hop.watching)
}

// closeUpstream drops the leader connection (leader change, protocol change, client gone).
func (c *conn) closeUpstream() {
	if c.hop.up != nil {
		c.hop.up.close()
		c.hop.up = nil
	}
	if c.hop.watching {
		// The leader's connection held this client's WATCHes: they are gone with it, so the
		// next EXEC must fail as if a watched key had changed.
		c.hop.watching, c.hop.watchLost = false, true
	}
}

// route sends the request to the leader: forwarded over this connection's upstream, or
// answered with -MOVED in redirect mode, or with a clear error when there is no leader to send
// it to. mayApply says whether the leader may have changed something when the link fails
// mid-request (then the client hears UNCERTAIN, not "try again").
func (r *request) route(mayApply bool) {
	args, ok := r.rewriteTokenless()
	if !ok {
		return
	}
	if wait := lockWaitOf(r.cmd, args); wait > 0 {
		if args = r.forwardedWait(args, wait); args == nil {
			r.w.Error(errSyntax)
			return
		}
	}
	reply, ok := r.forward([][][]byte{args}, mayApply)
	if !ok {
		return
	}
	if movedReply(reply) && !r.c.sess.slotAware && !r.s.grouped() {
		// A node of one group whose cluster moved the slot to a group it added (RAFT GROUPS):
		// it cannot route there until restarted to run that group.
		r.w.Error(errSlotNotRunHere)
		return
	}
	if movedReply(reply) && (!r.c.sess.slotAware || tokenless(r.cmd, r.clientArgs)) && r.s.grouped() && r.c.sess.multi == nil {
		// The leader found the slot elsewhere (slotmoves.go): route it again from here, for a
		// client that does not follow MOVED, and for a token-less UNLOCK or RENEW, whose token
		// is this connection's.
		r.reroute()
		return
	}
	if r.cmd.movable && r.trackReads {
		// The leader ran the script: this node cannot see what it read, so it tracks the keys
		// the script declares (a superset: at worst a spurious invalidation).
		for _, k := range r.cmd.keyArgs(args) {
			r.s.tracker.read(r.c, fsm.DBKey(r.db, k))
		}
	}
	r.w.Raw(reply)
	r.noteForwardedReply(args, reply)
}

// slotRouted reports whether this request is to be told MOVED rather than forwarded: on a
// cluster of several groups, a keyed command outside a transaction or script, from a
// connection that read the slots' owners (session.slotAware), as Redis Cluster answers a
// cluster-mode client. Other requests (plain clients, keyless commands, EXEC) are forwarded.
//
// A token-less UNLOCK or RENEW is forwarded even then: its token comes from this connection's
// memory, which the connection the client would open to the leader does not have.
func (r *request) slotRouted() bool {
	return r.s.grouped() && r.c.sess.slotAware && r.path == onLeader && r.c.sess.multi == nil && len(r.cmd.keyArgs(r.args)) > 0 &&
		!tokenless(r.cmd, r.args)
}

// forward sends cmds to the leader in one write, in order, over this connection's upstream,
// and returns the raw reply to the last (the others are read and dropped: a transaction's MULTI
// and QUEUED). On failure it has replied (no leader, redirect, unreachable, UNCERTAIN when the
// link broke and mayApply) and returns ok false.
func (r *request) forward(cmds [][][]byte, mayApply bool) (reply []byte, ok bool) {
	c, cmd := r.c, r.cmd
	l := r.home.Leadership()
	id, addr := l.ID, l.ClientAddr
	if r.s.grouped() {
		// This node's disk failed under one of its groups: as one whose raft stopped, it
		// forwards nothing (another group's raft here may not have seen it yet).
		if msg, failed := r.s.failedDisk(); failed {
			r.s.metrics.refuse(refusedNoLeader)
			r.w.Error(msg)
			return nil, false
		}
	}
	switch {
	case id == "" || id == r.s.cfg.NodeID:
		// No leader, or it is us but not ready yet (catching up after the election); or this
		// node's disk failed, which stopped its raft.
		r.s.metrics.refuse(refusedNoLeader)
		if msg, failed := r.s.failedDisk(); failed {
			r.w.Error(msg)
			return nil, false
		}
		r.w.Error(errNoLeader)
		return nil, false
	case addr == "":
		r.s.metrics.refuse(refusedNoLeader)
		r.w.Error("CLUSTERDOWN the leader " + id + " has not announced its client address yet; retry shortly")
		return nil, false
	case r.s.cfg.Redirect, r.slotRouted(), r.s.grouped() && c.hop.forwarded && r.c.sess.multi == nil && len(cmd.keyArgs(r.args)) > 0:
		// A forwarded keyed request this node would send on to another group's leader (its
		// slot moved, or leadership did): the node it came from routes it again (route), or
		// its cluster-mode client does, rather than a chain of forwards.
		slot := 0
		if keys := cmd.keyArgs(r.args); len(keys) > 0 {
			slot = fsm.KeySlot(keys[0])
		}
		r.w.Error("MOVED " + strconv.Itoa(slot) + " " + addr)
		return nil, false
	case c.hop.forwarded:
		// The leader we forwarded to thinks someone else leads: do not start a chain.
		r.w.Error("TRYAGAIN leadership is moving; the leader is " + id + " at " + addr)
		return nil, false
	}
	proto := r.w.Protocol()
	if c.hop.up != nil && (c.hop.up.addr != addr || c.hop.up.proto != proto || c.hop.up.db != r.db ||
		!c.hop.up.fresh(time.Now(), r.s.cfg.IdleTimeout, c.hop.watching)) {
		if c.hop.up.addr != addr && r.s.grouped() {
			// Pipelined requests of another group's leader may still wait for their replies
			// on it (each reads its own, without the baton): closing it now would tell them
			// their outcome is unknown.
			<-c.hop.up.turn
		}
		c.closeUpstream()
	}
	if c.hop.up == nil {
		up, err := c.dialUpstream(addr, proto, r.db)
		if err != nil {
			if c.ctx.Err() == nil {
				r.w.Error("TRYAGAIN cannot reach the leader " + id + " at " + addr + ": " + err.Error())
			}
			return nil, false
		}
		c.hop.up = up
	}
	u := c.hop.up
	u.nc.SetDeadline(time.Now().Add(r.s.cfg.ForwardTimeout + lockWaitOf(cmd, cmds[len(cmds)-1]) + moveWaitOf(cmd, cmds[len(cmds)-1])))
	r.s.forwards.watch(u.nc, id)
	for _, args := range cmds {
		writeCommand(u.w, args)
	}
	err := u.w.Flush()
	prev, mine := u.turn, make(chan struct{})
	u.turn = mine
	// A pipelined command lets the next one be sent while it waits for its reply.
	r.await(func() {
		<-prev
		for range cmds {
			if err == nil {
				reply, err = resp.ReadReply(u.br, maxRelayedReply)
			}
		}
		u.used.Store(time.Now().UnixNano())
		close(mine)
	})
	r.s.forwards.unwatch(u.nc, id)
	if err != nil {
		if c.hop.up == u {
			c.closeUpstream()
		}
		switch {
		case c.ctx.Err() != nil:
			// The client is gone; nothing to tell it.
		case r.resume != nil && r.resume():
			// A LOCK ... WAIT waits on here, at its place in the queue.
		case mayApply:
			// The leader may have applied it: say so rather than guess.
			r.w.Error(errUncertain)
		default:
			r.w.Error("TRYAGAIN lost the connection to the leader " + id + ": " + err.Error())
		}
		return nil, false
	}
	r.s.stats.forwarded.Add(1)
	return reply, true
}

// forwardedWait readies a LOCK, SEMACQUIRE or MLOCK with WAIT (args) for the leader: it names an
// owner of this node's choosing when the client named none, by which this node can find its
// waiter in the queue, and sets r.resume to go on waiting here if the leader goes away. It
// returns nil for an MLOCK it cannot name one in (a syntax error).
func (r *request) forwardedWait(args [][]byte, wait time.Duration) [][]byte {
	opts, keys := 3, args[1:2]
	switch r.cmd.name {
	case "semacquire":
		opts = 4
	case "mlock":
		opts = mlockKeysEnd(args)
		keys = args[2:opts]
	}
	var owner []byte
	pairs := 0
	for i := opts; i < len(args); i++ {
		if is(args[i], "shared") {
			continue
		}
		if is(args[i], "owner") && i+1 < len(args) {
			owner = args[i+1]
		}
		pairs++
		i++
	}
	if owner == nil {
		if r.cmd.name == "mlock" && pairs >= 3 {
			return nil // three options and none is OWNER: one is there twice, which the leader refuses
		}
		owner = r.c.defaultOwner()
		args = append(append(args[:len(args):len(args)], []byte("OWNER")), owner)
	}
	reqs := make([]lockRequest, len(keys))
	for i, k := range keys {
		reqs[i].Key, reqs[i].Owner = fsm.DBKey(r.db, k), owner
	}
	start := time.Now()
	r.resume = func() bool {
		left := max(wait-time.Since(start), time.Millisecond)
		return r.resumeWait(reqs, left)
	}
	return args
}

// lockWaitOf is how long a LOCK ... WAIT ms may legitimately wait on the leader.
func lockWaitOf(cmd *command, args [][]byte) time.Duration {
	if cmd.name != "lock" && cmd.name != "semacquire" && cmd.name != "mlock" {
		return 0
	}
	for i := 2; i+1 < len(args); i++ {
		if is(args[i], "wait") {
			if ms, ok := parseInt(args[i+1]); ok && ms > 0 && ms <= maxLockWait {
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	return 0
}

// rewriteTokenless fills in the token of a token-less UNLOCK or RENEW from the locks this
// connection acquired, so the forms work the same through a follower even after its upstream
// connection changed.
func (r *request) rewriteTokenless() ([][]byte, bool) {
	return r.rewriteTokenlessOf(r.cmd, r.args)
}

func (r *request) rewriteTokenlessOf(cmd *command, args [][]byte) ([][]byte, bool) {
	if !tokenless(cmd, args) {
		return args, true
	}
	const tokenAt = 2
	t, ok := r.tokenArg(fsm.DBKey(r.db, args[1]), nil, cmd.name)
	if !ok {
		return nil, false
	}
	out := append([][]byte{}, args[:tokenAt]...)
	out = append(out, strconv.AppendUint(nil, uint64(t), 10))
	return append(out, args[tokenAt:]...), true
}

// tokenless reports whether args are UNLOCK key or RENEW key ms: the forms whose token is the
// one this connection was granted (DESIGN.md §7).
func tokenless(cmd *command, args [][]byte) bool {
	return cmd.name == "unlock" && len(args) == 2 || cmd.name == "renew" && len(args) == 3
}

// noteForwardedReply keeps the connection's own token memory in step with forwarded replies.
func (r *request) noteForwardedReply(args [][]byte, reply []byte) {
	tokens := &r.c.sess.tokens
	switch r.cmd.name {
	case "lock", "semacquire":
		if reply[0] == ':' {
			if t, ok := parseToken(reply[1 : len(reply)-2]); ok {
				tokens.remember(fsm.DBKey(r.db, args[1]), fsm.Token(t))
				if r.w.Protocol() == 3 {
					r.s.lockWatch.hold(r.c, fsm.DBKey(r.db, args[1]), fsm.Token(t))
				}
			}
		}
	case "semrelease":
		if string(reply) == ":1\r\n" {
			if t, ok := parseToken(args[2]); ok {
				r.s.lockWatch.released(r.c, fsm.DBKey(r.db, args[1]), fsm.Token(t))
			}
		}
	case "mlock":
		// An array of tokens, one per key in order: ":t\r\n" each after the "*n\r\n" header.
		if reply[0] != '*' {
			return
		}
		lines := strings.Split(string(reply), "\r\n")
		keys := args[2:mlockKeysEnd(args)]
		for i, k := range keys {
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], ":") {
				return
			}
			if t, ok := parseToken([]byte(lines[i+1][1:])); ok {
				tokens.remember(fsm.DBKey(r.db, k), fsm.Token(t))
				if r.w.Protocol() == 3 {
					r.s.lockWatch.hold(r.c, fsm.DBKey(r.db, k), fsm.Token(t))
				}
			}
		}
	case "unlock":
		if string(reply) == ":1\r\n" {
			key := fsm.DBKey(r.db, args[1])
			tokens.forget(key)
			if len(args) == 3 { // the token, filled in by rewriteTokenless when the client left it out
				if t, ok := parseToken(args[2]); ok {
					r.s.lockWatch.released(r.c, key, fsm.Token(t))
				}
			}
		}
	}
}
