package server

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// conn is one client connection. A reader goroutine parses commands ahead (up to
// Config.Pipeline) while serve executes them in order and writes their replies, flushing when
// no more are waiting: pipelined clients get their replies in few writes, and a client that hangs
// up is noticed even while one of its commands waits on raft.
type conn struct {
	s   *Server
	nc  net.Conn
	id  int64
	r   *resp.Reader
	out *resp.Writer // the socket; a request writes its reply where its own writer points

	// ctx ends when the client is gone (read EOF or error) or the server closes. Replica.Exec uses
	// it to release a lock granted to a client that can no longer hear about it.
	ctx    context.Context
	cancel context.CancelFunc

	// sinceDiskFailed: the connection was accepted after this node's disk failed, so it was
	// told MISCONF for what needs the leader from its first request, and the drop of the
	// connections that were waiting (dropClientsOnFailedDisk) is not for it.
	sinceDiskFailed bool

	// watched is how many locks lockWatch remembers for this connection: a connection with none
	// (every client of the Redis libraries, which take locks with SET NX) pays nothing for
	// lost-lock notices on its writes (noteOwnWrites).
	watched atomic.Int32

	// baton is held by whoever runs command code for this connection (pipeline.go): the
	// fields below have one user at a time.
	baton sync.Mutex
	// serveIdle: the serve goroutine waits with nothing in flight, and the reader may run a
	// lone command itself (inline.go); inline: the command running now is run so.
	serveIdle, inline bool
	// raw is the plain socket the inline path polls for a hang-up (nil: no inline path: a TLS
	// connection, or not Linux); hangupCtx is hangupBase with that check on it (inlineCtx).
	raw                   syscall.RawConn
	hangupBase, hangupCtx context.Context
	// pollFn is the poll peerGone runs on raw, made once; polledGone its answer
	// (inline_linux.go).
	pollFn     func(fd uintptr)
	polledGone bool
	// lastActive is when the last command finished (UnixNano), for the idle timeout.
	lastActive atomic.Int64
	// handedOver counts the commands the reader gave the serve goroutine that it has not
	// handled yet (inline.go).
	handedOver atomic.Int32
	sess       session
	pipe       pipeline
	// unproposed are staged commands whose first half ran and whose proposals wait to go to
	// the node together (stage.go: proposeStaged); proposals is its scratch list.
	unproposed []*stagedCall
	proposals  []node.Proposal
	// scratchW writes into scratchBuf: where a staged command's first half replies while
	// earlier commands are in flight (stage.go).
	scratchW   *resp.Writer
	scratchBuf bytes.Buffer
	// lastScript is the source of the last script EVAL ran here, and lastSHA its SHA1: a
	// client sends the same release script again and again (scriptSHA).
	lastScript, lastSHA string
	hop                 upstreamLink
	// pushes carries invalidations from the node's change hook to this connection's writer
	// (bounded: a client that does not read them is disconnected).
	pushes chan *push
	// pushBytes is what the queued pushes hold; softSince is when they went above the soft
	// output limit (UnixNano, 0: they are not above it). limits.go.
	pushBytes atomic.Int64
	softSince atomic.Int64
	overflow  atomic.Pointer[string] // why the output limit disconnects it
	// readAhead is the bytes of this connection's commands read and not yet finished.
	readAhead byteBudget
	// multiBytes is what the commands queued in the open transaction hold of the server's
	// read-ahead budget (transactions.go).
	multiBytes int64
	// argCopies is where the reader copies each command it reads (its goroutine's alone).
	argCopies argArena

	// listed is what CLIENT LIST on another connection shows of this one (publishInfo).
	listed atomic.Pointer[listedInfo]

	// lockSeq numbers this connection's LOCKs without OWNER, to give each a distinct owner; it
	// survives RESET, so owners stay unique.
	lockSeq uint64
	quit    bool

	// user is the ACL user the connection runs as (read by other goroutines: a deleted user's
	// connections are closed); authed says it authenticated (or needs not).
	user   atomic.Pointer[string]
	authed bool
	// authFailures counts the AUTH and HELLO AUTH attempts that failed on this connection
	// since its last success: past a few, each further attempt waits first (acl.go). RESET
	// keeps it.
	authFailures int
}

// session is the state a client sets up on its connection; RESET returns it to newSession().
type session struct {
	name    string
	libName string
	libVer  string
	// tokens remembers the locks this connection acquired, so it may UNLOCK and RENEW them
	// without repeating the token (DESIGN.md §7).
	tokens heldTokens
	// readonly (READONLY) lets reads be served from a follower's own table.
	readonly bool
	// slotAware marks a connection that asked CLUSTER SLOTS, SHARDS or NODES: a cluster-mode
	// client, which follows -MOVED to the leader of a key's group (forward.go).
	slotAware bool
	db        int // SELECTed database
	track     tracking
	subs      subscriptions
	// multi is the transaction being queued (MULTI ... EXEC), nil outside one; watches are the
	// WATCHed keys with what WATCH saw of them (transactions.go).
	multi   *transaction
	watches *watchSet
	// txHome is the replica of the raft group the WATCHed and queued keys are in, in a
	// several-group cluster (joinTxHome); nil when there are none.
	txHome Replica
}

