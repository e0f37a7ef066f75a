package raftnode

import "fmt"

// ErrUncertain means a proposal was made but this node cannot tell whether it committed: it lost
// leadership or shut down while waiting. The client must not take it as "not granted".
var ErrUncertain error = uncertainError{}

// ErrShutdown means the node is closing and takes no more requests.
var ErrShutdown error = shutdownError{}

// The error types carry methods so that a consumer (the server) can recognize them by
// behaviour without importing this package.
type (
	uncertainError struct{}
	shutdownError  struct{}
)

func (uncertainError) Error() string     { return "raftnode: outcome unknown" }
func (uncertainError) Uncertain() bool   { return true }
func (shutdownError) Error() string      { return "raftnode: shutting down" }
func (shutdownError) ShuttingDown() bool { return true }

// NotLeaderError means this node is not a leader ready to serve: nothing was proposed. Leader is
// the raft address of the current leader, empty when none is known.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

// NotLeader returns the leader this node knows of (empty when none).
func (e *NotLeaderError) NotLeader() (leaderID, leaderAddr string) { return e.LeaderID, e.LeaderAddr }

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "raftnode: no leader"
	}
	return fmt.Sprintf("raftnode: not leader (leader is %s at %s)", e.LeaderID, e.LeaderAddr)
}
