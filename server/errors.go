package server

import (
	"context"
	"errors"

	"github.com/raftlock/raftlock/locks"
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
	errOOM       = "OOM command not allowed when used memory > 'maxmemory'."
	// errAborted answers a multi-key request whose entry aborted at apply (fsm.Aborted): a key
	// was not as the leader saw it when it evaluated the request. The pending marks rule that
	// out on a stable leader, so it can happen only after a leadership change between the
	// evaluation and the apply. Nothing was applied, so a retry is safe. (Redis Cluster answers
	// a multi-key request it cannot serve right now with TRYAGAIN too.)
	errAborted = "TRYAGAIN the keys changed between the command's evaluation and its replication (a leadership change intervened); nothing was applied, retry"
	// errScriptAborted is errAborted for a script: its effects' entry aborted, so none of them
	// applied; running it again is safe.
	errScriptAborted = "ERR the script's effects did not apply as it saw them (a key changed between the script's run and their replication: a leadership change intervened); none was applied, run it again"
)

// replyError writes the reply for an error from the node: the one table from node errors to
// RESP. A client that is gone gets nothing.
func (r *request) replyError(err error) {
	if _, moved := err.(*node.SlotError); !moved {
		r.s.stats.errors.Add(1)
	}
	var nl *node.NotLeaderError
	var full *waitersFullError
	var moved *node.SlotError
	switch {
	case errors.As(err, &moved):
		r.reroute() // not an error the client sees: the request runs again where it belongs
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client hung up or the server is closing: there is no one to tell.
	case errors.As(err, &nl) && nl.LeaderID == "":
		r.s.metrics.refuse(refusedNoLeader)
		r.w.Error(errNoLeader)
	case errors.As(err, &nl):
		r.w.Error("TRYAGAIN this node is not the leader; the leader is " + nl.LeaderID + " at " + nl.LeaderAddr)
	case isDisk(err):
		df, uncertain, _ := diskError(err)
		r.w.Error(diskReply(df, uncertain))
	case errors.Is(err, node.ErrUncertain):
		r.w.Error(errUncertain)
	case errors.Is(err, node.ErrShutdown):
		r.w.Error(errShutdown)
	case errors.Is(err, node.ErrNoSuchMember), errors.Is(err, node.ErrQuorumAtRisk), errors.Is(err, node.ErrNotCaughtUp),
		errors.Is(err, node.ErrForeignCluster), errors.Is(err, node.ErrNotMember), errors.Is(err, node.ErrMemberTable),
		errors.Is(err, node.ErrOlderMembers), errors.Is(err, node.ErrOlderBinary), errors.Is(err, node.ErrLiveVoter),
		errors.Is(err, node.ErrPlanNotRun):
		r.w.Error("ERR " + err.Error()) // a refused membership change: the text says why and what to do
	case errors.As(err, &full):
		r.w.Error("ERR " + err.Error()) // a bound of the waiters (waiters.go)
	case errors.As(err, new(*locks.PermitsError)):
		r.w.Error("ERR " + err.Error()) // a semaphore asked for with another count
	default:
		r.s.log.Warn("request failed", "err", err)
		r.w.Error("ERR " + err.Error())
	}
}

// wrongArity is Redis's error for a command given the wrong number of arguments.
func wrongArity(name string) string {
	return "ERR wrong number of arguments for '" + name + "' command"
}