func newSession() session { return session{} }

// upstreamLink is how this connection reaches the leader when its node is a follower.
type upstreamLink struct {
	// up is the connection to the leader that requests are forwarded over.
	up *upstream
	// forwarded marks a connection from a follower forwarding its client's requests: it is never
	// forwarded again, so a stale view of the leader cannot make a loop.
	forwarded bool
	// watching: this client's WATCHes were forwarded and live on the leader's side of up.
	// watchLost: up closed while watching, so the next EXEC fails as on a touched key.
	watching, watchLost bool
	// origin is, on a forwarded connection that said which follower it comes from (RAFT
	// ORIGIN), the connection's context marked with that follower's ID: its requests run with
	// it, so the locks they take name the node their client is on (node.WithOrigin).
	origin atomic.Pointer[context.Context]
}

// proposeCtx is the context c's requests are proposed with: c.ctx, marked with the follower
// it comes from on a forwarded link (only there: RAFT ORIGIN on any other connection labels
// nothing).
func (c *conn) proposeCtx() context.Context {
	base := c.ctx
	if o := c.hop.origin.Load(); o != nil && c.hop.forwarded {
		base = *o
	}
	if c.inline {
		return c.inlineCtx(base)
	}
	return base
}

// readResult is one parsed command, or the error that ended the stream.
type readResult struct {
	args [][]byte
	err  error
	// more: the reader had bytes of a further command buffered when it parsed this one, so
	// the client sent more behind it (a pipeline), even if the reader has not parsed it yet.
	more bool
	// size is the read-ahead bytes the command holds until it finishes (releaseRead).
	size int64
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:      s,
		nc:     nc,
		id:     s.nextID.Add(1),
		r:      resp.NewReader(nc, s.cfg.Limits),
		sess:   newSession(),
		pushes: make(chan *push, pushQueue),
	}
	c.out = resp.NewWriter(stallWriter{c})
	c.r.SetBudget(readerBudget{c})
	c.readAhead.limit = int64(s.cfg.ReadAheadBytes)
	_, c.sinceDiskFailed = s.failedDisk()
	c.ctx, c.cancel = context.WithCancel(s.ctx)
	c.resetAuth()
	c.publishInfo()
	c.setUpInline()
	return c
}

func (c *conn) serve() {
	reqs := make(chan readResult, c.s.cfg.Pipeline)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		c.readLoop(reqs)
	}()
	defer func() {
		c.cancel()
		c.setServeIdle(false) // an inline command finishes first, and no other starts
		c.drainPipeline()     // proposed commands finish (ghost-lock cleanup needs their outcome)
		c.s.tracker.forget(c)
		c.s.hub.forget(c, &c.sess.subs)
		c.s.lockWatch.forget(c)
		c.s.watches.forget(c.sess.watches)
		c.releaseQueued()
		c.closeUpstream()
		c.nc.Close()
		<-readerDone
		c.r.Discard()           // its buffer's bytes go back to the server's budget
		for req := range reqs { // read, never run: their bytes go back to the server's budget
			c.releaseRead(req.size)
		}
	}()
	// The idle timer (Config.IdleTimeout) is not reset for every command: each command notes
	// the time, and the timer, when it fires, waits out what is left.
	var idle <-chan time.Time
	var idleTimer *time.Timer
	if t := c.s.cfg.IdleTimeout; t > 0 {
		idleTimer = time.NewTimer(t)
		defer idleTimer.Stop()
		idle = idleTimer.C
		c.lastActive.Store(time.Now().UnixNano())
	}
	// handle serves one command read (ok false: the reader ended), and reports whether the
	// connection is done.
	handle := func(req readResult, ok bool) bool {
		if !ok {
			return true
		}
		if req.err != nil {
			c.drainPipeline()
			var pe *resp.ProtocolError
			if errors.As(req.err, &pe) {
				// As Redis does: say what was wrong, then close.
				c.out.Error("ERR " + pe.Error())
				c.out.Flush()
			}
			return true
		}
		cmd := lookupCommand(req.args[0])
		if (req.more || len(reqs) > 0 || len(c.pipe.inflight) > 0) && c.pipelinable(cmd, req.args) {
			c.startPipelined(cmd, req.args, req.size)
		} else {
			c.drainPipeline()
			c.baton.Lock()
			c.dispatch(c.out, cmd, req.args, nil)
			c.baton.Unlock()
			c.releaseRead(req.size)
		}
		// Handled: finished, or in flight (then head keeps this goroutine from going idle).
		c.handedOver.Add(-1)
		if idleTimer != nil {
			c.lastActive.Store(time.Now().UnixNano()) // after the command: a blocked one was not idle
		}
		if len(reqs) == 0 {
			// The next command is not read yet: the staged ones go to the node now. With one
			// waiting, they wait for it (stage.go), and the loop below takes it first.
			c.proposeStaged()
		}
		c.writeFinished()
		if c.quit {
			c.out.Flush()
			return true
		}
		return false
	}
	for {
		head := c.pipe.headDone()
		if head != nil {
			// Commands in flight: the next one read goes first, so that a pipeline is proposed
			// whole before the connection waits on an outcome (a staged read's leadership
			// check is only waited for when nothing else is to be done).
			select {
			case req, ok := <-reqs:
				if handle(req, ok) || c.flushIfIdle(reqs) != nil {
					return
				}
				continue
			default:
			}
		}
		if len(c.unproposed) > 0 {
			// Nothing was waiting to be read: the staged commands go to the node before the
			// connection waits on anything.
			c.proposeStaged()
			head = c.pipe.headDone()
		}
		// With nothing in flight the reader may run a lone command itself until this goroutine
		// wakes (inline.go).
		waitIdle := head == nil && len(c.unproposed) == 0
		if waitIdle {
			c.setServeIdle(true)
		}
		select {
		case req, ok := <-reqs:
			if waitIdle {
				c.setServeIdle(false)
			}
			if handle(req, ok) {
				return
			}
		case <-head:
			c.finishHead(true)
			c.writeFinished()
		case p := <-c.pushes:
			if waitIdle {
				c.setServeIdle(false)
			}
			// Between two replies, never inside one: pushes and replies stay whole. A
			// connection with tracking on runs its commands alone, so none is in flight.
			c.writePush(p)
		case <-idle:
			if waitIdle {
				c.setServeIdle(false)
			}
			left := c.s.cfg.IdleTimeout - time.Since(time.Unix(0, c.lastActive.Load()))
			if left <= 0 && c.idleExempt() {
				left = c.s.cfg.IdleTimeout
			}
			if left > 0 {
				idleTimer.Reset(left)
				break
			}
			c.s.log.Debug("closing an idle client", "client", c.id, "timeout", c.s.cfg.IdleTimeout)
			return
		case <-c.ctx.Done():
			return
		}
		if c.flushIfIdle(reqs) != nil {
			return
		}
	}
}

