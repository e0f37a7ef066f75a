package cluster

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// The leader records no client address past the member table's bounds (Config.MaxMembers
// entries, fsm.MaxMemberAddr bytes), and adds no member whose address it would refuse.
func TestMemberTableBounds(t *testing.T) {
	n := newNode(t, func(c *Config) { c.ClientAddr = "127.0.0.1:7001"; c.MaxMembers = 2 })
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("n1 announced", func() bool {
		_, ok := n.MemberAddr("n1")
		return ok
	}))
	ctx := t.Context()
	if _, err := n.AddServer(ctx, "n2", addrOf("n2"), "127.0.0.1:7002", false); err != nil {
		t.Fatalf("AddServer n2 with a place left: %v", err)
	}
	long := "127.0.0.1:" + strings.Repeat("9", 250)
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"a third member", func() error {
			_, err := n.AddServer(ctx, "n3", addrOf("n3"), "127.0.0.1:7003", false)
			return err
		}, "member address refused: the member table is full (at most 2 members)"},
		{"a third address", func() error { return n.SetMemberAddr(ctx, "n3", "127.0.0.1:7003") },
			"member address refused: the member table is full (at most 2 members)"},
		{"a long address", func() error {
			_, err := n.AddServer(ctx, "n4", addrOf("n4"), long, false)
			return err
		}, "member address refused: a client address of 260 bytes (at most 256)"},
		{"a long address of a member", func() error { return n.SetMemberAddr(ctx, "n2", long) },
			"member address refused: a client address of 260 bytes (at most 256)"},
	} {
		err := tc.call()
		if !errors.Is(err, node.ErrMemberTable) || err.Error() != tc.want {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	// A member with an address may change it.
	if err := n.SetMemberAddr(ctx, "n2", "127.0.0.1:7102"); err != nil {
		t.Errorf("a new address for n2: %v", err)
	}
	c, err := n.configuration()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []raft.ServerID{"n3", "n4"} {
		if slices.ContainsFunc(c.Servers, func(s raft.Server) bool { return s.ID == id }) {
			t.Errorf("%s was added though its address was refused", id)
		}
	}
	var got int
	n.Core().ReadTable(func(m *fsm.Machine) { got = m.MemberCount() })
	if got != 2 {
		t.Errorf("the member table holds %d entries, want 2", got)
	}
}

// The leader forgets the address of a node that is not (or no longer) in the configuration.
func TestLeaderForgetsNonMembers(t *testing.T) {
	n := newNode(t, func(c *Config) { c.ClientAddr = "127.0.0.1:7001" })
	if err := n.SetMemberAddr(t.Context(), "ghost", "127.0.0.1:9"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("ghost forgotten", func() bool {
		_, ok := n.MemberAddr("ghost")
		return !ok
	}))
	if addr, ok := n.MemberAddr("n1"); !ok || addr != "127.0.0.1:7001" {
		t.Errorf("n1's address = %q, %v; want it kept", addr, ok)
	}
}
