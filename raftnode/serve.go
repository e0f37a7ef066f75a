package raftnode

import "github.com/raftlock/raftlock/node"

// What the client face (server.Replica) asks of a node beyond requests: who leads, and hooks for
// what each applied batch did, each in one call.

// The node's side of the seam the client face reads it through (node.View, node.Pending).
var (
	_ node.View    = (*viewReader)(nil)
	_ node.Pending = (*proposal)(nil)
)

// Leadership returns the leader this node knows of and its client address, with the channel
// closed at their next change, taken first: a change racing the reading closes it.
func (n *Replica) Leadership() node.Leadership {
	changed := n.LeaderChanged()
	id, addr := n.LeaderClient()
	return node.Leadership{ID: id, ClientAddr: addr, Changed: changed}
}

// Watch registers w's hooks, replacing those registered before. A nil hook is not called; a
// nil KeyEvent makes the apply path record no key events at all.
func (n *Replica) Watch(w node.Watchers) { n.watch.Store(&w) }

// noWatchers is what a core that nobody watches tells: nothing. It is only read.
var noWatchers node.Watchers

// watchers returns the hooks registered (none before Watch), without an allocation per batch.
func (n *Replica) watchers() *node.Watchers {
	if w := n.watch.Load(); w != nil {
		return w
	}
	return &noWatchers
}

func (v viewReader) Users() map[string]string { return v.n.mu.machine.Users() }
