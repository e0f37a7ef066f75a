package server

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/node"
)

// The inline path. A connection's reader goroutine parses commands and hands them to the
// connection's serve goroutine, which runs them: two goroutines, so that a client that hangs
// up is noticed while one of its commands waits on raft, and so that a pipeline is read ahead
// while its first commands run. For the most common request of all, one command alone on its
// connection (a client waiting for each reply: every lock library between its calls), that
// hand-off is one more goroutine wake-up per command, and measured at about 4 µs of CPU per
// LOCK/UNLOCK pair on one node at 64 connections (docs/performance.md). So a lone command is
// run by the reader itself when the serve goroutine is idle, as a server with one goroutine
// per connection would:
//
//   - The serve goroutine marks itself idle (serveIdle, under c.baton) only when it has
//     nothing in flight, nothing staged and is about to wait, and marks itself busy, under the
//     baton, as soon as it wakes, before it does anything: while the reader runs a command it
//     holds the baton, so a woken serve goroutine (a push to write, the idle timer, a kill)
//     waits for the command's reply first, and replies and pushes stay whole and in order.
//   - A command runs inline only when every command the reader handed over before it has been
//     handled (handedOver is 0): a send to a serve goroutine parked in its select leaves the
//     channel empty while serve has not yet marked itself busy, and the next command read must
//     not overtake the one it was given.
//   - Only what may run in a pipeline runs inline (pipelinable: no blocking LOCK ... WAIT, no
//     MULTI, tracking, subscriptions or READONLY), only on the leader (a follower's forwarded
//     request waits on the leader's link, where a hang-up matters), and only on a plain socket
//     on Linux (peerGone, inline_linux.go, polls the socket for the peer's hang-up; a TLS
//     close_notify is data to it).
//   - Ghost-lock cleanup: nobody reads the socket while an inline command waits, so a client
//     that hangs up then does not cancel its context. Its context carries peerGone instead
//     (node.WithHangupCheck), which the replica asks once the request's grant has applied: a
//     grant whose client closed its end is released at once, as before.

// runInline runs the lone command args (size read-ahead bytes) on the calling reader
// goroutine, and reports whether it did; when it did not, the command goes to the serve
// goroutine as any other.
func (c *conn) runInline(args [][]byte, size int64) bool {
	if c.raw == nil || c.s.grouped() || !c.s.node.IsLeader() {
		return false
	}
	cmd := lookupCommand(args[0])
	if cmd == nil || !cmd.pipelined || !c.baton.TryLock() {
		return false
	}
	if !c.serveIdle || c.handedOver.Load() != 0 || !c.pipelinable(cmd, args) {
		c.baton.Unlock()
		return false
	}
	c.inline = true
	c.dispatch(c.out, cmd, args, nil)
	c.inline = false
	c.releaseRead(size)
	if c.s.cfg.IdleTimeout > 0 {
		c.lastActive.Store(time.Now().UnixNano()) // as serve's handle does: only for the idle timer
	}
	err := c.out.Flush()
	c.baton.Unlock()
	if err != nil {
		c.cancel() // the client is gone: the next read says so too
	}
	return true
}

// setServeIdle marks the serve goroutine idle (the reader may run a lone command inline) or
// busy; marking it busy waits for an inline command to finish.
func (c *conn) setServeIdle(idle bool) {
	c.baton.Lock()
	c.serveIdle = idle
	c.baton.Unlock()
}

// inlineCtx is the context an inline command is proposed with: proposeCtx with the hang-up
// check on it. It is made once per base context (a forwarding link's changes when it says its
// origin).
func (c *conn) inlineCtx(base context.Context) context.Context {
	if c.hangupBase != base {
		c.hangupBase = base
		c.hangupCtx = node.WithHangupCheck(base, c.peerGone)
	}
	return c.hangupCtx
}
