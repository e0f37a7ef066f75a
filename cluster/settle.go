package cluster

import (
	"context"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// settlePoll is how often AwaitSetup looks at the table: it runs once, at a node's first start,
// for the few milliseconds the new leader takes to write its setup entries.
const settlePoll = 2 * time.Millisecond

// AwaitSetup waits until a node that formed a new cluster alone at this start has its own setup
// entries in its table (the cluster ID, the newest log format, its client address), so that the
// first request it serves comes after them: fencing tokens follow the log index, and a fresh
// node then hands out the same first tokens every time (the README's session is a test). Every
// other node returns at once: a node that resumes has its entries already, and one that forms a
// cluster with --peers or joins one needs other nodes, which may still be starting, to write
// them. It returns ctx's error when ctx ends first.
func (n *Member) AwaitSetup(ctx context.Context) error {
	if n.hadStateAtStart || !n.cfg.Bootstrap || len(n.cfg.Peers) > 0 {
		return nil
	}
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	for !n.settled() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// settled reports whether this node's table has the cluster ID, the newest log format and this
// node's client address (when it advertises one).
func (n *Member) settled() bool {
	if n.tableClusterID() == "" || n.format() < fsm.FormatCurrent {
		return false
	}
	if want := n.cfg.ClientAddr; want != "" {
		addr, ok := n.MemberAddr(n.cfg.Core.ID)
		return ok && addr == want
	}
	return true
}
