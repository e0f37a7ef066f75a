package server

// Resource bounds that are not one command's: bytes read ahead, clients' output, idle
// connections and the node's memory (DESIGN.md §10). Each refuses or disconnects with a reply
// or a log line that says which bound it was.

import (
	"context"
	"errors"
	"os"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/raftlock/raftlock/resp"
)

// OutputLimit is Redis's client-output-buffer-limit for what a client is sent without asking:
// pub/sub messages and tracking invalidations queue for its writer, and a client that does not
// read them is disconnected. Replies need no byte limit: a connection writes each reply before
// it runs the next command, so a client that does not read its replies stops its own
// connection (its socket then accepts nothing, and WriteStall ends it).
type OutputLimit struct {
	// Hard disconnects a client at once when its queued pushes pass this many bytes.
	// Default 32 MiB (Redis's pubsub class).
	Hard int
	// Soft disconnects a client whose queued pushes stay above this many bytes for SoftTime.
	// Default 8 MiB for 60 s (Redis's pubsub class).
	Soft     int
	SoftTime time.Duration
	// WriteStall disconnects a client whose socket accepts no byte for this long while the
	// server has replies or pushes for it. Default 60 s.
	WriteStall time.Duration
}

// DefaultOutputLimit returns the default output limits.
func DefaultOutputLimit() OutputLimit {
	return OutputLimit{Hard: 32 << 20, Soft: 8 << 20, SoftTime: time.Minute, WriteStall: time.Minute}
}

// byteBudget bounds bytes held at once. A holder that holds nothing else may always take what
// it asks for, so every connection can make progress however full the budget is.
type byteBudget struct {
	limit int64
	mu    struct {
		sync.Mutex
		used int64
		peak int64         // the most used has been
		wake chan struct{} // closed at the next release; nil while no one waits
	}
}

// acquire takes n bytes, waiting for releases while that would pass the limit, unless alone
// (the caller holds nothing else) or the budget is empty. It reports false if ctx ended first.
func (b *byteBudget) acquire(ctx context.Context, n int64, alone bool) bool {
	for {
		b.mu.Lock()
		if alone || b.mu.used == 0 || b.mu.used+n <= b.limit {
			b.mu.used += n
			b.mu.peak = max(b.mu.peak, b.mu.used)
			b.mu.Unlock()
			return true
		}
		if b.mu.wake == nil {
			b.mu.wake = make(chan struct{})
		}
		wake := b.mu.wake
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return false
		}
	}
}

// acquireWithin is acquire without the exception for a holder alone, waiting at most within
// (0: as long as ctx lasts). It reports false if the time ran out or ctx ended first.
func (b *byteBudget) acquireWithin(ctx context.Context, n int64, within time.Duration) bool {
	b.mu.Lock()
	if b.mu.used == 0 || b.mu.used+n <= b.limit {
		b.mu.used += n
		b.mu.peak = max(b.mu.peak, b.mu.used)
		b.mu.Unlock()
		return true
	}
	b.mu.Unlock()
	if within > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, within)
		defer cancel()
	}
	return b.acquire(ctx, n, false)
}

// tryAcquire takes n bytes if that keeps within the limit, without waiting.
func (b *byteBudget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.used+n > b.limit {
		return false
	}
	b.mu.used += n
	b.mu.peak = max(b.mu.peak, b.mu.used)
	return true
}

// release returns n bytes and wakes whoever waits for them.
func (b *byteBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.mu.used -= n
	if b.mu.wake != nil {
		close(b.mu.wake)
		b.mu.wake = nil
	}
	b.mu.Unlock()
}

// held is the bytes held now.
func (b *byteBudget) held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.used
}

// peak is the most bytes held at once so far.
func (b *byteBudget) peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.peak
}

// commandBytes is what one parsed command costs to hold: its arguments and their headers.
func commandBytes(args [][]byte) int64 {
	n := int64(24 * len(args))
	for _, a := range args {
		n += int64(len(a))
	}
	return n
}

// readAheadWait is how long a connection with no command of its own in flight waits for room
// in the node's read-ahead budget before it is closed: the budget is then full of other
// connections' unfinished commands, which may themselves wait for room, and closing one is what
// lets the others go on (Redis closes the clients that hold the most query buffer instead).
var readAheadWait = 5 * time.Second

