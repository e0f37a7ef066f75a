package raftnode

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// What a node does when its disk cannot keep the raft log (store/fault.go has the two kinds).
//
// A failed disk is fail-stop. The log store refuses every write from the first failed write or
// sync on, for good; hashicorp/raft, given that, steps a leader down and can elect it again, and
// has a follower refuse appends while it still votes and campaigns: it cannot be told never to
// campaign. So the core shuts its raft down (to the cluster it is a dead node: the others elect
// a leader and serve) and keeps the process up to say why: every request that needs raft is
// answered with the disk's error, /readyz and INFO show it, and the log says it once. A restart
// on a repaired disk is the way back: the store then reads what the disk really holds.
//
// A full disk is a refusal, and recovers by itself. The store reports it (Stores.Health) from
// the moment it could not prepare its next segment, while the current one still has room: the
// leader refuses writes then, before raft appends anything (evalLocked), so raft never meets the
// error and never steps down for it, and the room left is the reserve for what raft writes on
// its own (its no-op after an election, configuration changes). A leader that refuses for this
// reason hands its leadership to another voter, whose disk may have space: the cluster then
// goes on taking writes, forwarded there from this node too.

// uncertainDisk is the error of a request whose entry may have reached this node's disk before
// it failed: the disk's error, and node.ErrUncertain.
type uncertainDisk struct{ err error }

func (e uncertainDisk) Error() string   { return e.err.Error() }
func (e uncertainDisk) Unwrap() []error { return []error{e.err, node.ErrUncertain} }

// fullHandoffEvery is the least time between two leadership hand-offs for a full disk: if every
// voter's disk is full, leadership moves at this pace, not in a loop.
const fullHandoffEvery = 5 * time.Second

// diskFailed is the error that stopped this node's raft, or nil.
func (n *Replica) diskFailed() error {
	if e := n.disk.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// DiskFault is this node's disk fault, or nil: the failure that stopped its raft, else what the
// log store says now (a full disk). INFO and /readyz show it.
func (n *Replica) DiskFault() error {
	if err := n.diskFailed(); err != nil {
		return err
	}
	if n.disk.health != nil {
		return n.disk.health()
	}
	return nil
}

// writable says whether the log store takes a write now; evalLocked asks it, under mu, for a
// request that has commands. When the disk is full it wakes the hand-off of leadership.
func (n *Replica) writable() error {
	err := n.DiskFault()
	if err == nil {
		return nil // the common case, before errors.As's target escapes to the heap
	}
	var df node.DiskFault
	if errors.As(err, &df) && df.DiskFull() {
		select {
		case n.disk.full <- struct{}{}:
		default:
		}
	}
	return err
}

// logStoreFailed is told of every error of the log store's writes (writeWatch). A failed disk
// stops raft, once.
func (n *Replica) logStoreFailed(err error) {
	var df node.DiskFault
	if !errors.As(err, &df) || df.DiskFull() {
		return
	}
	var fault error = df // its text starts "disk failed:", without the call's context
	if !n.disk.failed.CompareAndSwap(nil, &fault) {
		return
	}
	n.ready.Store(false)
	n.leaderChange.notify()
	n.log.Error("disk failed: this node stopped acknowledging writes and stops its raft; the other "+
		"nodes elect a leader and serve. Restart it once the disk is repaired or replaced", "err", err)
	if n.cfg.DiskFailed != nil {
		n.cfg.DiskFailed(fault)
	}
	// Not on the caller's goroutine: it is raft's own, and raft's shutdown waits for it.
	n.goFunc(func() {
		// raft's goroutines store logs before New has set n.raft (a disk that fails at start):
		// fsmRaft is set as soon as raft exists, and read safely from any goroutine.
		r := n.fsmRaft.Load()
		for r == nil {
			select {
			case <-n.stop:
				close(n.disk.stopped)
				return
			case <-time.After(10 * time.Millisecond):
			}
			r = n.fsmRaft.Load()
		}
		if err := r.Shutdown().Error(); err != nil {
			n.log.Warn("raft shutdown after the disk failed", "err", err)
		}
		close(n.disk.stopped)
	})
}

// StopForDiskFault stops this core's raft for err, a failed disk (node.DiskFault) that another
// raft group of the node met on the disk their logs share, as if its own log store had met it:
// a raft left running would write its term or vote to a store that can no longer take them.
func (n *Replica) StopForDiskFault(err error) { n.logStoreFailed(err) }

// raftStopped reports whether raft was stopped for a failed disk and has finished stopping.
// raft's own State may say Follower then: an append its main loop was handling as Shutdown
// began sets it back.
func (n *Replica) raftStopped() bool {
	select {
	case <-n.disk.stopped:
		return true
	default:
		return false
	}
}

// handOffWhenFull hands leadership to another voter when writes were refused for a full disk
// (writable), at most once per fullHandoffEvery.
func (n *Replica) handOffWhenFull() {
	for {
		select {
		case <-n.stop:
			return
		case <-n.disk.full:
		}
		if n.raft.State() == raft.Leader && n.voters() > 1 && n.diskFailed() == nil {
			n.log.Warn("disk full: handing leadership to another voter")
			// waitFuture: Close waits for this goroutine, and raft may never answer a transfer.
			if err := n.waitFuture(n.raft.LeadershipTransfer()); err != nil {
				n.log.Warn("leadership hand-off for a full disk failed", "err", err)
			}
		}
		select {
		case <-n.stop:
			return
		case <-time.After(fullHandoffEvery):
		}
	}
}
