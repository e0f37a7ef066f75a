package tests

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestGroupsOntoANewNode grows a 3-node cluster of 4 raft groups onto a fourth machine and then
// replaces a dead one, while clients on every node lock and unlock keys over all the slots
// (docs/groups.md, "Onto new nodes"): the new node joins through a follower (--join, no
// --groups: it asks), becomes a voter of every group, and the balancer hands it the group it
// prefers; a node killed with kill -9 is then removed from every group by one RAFT REMOVE; a
// live node leading groups 0 and 3 removes itself from every group; a fifth node joins; a
// removal cut short after one group (RAFT REMOVE ... GROUP 3) leaves the node serving the
// others, RAFT PROMOTE adds it back, and RAFT REMOVE removes it from every group. No
// key is held by two clients at once, tokens per key rise in real-time order, a lock held in
// each group from the start keeps its holder, token and lease, and every group's replicas end
// equal.
func TestGroupsOntoANewNode(t *testing.T) {
	c := newClusterWith(t, 3, &cluster{nodeArgs: func(int) []string { return []string{"--groups", "4"} }})
	waitSpread(t, c, 3)
	plain := redis.NewClient(&redis.Options{Addr: c.nodes[2].addr}) // n3, which stays
	defer plain.Close()
	held := holdOnePerQuarter(t, plain, "growheld") // a lock in each group, held throughout
	load := newLockLoad("grow", "three nodes")
	for i, n := range c.nodes {
		load.start(i, n, true)
	}
	setPhase := load.setPhase

	setPhase("joining")
	n4 := c.join(c.nodes[1])
	if info, err := infoRaft(n4.addr); err != nil || info["raft_groups"] != "4" {
		t.Fatalf("%s joined without --groups runs raft_groups %q (%v); want 4, asked of its cluster", n4.id, info["raft_groups"], err)
	}
	waitGroupMembers(t, c.nodes[0], 4, []string{"n1", "n2", "n3", "n4"})
	if _, err := call(n4.addr, "RAFT", "MEMBERS", "GROUP", "4"); err == nil || !strings.Contains(err.Error(), "no raft group") {
		t.Errorf("RAFT MEMBERS GROUP 4 on a node of 4 groups: %v; want refused", err)
	}
	load.start(3, n4, true)
	setPhase("four nodes")
	leaders := waitSpread(t, c, 4)
	if leaders[3] != n4.id {
		t.Errorf("group leaders %v: group 3 not on the new node %s", leaders, n4.id)
	}
	// The new node leads group 3 and serves its keys.
	k := "grow3-"
	for i := 0; fsm.GroupOfSlot(fsm.KeySlot([]byte(k)), 4) != 3; i++ {
		k = "grow3-" + strconv.Itoa(i)
	}
	if v, err := call(n4.addr, "SET", k, "v"); err != nil || v != "OK" {
		t.Errorf("SET %s (group 3) through the new node: %v, %v", k, v, err)
	}

	setPhase("n1 down")
	c.nodes[0].kill9()
	setPhase("removing n1")
	// A dead member is removed without FORCE once the leaders' heartbeats to it fail.
	testutil.WaitFor(t, 30*time.Second, func() error {
		_, err := call(c.nodes[1].addr, "RAFT", "REMOVE", "n1")
		return err
	})
	waitGroupMembers(t, c.nodes[1], 4, []string{"n2", "n3", "n4"})
	setPhase("without n1")
	waitSpreadOver(t, c, []string{"n2", "n3", "n4"}, 3)

	// A live node removed through itself while it leads group 0 and group 3, which the removal
	// reaches first: it stays up until its removal from group 0, the last.
	n2 := c.nodes[1]
	if leaders := waitSpreadOver(t, c, []string{"n2", "n3", "n4"}, 3); leaders[0] != n2.id || leaders[3] != n2.id {
		t.Fatalf("group leaders %v: want n2 leading groups 0 and 3", leaders)
	}
	setPhase("removing n2 through itself")
	n2.ExpectExit()
	if v, err := callElected(n2.addr, "RAFT", "REMOVE", n2.id, "FORCE"); err != nil && !isConnError(err) {
		t.Errorf("RAFT REMOVE n2 FORCE through n2: %v, %v; want OK (or the link closed as it left)", v, err)
	}
	waitGroupMembers(t, c.nodes[2], 4, []string{"n3", "n4"})
	if err := n2.WaitExit(30 * time.Second); err != nil {
		t.Errorf("n2, removed: %v; want it to leave", err)
	}
	setPhase("joining n5")
	n5 := c.join(c.nodes[2])
	waitGroupMembers(t, c.nodes[2], 4, []string{"n3", "n4", "n5"})
	load.start(4, n5, true)

	// A removal cut short after its first group (as one whose next group refused it and could
	// not be undone would be): the node stays a member of the other groups and keeps serving;
	// RAFT PROMOTE adds it back where it went, and RAFT REMOVE then removes it from every group.
	setPhase("n4 removed from group 3")
	if _, err := callElected(c.nodes[2].addr, "RAFT", "REMOVE", n4.id, "FORCE", "GROUP", "3"); err != nil {
		t.Fatalf("RAFT REMOVE %s FORCE GROUP 3: %v", n4.id, err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if listed, err := groupLists(c.nodes[2], 3, n4.id); err != nil || listed {
			return fmt.Errorf("group 3 lists %s: %v, %v", n4.id, listed, err)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	if !n4.Running() {
		t.Fatalf("%s, removed from group 3 only, left: want it to stay a member of the others", n4.id)
	}
	setPhase("n4 added back to group 3")
	testutil.WaitFor(t, 30*time.Second, func() error {
		_, err := call(c.nodes[2].addr, "RAFT", "PROMOTE", n4.id)
		return err
	})
	waitGroupMembers(t, c.nodes[2], 4, []string{"n3", "n4", "n5"})
	setPhase("removing n4")
	n4.ExpectExit()
	if _, err := callElected(c.nodes[2].addr, "RAFT", "REMOVE", n4.id, "FORCE"); err != nil {
		t.Errorf("RAFT REMOVE %s FORCE: %v", n4.id, err)
	}
	if err := n4.WaitExit(30 * time.Second); err != nil {
		t.Errorf("%s, removed: %v; want it to leave", n4.id, err)
	}
	waitGroupMembers(t, c.nodes[2], 4, []string{"n3", "n5"})
	setPhase("two nodes")
	load.finish(t, []string{"joining", "four nodes", "removing n1", "without n1", "removing n2 through itself", "joining n5", "n4 removed from group 3", "n4 added back to group 3", "removing n4", "two nodes"})
	held.check(t, plain)
	sameGroupTables(t, c, 4)
}

// waitGroupMembers waits until n's view of every one of groups raft groups (RAFT MEMBERS GROUP
// g) lists exactly ids, each a voter, and each group has a leader among them.
func waitGroupMembers(t *testing.T, n *node, groups int, ids []string) {
	t.Helper()
	testutil.WaitFor(t, 60*time.Second, func() error {
		for g := range groups {
			ms, err := groupMembers(n.addr, g)
			if err != nil {
				return fmt.Errorf("RAFT MEMBERS GROUP %d on %s: %v", g, n.id, err)
			}
			var got []string
			leader := ""
			for _, m := range ms {
				got = append(got, m["id"]+"/"+m["suffrage"])
				if m["leader"] == "1" {
					leader = m["id"]
				}
			}
			var want []string
			for _, id := range ids {
				want = append(want, id+"/voter")
			}
			if !slices.Equal(got, want) || leader == "" {
				return fmt.Errorf("group %d on %s: members %v, leader %q; want %v", g, n.id, got, leader, want)
			}
		}
		return nil
	})
}

// waitSpreadOver is waitSpread for a cluster whose voters are ids (some nodes started were
// removed): the group leaders are where the balancer places them among ids, on want nodes.
func waitSpreadOver(t *testing.T, c *cluster, ids []string, want int) []string {
	t.Helper()
	ids = slices.Sorted(slices.Values(ids))
	var leaders []string
	testutil.WaitFor(t, 40*time.Second, func() error {
		var first []string
		for _, n := range c.live() {
			ls, err := groupLeaders(n)
			if err != nil {
				return err
			}
			if first == nil {
				first = ls
			} else if strings.Join(ls, ",") != strings.Join(first, ",") {
				return fmt.Errorf("%s names leaders %v, another node %v", n.id, ls, first)
			}
		}
		distinct := map[string]bool{}
		for g, l := range first {
			if l != ids[g%len(ids)] {
				return fmt.Errorf("group leaders %v: group %d not yet on %s, where the balancer places it", first, g, ids[g%len(ids)])
			}
			distinct[l] = true
		}
		if len(distinct) != want {
			return fmt.Errorf("group leaders %v on %d nodes; want %d", first, len(distinct), want)
		}
		leaders = first
		return nil
	})
	return leaders
}

// isConnError reports whether err is the link's failure (the node closed it, or a timeout)
// rather than the node's error reply.
func isConnError(err error) bool {
	var re *resp.ReplyError
	return err != nil && !errors.As(err, &re)
}

// groupLists reports whether n's view of raft group g's members (RAFT MEMBERS GROUP g) lists id.
func groupLists(n *node, g int, id string) (bool, error) {
	ms, err := groupMembers(n.addr, g)
	return slices.ContainsFunc(ms, func(m map[string]string) bool { return m["id"] == id }), err
}

// callElected is call, sent again for up to 20 s while the reply says the group has no leader
// right now (CLUSTERDOWN, TRYAGAIN): an election or the balancer's hand-off, which a client
// is told to wait out.
func callElected(addr string, args ...string) (any, error) {
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		v, err := call(addr, args...)
		var re *resp.ReplyError
		if !errors.As(err, &re) || re.Code() != "CLUSTERDOWN" && re.Code() != "TRYAGAIN" || time.Now().After(deadline) {
			return v, err
		}
	}
}
