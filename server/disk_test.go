package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// testDiskError is a disk fault as store.DiskError reports one.
type testDiskError struct{ full bool }

func (e testDiskError) Error() string {
	if e.full {
		return "disk full: no space for the next raft log segment"
	}
	return "disk failed: write segment 7.seg: input/output error"
}

func (e testDiskError) DiskFull() bool { return e.full }

// uncertainError is err with node.ErrUncertain in its chain, as raftnode reports an entry in
// flight when the disk failed.
type uncertainError struct{ err error }

func (e uncertainError) Error() string   { return e.err.Error() }
func (e uncertainError) Unwrap() []error { return []error{e.err, node.ErrUncertain} }

// diskNode is a fake node whose every request fails with err, and whose disk reports it.
type diskNode struct {
	*fakeNode
	err error
}

func (d diskNode) Exec(context.Context, [][]byte, node.Eval, func(func())) ([]fsm.Result, error) {
	return nil, d.err
}

func (d diskNode) ProposeAll(_ context.Context, reqs []node.Proposal) {
	for i := range reqs {
		reqs[i].Pending, reqs[i].Err = nil, d.err
	}
}

func (d diskNode) DiskFault() error { return d.err }

// TestDiskFaultReplies: a write refused for the node's disk gets MISCONF with the disk's reason
// and what it means (not UNCERTAIN, not TRYAGAIN), and INFO persistence says the disk's state.
func TestDiskFaultReplies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		follower  bool   // raft stopped for the disk: the node knows no leader to forward to
		reply     string // the reply's start
		says      string // and what it must say after the reason
		state     string
		aofStatus string
	}{
		{"full", testDiskError{full: true}, false, "MISCONF disk full: no space", "nothing of this write was written", "full", "err"},
		{"failed", testDiskError{}, false, "MISCONF disk failed: write segment", "retry on another node", "failed", "err"},
		{"failed in flight", uncertainError{testDiskError{}}, false, "MISCONF disk failed: write segment", "the outcome of this write is unknown", "failed", "err"},
		{"failed, leader gone", testDiskError{}, true, "MISCONF disk failed: write segment", "retry on another node", "failed", "err"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode()
			f.startLocks(t)
			f.follower.Store(tc.follower)
			d := diskNode{fakeNode: f, err: tc.err}
			// A wait for a leader longer than the client's read timeout (3 s): a node whose disk
			// failed must answer without waiting for one.
			addr, _ := serveDeps(t, Deps{Replica: d, Disk: d}, func(c *Config) { c.LeaderWait = time.Minute })
			c := client(t, addr, 2)
			for _, cmd := range [][]any{{"SET", "k", "v"}, {"LOCK", "k", "1000"}} {
				err := c.Do(t.Context(), cmd...).Err()
				if err == nil || !strings.HasPrefix(err.Error(), tc.reply) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("%v = %v; want %q … %q", cmd, err, tc.reply, tc.says)
				}
			}
			info, err := c.Info(t.Context(), "persistence").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"disk_state:" + tc.state + "\r\n", "aof_last_write_status:" + tc.aofStatus + "\r\n", "disk_error:disk "} {
				if !strings.Contains(info, want) {
					t.Errorf("INFO persistence = %q; want it to contain %q", info, want)
				}
			}
		})
	}
}

// flipDisk is a disk whose fault a test sets while the server runs.
type flipDisk struct{ err atomic.Pointer[error] }

func (d *flipDisk) DiskFault() error {
	if p := d.err.Load(); p != nil {
		return *p
	}
	return nil
}

// TestFailedDiskClosesClients: once the node's disk failed, its raft applies nothing more, so
// the connections waiting on it (a subscriber, a blocked pop) are closed rather than left
// waiting in silence, and new subscriptions and blocking commands get MISCONF; INFO still
// answers.
func TestFailedDiskClosesClients(t *testing.T) {
	f := newFakeNode()
	f.startLocks(t)
	d := &flipDisk{}
	addr, _ := serveDeps(t, Deps{Replica: f, Disk: d}, nil)
	sub := dialRaw(t, addr)
	if got := sub.do("SUBSCRIBE", "ch"); !strings.Contains(got, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	blocked := dialRaw(t, addr)
	if _, err := io.WriteString(blocked.nc, "*3\r\n$5\r\nBLPOP\r\n$1\r\nq\r\n$1\r\n0\r\n"); err != nil {
		t.Fatal(err)
	}
	probe := dialRaw(t, addr)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got := probe.do("INFO", "clients"); !strings.Contains(got, "blocked_clients:1\r\n") {
			return fmt.Errorf("BLPOP not blocked yet: %q", got)
		}
		return nil
	})
	var fault error = testDiskError{}
	d.err.Store(&fault)
	// A client that connects after the failure, before the watch closes the others, and reads
	// INFO's disk_state:failed, is told MISCONF afterwards, not cut off.
	late := dialRaw(t, addr)
	if got := late.do("INFO", "persistence"); !strings.Contains(got, "disk_state:failed") {
		t.Errorf("INFO persistence = %q", got)
	}
	for name, c := range map[string]*rawConn{"subscriber": sub, "blocked BLPOP": blocked} {
		c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := c.br.ReadString(0x0a)
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: read after the disk failed = %q, %v; want the connection closed", name, b, err)
		}
	}
	if got := late.do("SUBSCRIBE", "ch"); !strings.HasPrefix(got, "-MISCONF disk failed") {
		t.Errorf("SUBSCRIBE on a connection accepted after the disk failed = %q; want MISCONF disk failed", got)
	}
	fresh := dialRaw(t, addr)
	for _, cmd := range [][]string{{"SUBSCRIBE", "ch"}, {"PSUBSCRIBE", "c*"}, {"BLPOP", "q", "0"}} {
		if got := fresh.do(cmd...); !strings.HasPrefix(got, "-MISCONF disk failed") {
			t.Errorf("%v on a node whose disk failed = %q; want MISCONF disk failed", cmd, got)
		}
	}
	if got := fresh.do("INFO", "persistence"); !strings.Contains(got, "disk_state:failed") {
		t.Errorf("INFO persistence = %q", got)
	}
}
