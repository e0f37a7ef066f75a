package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/tests/testutil"
)

func TestPreferredLeader(t *testing.T) {
	c := raft.Configuration{Servers: []raft.Server{
		{ID: "n3", Suffrage: raft.Voter}, {ID: "n1", Suffrage: raft.Voter},
		{ID: "n9", Suffrage: raft.Nonvoter}, {ID: "n2", Suffrage: raft.Voter},
	}}
	var got []raft.ServerID
	for g := range 5 {
		got = append(got, preferredLeader(g, c))
	}
	if want := []raft.ServerID{"n1", "n2", "n3", "n1", "n2"}; !slices.Equal(got, want) {
		t.Errorf("preferred leaders of groups 0-4: %v; want %v (voters by ID, non-voters never)", got, want)
	}
	if got := preferredLeader(0, raft.Configuration{}); got != "" {
		t.Errorf("preferred leader without voters: %q; want none", got)
	}
}

// TestBalancerSpreadsLeadersAndBringsThemBack: three nodes of three groups, a balancer on each:
// each node ends up leading one group (its preferred one); a stopped node's group elects a
// leader among the others, and moves back once the node is back.
func TestBalancerSpreadsLeadersAndBringsThemBack(t *testing.T) {
	const nodes, groups = 3, 3
	gc := startGroupCluster(t, nodes, groups)
	balancers := make([]*Balancer, nodes)
	startBalancer := func(i int) {
		var ms []*Member
		for g := range groups {
			ms = append(ms, gc.members[g][i].Member)
		}
		balancers[i] = StartBalancer(ms, BalanceConfig{Interval: 50 * time.Millisecond,
			Settle: 300 * time.Millisecond, Retry: time.Second, Logger: testutil.RaftLogger()})
	}
	for i := range nodes {
		startBalancer(i)
	}
	t.Cleanup(func() {
		for _, b := range balancers {
			if b != nil {
				b.Stop()
			}
		}
	})
	spread := []string{"n1", "n2", "n3"} // group g prefers the voter g mod 3 by ID
	wantLeaders := func(want []string) {
		t.Helper()
		testutil.WaitFor(t, 20*time.Second, func() error {
			if got := gc.leaders(); !slices.Equal(got, want) {
				return fmt.Errorf("leaders by group %v; want %v", got, want)
			}
			return nil
		})
	}
	wantLeaders(spread)

	balancers[1].Stop()
	balancers[1] = nil
	gc.stopNode(1)
	testutil.WaitFor(t, 20*time.Second, func() error {
		got := gc.leaders()
		if got[0] != "n1" || got[2] != "n3" || (got[1] != "n1" && got[1] != "n3") {
			return fmt.Errorf("leaders by group with n2 stopped %v; want n1, n1 or n3, n3", got)
		}
		return nil
	})

	gc.restartNode(1)
	startBalancer(1)
	wantLeaders(spread)
}
