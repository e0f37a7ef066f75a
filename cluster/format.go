package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// The switch of the cluster's log format during a rolling upgrade (the gate that holds back
// requests until then is the core's: raftnode/format.go). The ready leader switches the
// cluster (upgradeFormat) once every member of the configuration says over RESP that it reads
// the newer format (RAFT STATS raft_log_format_max), and never promotes a member that cannot
// read the cluster's (readsOurFormat).

// askPeerFormat asks member id, at client address addr, for the newest log format it reads; a
// member that does not say (v0.1.0, which does not announce it) reads only FormatKeyed. Tests of in-memory nodes, which have no client port, replace it.
var askPeerFormat = func(ctx context.Context, n *Member, id, addr string) (byte, error) {
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
// binary of an older version added to a cluster that has switched (it fails on every entry
// of the current layout; as a voter it would count towards commits it cannot apply).
func (n *Member) readsOurFormat(ctx context.Context, id string) error {
	format := n.format()
	if format <= fsm.FormatKeyed {
		return nil
	}
	addr, _ := n.MemberAddr(id)
	got, err := askPeerFormat(ctx, n, id, addr)
	if err != nil {
		return fmt.Errorf("%w: %s: cannot ask which log format it reads: %v", node.ErrNotCaughtUp, id, err)
	}
	if got < format {
		return fmt.Errorf("%w: %s reads log format %d only, and this cluster writes format %d: upgrade it to a binary that reads format %d",
			node.ErrOlderBinary, id, got, format, format)
	}
	return nil
}

// upgradeFormat moves a cluster in an older format to the newest one every member reads, up to
// the current one. It runs on the membership goroutine and reports false when it should be
// tried again later (a member could not be reached, or still runs an older binary).
func (n *Member) upgradeFormat(ctx context.Context, hints map[string]string) bool {
	from := n.format()
	if !n.isLeader() || from >= fsm.FormatCurrent {
		return true
	}
	members, err := n.Members()
	if err != nil {
		return false
	}
	// A cluster this version created (bootstrapped, or restored from a backup) has only
	// members of it or newer: an older binary cannot join it (readsOurFormat). Otherwise ask.
	to := fsm.FormatCurrent
	for _, m := range members {
		if m.ID == n.cfg.Core.ID || n.bootstrapFormat >= fsm.FormatCurrent {
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
	// One no-op in the layout of format to switches the cluster.
	if err := n.core.Load().SwitchFormat(to); err != nil {
		n.log.Warn("switching the cluster to a newer log format failed; retrying", "format", to, "err", err)
		return false
	}
	n.log.Info("every member reads it: the cluster now writes log format "+strconv.Itoa(int(to)),
		"members", len(members), "from", from)
	return to >= fsm.FormatCurrent
}

// warnOlderFormat says, once, why the cluster stays in an older log format.
func (n *Member) warnOlderFormat(member string, format byte, err error) {
	if !n.formatWarned.Swap(true) {
		n.log.Info("the cluster stays in an older log format until every member runs this version",
			"member", member, "member_format", format, "err", err)
	}
}
