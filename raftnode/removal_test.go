package raftnode

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// A removal that reaches the removed follower but never commits must not make it leave; once
// the removal commits, it leaves. The leader removes f while cut off from the third voter, so
// the new configuration (without f) cannot reach a quorum of itself; f has it in its log,
// then loses the leader. Under the old rule (leave once the newest configuration drops you and
// no leader has called for 3 s) f left here although it was still a member.
func TestUncommittedRemovalDoesNotRemove(t *testing.T) {
	nodes := newCluster(t, 3, func(c *Config) { c.ClientAddr = "client-" + c.ID })
	// The removed node asks the leader over RESP (RAFT MEMBER); in-memory nodes have no client
	// port, so the question goes straight to the node behind the address.
	byAddr := map[string]*testNode{}
	for _, n := range nodes {
		byAddr[n.cfg.ClientAddr] = n
	}
	orig := askMembership
	askMembership = func(_ context.Context, _ *Node, addr, id string) (node.Membership, error) {
		if n := byAddr[addr]; n != nil {
			return n.Membership(id), nil
		}
		return node.Membership{}, errors.New("no such member")
	}
	t.Cleanup(func() { askMembership = orig })

	l := leader(t, nodes)
	rest := others(l, nodes)
	f, third := rest[0], rest[1]
	// f must know the client addresses of whichever leads after the heal to ask it (the leader
	// records its own; in-memory followers cannot announce theirs over RESP: record it for them).
	if err := l.SetMemberAddr(t.Context(), third.id, third.cfg.ClientAddr); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		for _, m := range []*testNode{l, third} {
			if addr, ok := f.MemberAddr(m.id); !ok || addr != m.cfg.ClientAddr {
				return fmt.Errorf("%s does not know %s's client address yet", f.id, m.id)
			}
		}
		return nil
	})
	l.trans.Disconnect(third.addr)
	third.trans.Disconnect(l.addr)
	// Straight to raft: RemoveServer would refuse a change the reachable voters cannot commit.
	l.raft.RemoveServer(raft.ServerID(f.id), 0, time.Second)
	testutil.WaitFor(t, 5*time.Second, func() error {
		if c, err := f.configuration(); err != nil || inConfig(c, f.id) {
			return fmt.Errorf("%s's newest configuration still lists it (%v)", f.id, err)
		}
		return nil
	})
	isolate(l, nodes)
	// Long past removedQuiet: f sees no leader, its log drops it, and nothing committed that.
	select {
	case <-f.Removed():
		t.Fatalf("%s left the cluster on a removal that never committed", f.id)
	case <-time.After(removedQuiet + 4*time.Second):
	}
	if _, member, known := l.committedConf.get(f.id); !known || !member {
		t.Fatalf("the old leader's committed configuration: member %v, known %v; want f still a member", member, known)
	}

	// Healed, the leader (or whichever node has the entry) commits the removal, and f leaves.
	connectAll(nodes)
	select {
	case <-f.Removed():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never left after its removal committed", f.id)
	}
	for _, n := range []*testNode{l, third} {
		testutil.WaitFor(t, 10*time.Second, func() error {
			if _, member, known := n.committedConf.get(f.id); !known || member {
				return fmt.Errorf("%s's committed configuration: member %v, known %v; want f gone", n.id, member, known)
			}
			return nil
		})
	}
}

func inConfig(c raft.Configuration, id string) bool {
	return slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return string(s.ID) == id })
}