// flushIfIdle writes out the buffered replies unless more commands or pushes are waiting,
// which will add to them.
func (c *conn) flushIfIdle(reqs chan readResult) error {
	if len(reqs) == 0 && len(c.pushes) == 0 {
		return c.out.Flush()
	}
	return nil
}

// readLoop parses commands into reqs until the stream ends. End of stream means the client is
// gone: cancelling ctx at once is what lets in-flight grants be released as ghost locks.
func (c *conn) readLoop(reqs chan<- readResult) {
	defer close(reqs)
	for {
		args, err := c.r.ReadCommand()
		if err != nil {
			var pe *resp.ProtocolError
			if !errors.As(err, &pe) {
				c.cancel()
			}
			select {
			case reqs <- readResult{err: err}:
			case <-c.ctx.Done():
			}
			return
		}
		buffered := c.r.Buffered()
		more := buffered > 0
		// Past its read-ahead budget the connection reads no more until its commands catch up;
		// the budget is taken before the command is copied, and the reader's buffer was charged
		// before it grew for it (readerBudget).
		size := commandBytes(args)
		if msg := c.reserveRead(size); msg != "" || c.ctx.Err() != nil {
			if msg != "" {
				select {
				case reqs <- readResult{err: &resp.ProtocolError{Msg: msg}}:
				case <-c.ctx.Done():
				}
			}
			return
		}
		args = c.argCopies.copy(args, buffered)
		c.r.Release() // a buffer grown for this command goes back to the budget now
		if !more && len(reqs) == 0 && c.runInline(args, size) {
			continue
		}
		req := readResult{args: args, more: more, size: size}
		c.handedOver.Add(1) // before the send: the serve goroutine may handle it at once
		// reqs has room but for a long pipeline: try it alone first, which costs a fraction
		// of a select that also watches ctx.
		select {
		case reqs <- req:
			continue
		default:
		}
		select {
		case reqs <- req:
		case <-c.ctx.Done():
			c.releaseRead(size)
			return
		}
	}
}

// defaultOwner is the owner value of a LOCK without OWNER: unique to this request, so no other
// request ever counts as "the same owner" retrying.
func (c *conn) defaultOwner() []byte {
	c.lockSeq++
	b := make([]byte, 0, 48)
	b = append(b, c.s.cfg.NodeID...)
	b = append(b, ':')
	b = append(b, c.s.bootID...)
	b = append(b, ':')
	b = strconv.AppendInt(b, c.id, 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, c.lockSeq, 10)
	return b
}

// kill closes the connection from another one (CLIENT KILL): its reader and serve loop end.
func (c *conn) kill() {
	c.cancel()
	c.nc.Close()
}
