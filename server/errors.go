package server

import (
	"context"
	"errors"

	"github.com/raftlock/raftlock/node"
)

// Reply texts that are ours (not Redis's). Clients key on the first word.
const (
	errNoLeader  = "CLUSTERDOWN no leader elected yet; retry shortly"
	errUncertain = "UNCERTAIN the outcome is unknown (leadership changed while it was being replicated); read the key before retrying"
	errShutdown  = "TRYAGAIN this node is shutting down; retry on another node"
	errSyntax    = "ERR syntax error"
	errNotInt    = "ERR value is not an integer or out of range"
	errNoAdmin   = "ERR cluster administration is not available on this server"
)

// replyError writes the reply for an error from the node: the one table from node errors to
// RESP. A client that is gone gets nothing.
func (r *request) replyError(err error) {
	r.s.stats.errors.Add(1)
	var nl *node.NotLeaderError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client hung up or the server is closing: there is no one to tell.
	case errors.As(err, &nl) && nl.LeaderID == "":
		r.w.Error(errNoLeader)
	case errors.As(err, &nl):
		r.w.Error("TRYAGAIN this node is not the leader; the leader is " + nl.LeaderID + " at " + nl.LeaderAddr)
	case errors.Is(err, node.ErrUncertain):
		r.w.Error(errUncertain)
	case errors.Is(err, node.ErrShutdown):
		r.w.Error(errShutdown)
	case errors.Is(err, node.ErrNoSuchMember):
		r.w.Error("ERR " + err.Error())
	default:
		r.s.log.Warn("request failed", "err", err)
		r.w.Error("ERR " + err.Error())
	}
}