// errReadAhead is the error a connection closed for the node's read-ahead bound is sent.
func (c *conn) errReadAhead() string {
	return "max read-ahead bytes reached on this node (" + itoa(c.s.readAhead.limit) + " bytes of commands not yet executed): closing the connection"
}

// smallCommand is the largest command a connection with nothing outstanding may always read,
// however full the node's budget: what its reader's first buffer holds anyway, which the budget
// does not count. A node whose budget is full of other connections' commands still answers a
// PING; the bytes past its budget are at most this much a connection.
const smallCommand = 16 << 10

// reserveRead takes n read-ahead bytes for a command just parsed, before it is copied out of
// the reader's buffer, waiting while this connection or the whole server holds too many. It
// returns the refusal to send the client, or "" ("" also when the connection ended first:
// ctx tells).
func (c *conn) reserveRead(n int64) string {
	inFlight := c.readAhead.held() > 0
	if !c.readAhead.acquire(c.ctx, n, false) {
		return ""
	}
	if !inFlight && n <= smallCommand {
		c.s.readAhead.acquire(c.ctx, n, true)
		return ""
	}
	if msg := c.reserveNode(n, inFlight); msg != "" || c.ctx.Err() != nil {
		c.readAhead.release(n)
		return msg
	}
	return ""
}

// reserveNode takes n bytes of the node's read-ahead budget (TotalReadAheadBytes), which
// counts the copies of commands read and not finished, the reader buffers grown past their
// first 16 KiB for commands still arriving, and MULTI queues: everything a client's commands
// hold before they run. Nothing exceeds it but the small commands of connections with nothing
// outstanding (reserveRead). A connection with commands in flight waits for them to finish;
// one without waits readAheadWait, then is refused.
func (c *conn) reserveNode(n int64, inFlight bool) string {
	within := time.Duration(0)
	if !inFlight {
		within = readAheadWait
	}
	if c.s.readAhead.acquireWithin(c.ctx, n, within) {
		return ""
	}
	if c.ctx.Err() != nil {
		return ""
	}
	c.s.log.Warn("node read-ahead limit reached; closing the connection", "client", c.id, "limit", c.s.readAhead.limit)
	return c.errReadAhead()
}

// releaseRead returns a finished command's read-ahead bytes.
func (c *conn) releaseRead(n int64) {
	c.readAhead.release(n)
	c.s.readAhead.release(n)
}

// readerBudget charges a connection's reader buffer to the node's read-ahead budget.
type readerBudget struct{ c *conn }

var _ resp.Budget = readerBudget{}

func (b readerBudget) Grow(n int) string {
	if msg := b.c.reserveNode(int64(n), b.c.readAhead.held() > 0); msg != "" {
		return msg
	}
	if b.c.ctx.Err() != nil {
		return "connection closed" // not sent: the client is gone
	}
	return ""
}

func (b readerBudget) Shrink(n int) { b.c.s.readAhead.release(int64(n)) }

// stallWriter is a connection's socket as its writer sees it: each write must make progress
// within OutputLimit.WriteStall, or the client is disconnected as one that stopped reading.
type stallWriter struct{ c *conn }

func (w stallWriter) Write(p []byte) (int, error) {
	c := w.c
	stall := c.s.cfg.OutputLimit.WriteStall
	if stall > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(stall))
	}
	n, err := c.nc.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.s.log.Warn("client output buffer limit reached; closing the connection", "client", c.id,
			"reason", "the client read nothing for "+stall.String())
	}
	return n, err
}

// pushSize is what a queued push holds.
func pushSize(p *push) int64 {
	return int64(64 + len(p.key) + len(p.pattern) + len(p.channel) + len(p.body))
}

