package raftnode

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// The cluster's log format (fsm/format.go) during a rolling upgrade: a node writes entries in
// the format the applied table is in (Replica.format, a copy of fsm.Machine.Format kept for the
// proposers, which read it without Replica.mu), and a request whose commands need the current
// format waits up to formatWait for the switch, then fails with node.ErrOlderMembers. The
// ready leader's cluster management switches the cluster (SwitchFormat) once every member of
// the configuration reads the newer format: one no-op entry in its layout, which every node
// applies.

// formatWait bounds how long a write that needs the current format waits for the switch: a new
// cluster switches as soon as its members have announced themselves, a fraction of a second.
var formatWait = 5 * time.Second

// LogFormatMax is the newest log format this binary reads and writes (RAFT STATS and INFO raft
// raft_log_format_max).
const LogFormatMax = fsm.FormatCurrent

// noteFormatLocked copies the table's format for the proposers and reports whether it
// changed; n.mu is held.
func (n *Replica) noteFormatLocked() bool {
	f := uint32(n.mu.machine.Format())
	if f == n.format.Load() {
		return false
	}
	n.format.Store(f)
	n.formatChange.notify()
	return true
}

// Format is the cluster's log format, as this node's applied table is in.
func (n *Replica) Format() byte { return byte(n.format.Load()) }

// SwitchFormat proposes the no-op entry in the layout of format to that switches the cluster
// to it, and waits for it to apply. Cluster management calls it on the ready leader once every
// member reads to (it asks them; the core cannot).
func (n *Replica) SwitchFormat(to byte) error {
	// A batch of one request for FormatBatch and later (its version byte is the format's), a
	// request's entry for FormatTyped.
	noop := fsm.EncodeEntry(nil, []fsm.Command{{Kind: fsm.KindNoop}})
	if to >= fsm.FormatBatch {
		noop = fsm.AppendBatchIn(nil, [][]byte{noop}, to)
	}
	f := n.raft.Apply(noop, n.cfg.ApplyTimeout)
	n.stats.proposals.Add(1)
	return n.waitFuture(f)
}

// awaitFormat waits until the cluster's format is at least need, for at most formatWait.
func (n *Replica) awaitFormat(ctx context.Context, need byte) error {
	deadline := time.NewTimer(formatWait)
	defer deadline.Stop()
	for {
		changed := n.formatChange.wait()
		if byte(n.format.Load()) >= need {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return node.ErrOlderMembers
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return node.ErrShutdown
		}
	}
}
