package raftnode

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// unansweredFuture is a raft future answered only when its test ends: what raft leaves a request
// queued as its main loop exits (awaitFuture).
type unansweredFuture struct{ release chan struct{} }

func (f unansweredFuture) Error() error {
	<-f.release
	return raft.ErrRaftShutdown
}

// TestAwaitWithinBoundsAnUnansweredFuture: Close's hand-off wait returns, with an error, for a
// future raft never answers; unbounded, the test would hang until its binary's timeout.
func TestAwaitWithinBoundsAnUnansweredFuture(t *testing.T) {
	f := unansweredFuture{release: make(chan struct{})}
	defer close(f.release) // lets awaitFuture's goroutine end before goleak looks
	if err := awaitWithin(f, 50*time.Millisecond); err == nil {
		t.Fatal("awaitWithin of a future never answered returned nil")
	}
}