// overOutputLimit reports whether c's queued pushes, now queued bytes in all, break its output
// limit, and which part; it runs where pushes are queued, under the tracker's or hub's lock.
func (c *conn) overOutputLimit(queued int64) string {
	lim := c.s.cfg.OutputLimit
	switch {
	case lim.Hard > 0 && queued > int64(lim.Hard):
		return "pushes queued past the hard limit of " + itoa(int64(lim.Hard)) + " bytes"
	case lim.Soft > 0 && queued > int64(lim.Soft):
		now := time.Now().UnixNano()
		since := c.softSince.Load()
		if since == 0 {
			c.softSince.CompareAndSwap(0, now)
			return ""
		}
		if lim.SoftTime >= 0 && time.Duration(now-since) >= lim.SoftTime {
			return "pushes queued above the soft limit of " + itoa(int64(lim.Soft)) + " bytes for " + lim.SoftTime.String()
		}
	default:
		c.softSince.Store(0)
	}
	return ""
}

// maxClientName bounds what a connection is named: CLIENT SETNAME, HELLO ... SETNAME and
// CLIENT SETINFO's lib-name and lib-ver (Redis bounds none; every connection keeps them, and
// CLIENT LIST shows them all).
const maxClientName = 512

// clientNameTooLong returns the error for a name (what says which) past maxClientName, or "".
func clientNameTooLong(what string, name []byte) string {
	if len(name) <= maxClientName {
		return ""
	}
	return "ERR " + what + " is too long: at most " + itoa(maxClientName) + " bytes"
}

// idleExempt reports whether an idle connection stays open past IdleTimeout: a subscriber
// (it only listens), or one with commands in flight. (A blocked LOCK ... WAIT or BLPOP runs
// inside the serve loop, which only looks at the timer after it.) A follower's forwarding link
// is not exempt: anyone could claim to be one, and the follower redials a link the leader
// closed (forward.go). The caller is the serve loop, with nothing in flight, so the session is
// its own.
func (c *conn) idleExempt() bool {
	return len(c.pipe.inflight) > 0 || c.sess.subs.active()
}

// heapInUse is the bytes of the Go heap in use that MaxMemory measures: the live heap as of the
// last collection. It does not count garbage not yet collected, so a node does not refuse
// writes just because the collector has not run yet.
// Before the first collection it is the heap's objects, garbage included.
const (
	heapInUse   = "/gc/heap/live:bytes"
	heapObjects = "/memory/classes/heap/objects:bytes"
)

// sampleMemory measures the heap every MemorySample until the server closes (New measured it
// once already).
func (s *Server) sampleMemory() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.MemorySample)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.measureMemory()
		case <-s.ctx.Done():
			return
		}
	}
}

// measureMemory reads the heap in use, and sets s.overMemory while it is above MaxMemory.
func (s *Server) measureMemory() {
	sample := []metrics.Sample{{Name: heapInUse}, {Name: heapObjects}}
	metrics.Read(sample)
	used := sample[0].Value.Uint64()
	if used == 0 { // no collection yet
		used = sample[1].Value.Uint64()
	}
	s.usedMemory.Store(used)
	if over := used > s.cfg.MaxMemory; over != s.overMemory.Load() {
		s.overMemory.Store(over)
		if over {
			s.log.Warn("memory above maxmemory: commands that may create keys are refused with -OOM", "used", used, "maxmemory", s.cfg.MaxMemory)
		} else {
			s.log.Info("memory back under maxmemory", "used", used, "maxmemory", s.cfg.MaxMemory)
		}
	}
}

// rateGate lets one operation run at a time, at most once per every (RAFT SNAPSHOT and RAFT
// DIGEST: each walks or writes the whole table).
type rateGate struct {
	every time.Duration
	mu    struct {
		sync.Mutex
		busy bool
		last time.Time
	}
}

// enter starts the operation, or says why not: one is running, or the last began too recently.
func (g *rateGate) enter(what string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	switch {
	case g.mu.busy:
		return "ERR " + what + " is busy: one is already running on this node"
	case !g.mu.last.IsZero() && now.Sub(g.mu.last) < g.every:
		return "ERR " + what + " too soon: at most one every " + g.every.String() + " on this node; retry in " +
			(g.every - now.Sub(g.mu.last)).Round(time.Millisecond).String()
	}
	g.mu.busy, g.mu.last = true, now
	return ""
}

// leave ends the operation enter started.
func (g *rateGate) leave() {
	g.mu.Lock()
	g.mu.busy = false
	g.mu.Unlock()
}
