package server

import (
	"context"
	"errors"
)

// The node's errors, recognized by behaviour so this package needs nothing of raftnode's.
type (
	notLeaderError interface {
		error
		NotLeader() (leaderID, leaderAddr string)
	}
	uncertainError interface {
		error
		Uncertain() bool
	}
	shutdownError interface {
		error
		ShuttingDown() bool
	}
)

// Reply texts that are ours (not Redis's). Clients key on the first word.
const (
	errNoLeader  = "CLUSTERDOWN no leader elected yet; retry shortly"
	errUncertain = "UNCERTAIN the outcome is unknown (leadership changed while it was being replicated); read the key before retrying"
	errShutdown  = "TRYAGAIN this node is shutting down; retry on another node"
	errSyntax    = "ERR syntax error"
	errNotInt    = "ERR value is not an integer or out of range"
)

// replyError writes the reply for an error from the node: the one table from node errors to
// RESP. A client that is gone gets nothing.
func (c *conn) replyError(err error) {
	c.s.stats.errors.Add(1)
	var (
		nl notLeaderError
		un uncertainError
		sd shutdownError
	)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client hung up or the server is closing: there is no one to tell.
		return
	case errors.As(err, &nl):
		id, addr := nl.NotLeader()
		if id == "" {
			c.w.Error(errNoLeader)
			return
		}
		c.w.Error("TRYAGAIN this node is not the leader; the leader is " + id + " at " + addr)
	case errors.As(err, &un) && un.Uncertain():
		c.w.Error(errUncertain)
	case errors.As(err, &sd) && sd.ShuttingDown():
		c.w.Error(errShutdown)
	default:
		c.s.log.Warn("request failed", "err", err)
		c.w.Error("ERR " + err.Error())
	}
}
