package raftnode

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// The cluster's log format (fsm/format.go) during a rolling upgrade: a node writes entries in
// the format the applied table is in (Node.format, a copy of fsm.Machine.Format kept for the
// proposers, which read it without Node.mu), and a request whose commands need the current
// format waits up to formatWait for the switch, then fails with node.ErrOlderMembers. The
// ready leader switches the cluster (upgradeFormat) once every member of the configuration says
// over RESP that it reads the current format (RAFT STATS raft_log_format_max): one no-op entry in
// the current layout, which every node applies.

// formatWait bounds how long a write that needs the current format waits for the switch: a new
// cluster switches as soon as its members have announced themselves, a fraction of a second.
var formatWait = 5 * time.Second

// LogFormatMax is the newest log format this binary reads and writes (RAFT STATS and INFO raft
// raft_log_format_max).
const LogFormatMax = fsm.FormatCurrent

// noteFormatLocked copies the table's format for the proposers; n.mu is held.
func (n *Node) noteFormatLocked() {
	if f := uint32(n.mu.machine.Format()); f != n.format.Load() {
		n.format.Store(f)
		n.formatChange.notify()
		n.wakeMembership() // the cluster ID waits for the current format
	}
}

// awaitFormat waits until the cluster's format is at least need, for at most formatWait.
func (n *Node) awaitFormat(ctx context.Context, need byte) error {
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

// askPeerFormat asks member id, at client address addr, for the newest log format it reads; a
// member that does not say (a binary from before formats were announced) reads only the
// previous release's. Tests of in-memory nodes, which have no client port, replace it.
var askPeerFormat = func(ctx context.Context, n *Node, id, addr string) (byte, error) {
	if addr == "" {
		return 0, errors.New("its client address is not known yet")
	}
	st, err := n.peerAPI.State(ctx, addr)
	if err != nil {
		return 0, err
	}
	return st.LogFormatMax, nil
}

// readsOurFormat refuses to promote a member that cannot read the cluster's log format: a
// binary of the previous release added to a cluster that has switched (it fails on every entry
// of the current layout; as a voter it would count towards commits it cannot apply).
func (n *Node) readsOurFormat(ctx context.Context, id string) error {
	format := byte(n.format.Load())
	if format <= fsm.FormatKeyed {
		return nil
	}
	addr, _ := n.MemberAddr(id)
	got, err := askPeerFormat(ctx, n, id, addr)
	if err != nil {
		return fmt.Errorf("%w: %s: cannot ask which log format it reads: %v", node.ErrNotCaughtUp, id, err)
	}
	if got < format {
		return fmt.Errorf("%w: %s reads log format %d only, and this cluster writes format %d: run this release on it",
			node.ErrOlderBinary, id, got, format)
	}
	return nil
}

// upgradeFormat moves a cluster in an older format to the newest one every member reads, up to
// the current one. It runs on the membership goroutine and reports false when it should be
// tried again later (a member could not be reached, or still runs an older binary).
func (n *Node) upgradeFormat(ctx context.Context, hints map[string]string) bool {
	from := byte(n.format.Load())
	if !n.ready.Load() || from >= fsm.FormatCurrent {
		return true
	}
	members, err := n.Members()
	if err != nil {
		return false
	}
	// A cluster this release created (bootstrapped, or restored from a backup) has only
	// members of it or newer: an older binary cannot join it (readsOurFormat). Otherwise ask.
	to := fsm.FormatCurrent
	for _, m := range members {
		if m.ID == n.cfg.ID || n.bootstrapFormat >= fsm.FormatCurrent {
			continue
		}
		addr := m.ClientAddr
		if addr == "" {
			addr = hints[m.ID] // until it announces itself again: that change wakes us
		}
		f, err := askPeerFormat(ctx, n, m.ID, addr)
		if err != nil {
			n.warnOlderFormat(m.ID, f, err)
			return false
		}
		to = min(to, f)
		if to <= from {
			n.warnOlderFormat(m.ID, f, nil)
			return false
		}
	}
	// One no-op in the layout of format to switches the cluster: a batch of one request for
	// FormatBatch, a request's entry for FormatTyped.
	noop := fsm.EncodeEntry(nil, []fsm.Command{{Kind: fsm.KindNoop}})
	if to >= fsm.FormatBatch {
		noop = fsm.AppendBatch(nil, [][]byte{noop})
	}
	f := n.raft.Apply(noop, n.cfg.ApplyTimeout)
	n.stats.proposals.Add(1)
	if err := n.waitFuture(f); err != nil {
		n.log.Warn("switching the cluster to a newer log format failed; retrying", "format", to, "err", err)
		return false
	}
	n.log.Info("every member reads it: the cluster now writes log format "+strconv.Itoa(int(to)),
		"members", len(members), "from", from)
	return to >= fsm.FormatCurrent
}

// warnOlderFormat says, once, why the cluster stays in an older log format.
func (n *Node) warnOlderFormat(member string, format byte, err error) {
	if !n.formatWarned.Swap(true) {
		n.log.Info("the cluster stays in an older log format until every member runs this release",
			"member", member, "member_format", format, "err", err)
	}
}
