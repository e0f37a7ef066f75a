package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
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
