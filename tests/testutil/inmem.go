package testutil

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// What the in-process clusters of raftnode's and cluster's tests share: raft's in-memory
// transports wired together and cut apart, the ready leader found among the nodes, a clock that
// moves only when told, and a logger quiet unless asked.

// InmemNode is a node of an in-process cluster: its in-memory transport, and whether it is the
// ready leader.
type InmemNode interface {
	Inmem() *raft.InmemTransport
	IsLeader() bool
}

// ConnectAll connects every node's transport to every other one (heals every partition).
func ConnectAll[T InmemNode](nodes []T) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a.Inmem() != b.Inmem() {
				a.Inmem().Connect(b.Inmem().LocalAddr(), b.Inmem())
			}
		}
	}
}

// CloseAllAtEnd registers, after the nodes' own cleanups so that it runs before them, one that
// cuts every link and then closes each node with close. A leader's Close hands leadership over;
// raft sends the TimeoutNow from a goroutine it does not wait for, which over a live in-memory
// link to an already closed peer blocks for the transport's 500 ms timeout and outlives the
// test. Disconnected, it fails at once.
func CloseAllAtEnd[T InmemNode](tb testing.TB, nodes []T, close func(T)) {
	tb.Cleanup(func() {
		for _, n := range nodes {
			n.Inmem().DisconnectAll()
		}
		for _, n := range nodes {
			close(n)
		}
	})
}

// Isolate cuts n off from every other of nodes, in both directions.
func Isolate[T InmemNode](n T, nodes []T) {
	n.Inmem().DisconnectAll()
	for _, o := range nodes {
		if o.Inmem() != n.Inmem() {
			o.Inmem().Disconnect(n.Inmem().LocalAddr())
		}
	}
}

// Others returns nodes without n, in a new slice.
func Others[T comparable](n T, nodes []T) []T {
	var out []T
	for _, o := range nodes {
		if o != n {
			out = append(out, o)
		}
	}
	return out
}

// Leader waits until exactly one of nodes is the ready leader and returns it.
func Leader[T InmemNode](tb testing.TB, nodes []T) T {
	tb.Helper()
	var l T
	WaitFor(tb, 5*time.Second, func() error {
		var found []raft.ServerAddress
		for _, n := range nodes {
			if n.IsLeader() {
				l = n
				found = append(found, n.Inmem().LocalAddr())
			}
		}
		if len(found) != 1 {
			return fmt.Errorf("ready leaders %v, want exactly one", found)
		}
		return nil
	})
	return l
}

// OnLeader runs op, named what, on whichever of nodes leads and returns that node. A refusal
// as not leader (node's, or raft's own for a configuration change) changed nothing, so op runs
// again on the new leader: under -race on a busy machine an in-memory cluster can elect another
// leader right after a test found one. Any other error fails the test.
func OnLeader[T InmemNode](tb testing.TB, nodes []T, what string, op func(l T) error) T {
	tb.Helper()
	var ran T
	WaitFor(tb, 10*time.Second, func() error {
		l := Leader(tb, nodes)
		var nl *node.NotLeaderError
		switch err := op(l); {
		case errors.As(err, &nl), errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
			return err
		case err != nil:
			tb.Fatalf("%s on %s: %v", what, l.Inmem().LocalAddr(), err)
		}
		ran = l
		return nil
	})
	return ran
}

// RaftLogger discards logs unless RAFTNODE_TEST_LOG is set: raft is chatty, and a goroutine
// logging through t.Log after its test ended would panic.
func RaftLogger() *slog.Logger {
	if os.Getenv("RAFTNODE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Clock is an injectable Now that moves only when told.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at a fixed date.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}
