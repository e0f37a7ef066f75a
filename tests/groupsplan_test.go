package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestConvertOneGroupToFour converts a running 3-node cluster of one raft group into one of
// four while clients lock and unlock keys on every node (docs/groups.md, "From one group to
// several"): RAFT GROUPS 4, a restart of each node in turn, then slot moves to the new groups.
// The cluster serves through every step (locks are granted while each node is down), no key is
// held by two clients at once, every key's tokens rise in real-time order, a lock held from
// before the conversion keeps its holder, token and lease, each new group serves the slots
// moved to it, every group's replicas end equal, and membership changes are refused once the
// groups are planned.
func TestConvertOneGroupToFour(t *testing.T) {
	c := newCluster(t, 3)

	plain := redis.NewClient(&redis.Options{Addr: c.nodes[0].addr})
	defer plain.Close()
	// A lock in each quarter of the slots, held through the conversion and the moves.
	held := holdOnePerQuarter(t, plain, "convheld")
	heldKeys := held.keys
	load := newLockLoad("conv", "one group")
	for i, n := range c.nodes {
		load.start(i, n, false) // its node restarts: the client waits for it
	}
	setPhase := load.setPhase

	setPhase("plan")
	if v, err := call(c.nodes[1].addr, "RAFT", "GROUPS", "4"); err != nil || v != "OK" {
		t.Fatalf("RAFT GROUPS 4 on a follower: %v, %v", v, err)
	}
	if _, err := call(c.nodes[1].addr, "RAFT", "GROUPS", "3"); err == nil || !strings.Contains(err.Error(), "already") {
		t.Errorf("RAFT GROUPS 3 after 4: %v; want refused", err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, n := range c.nodes {
			if info, err := infoRaft(n.addr); err != nil || info["raft_groups_planned"] != "4" {
				return fmt.Errorf("%s: raft_groups_planned %q, %v", n.id, info["raft_groups_planned"], err)
			}
		}
		return nil
	})
	if _, err := call(c.leader().addr, "RAFT", "REMOVE", c.nodes[2].id, "FORCE"); err == nil || !strings.Contains(err.Error(), "runs 1 of the 4 raft groups the cluster planned") {
		t.Errorf("RAFT REMOVE after the plan: %v; want refused until every member runs the planned groups", err)
	}

	// A rolling restart: each node comes back running four groups.
	move := func(g int) {
		t.Helper()
		first, last := fsm.DefaultSlots(g, 4)
		v, err := callWithin(2*time.Minute, c.nodes[g%2].addr, "RAFT", "MOVESLOTS", strconv.Itoa(first), strconv.Itoa(last), strconv.Itoa(g))
		if err != nil {
			t.Fatalf("RAFT MOVESLOTS %d %d %d: %v", first, last, g, err)
		}
		if n, ok := v.(int64); !ok || n < 1 {
			t.Errorf("RAFT MOVESLOTS %d %d %d moved %v keys; want at least its held lock", first, last, g, v)
		}
	}
	restart := func(n *node) {
		t.Helper()
		setPhase("restarting " + n.id)
		if err := n.stop(); err != nil {
			t.Fatalf("stop %s: %v", n.id, err)
		}
		time.Sleep(time.Second) // clients on the other nodes go on meanwhile
		c.restart(n)
	}
	restart(c.nodes[0])
	restart(c.nodes[1])

	// n3 still runs one group: a move to group 1 is refused, naming it. While n3 is down, a
	// move goes (its voters on n1 and n2 are a quorum of group 1), and n3, restarted, runs the
	// four groups and serves the moved slots.
	setPhase("n3 on one group")
	if l := c.leader(); l.id != c.nodes[0].id { // the move runs on group 0's leader, which must run group 1
		if v, err := call(l.addr, "RAFT", "TRANSFER", c.nodes[0].id); err != nil {
			t.Fatalf("RAFT TRANSFER %s: %v, %v", c.nodes[0].id, v, err)
		}
		c.leader()
	}
	first1, last1 := fsm.DefaultSlots(1, 4)
	_, err := callWithin(time.Minute, c.nodes[0].addr, "RAFT", "MOVESLOTS", strconv.Itoa(first1), strconv.Itoa(last1), "1")
	if err == nil || !strings.Contains(err.Error(), "member n3 runs 1 raft groups") {
		t.Errorf("RAFT MOVESLOTS to group 1 while n3 runs one group: %v; want refused, naming n3", err)
	}
	setPhase("moving with n3 down")
	if err := c.nodes[2].stop(); err != nil {
		t.Fatalf("stop n3: %v", err)
	}
	move(1)
	waitServedBy(t, c.nodes[:2], first1, 1, 10*time.Second)
	// n3 comes back as a node that missed the plan would (its record gone): one group, with
	// slots moved away from it. It refuses their keys, reads and pipelines included, and a
	// backup; it records the plan again, and its next restart runs the four groups.
	setPhase("n3 back on one group")
	if err := os.Remove(filepath.Join(c.nodes[2].dir, "groups")); err != nil {
		t.Fatal(err)
	}
	c.restart(c.nodes[2])
	checkNotRunHere(t, c.nodes[2], heldKeys)
	setPhase("restarting n3")
	if err := c.nodes[2].stop(); err != nil {
		t.Fatalf("stop n3: %v", err)
	}
	c.restart(c.nodes[2])
	testutil.WaitFor(t, 20*time.Second, func() error {
		if v, err := call(c.nodes[2].addr, "LOCK", heldKeys[1], "1000"); v != nil || err != nil {
			return fmt.Errorf("LOCK %s, held, on n3 restarted: %v, %v; want nil (held)", heldKeys[1], v, err)
		}
		return nil
	})
	setPhase("four groups")
	testutil.WaitFor(t, 30*time.Second, func() error { // every group elected a leader every node knows
		var first []string
		for _, n := range c.live() {
			ls, err := groupLeaders(n)
			if err != nil || len(ls) != 4 || slices.Contains(ls, "") {
				return fmt.Errorf("%s: group leaders %v, %v", n.id, ls, err)
			}
			if first != nil && !slices.Equal(ls, first) {
				return fmt.Errorf("%s names group leaders %v, another node %v", n.id, ls, first)
			}
			first = ls
		}
		return nil
	})
	move(2)
	move(3)
	for g := 1; g < 4; g++ {
		first, _ := fsm.DefaultSlots(g, 4)
		waitServedBy(t, c.nodes, first, g, 10*time.Second)
	}
	setPhase("moved")
	// Once every node runs the plan, the members may change again: a fourth node joins (it
	// asks its cluster's groups, and starts none of the added groups itself) and becomes a
	// voter of every group.
	n4 := c.join(c.nodes[1])
	waitGroupMembers(t, c.nodes[0], 4, []string{"n1", "n2", "n3", "n4"})
	if rec, err := os.ReadFile(filepath.Join(n4.dir, "groups")); err != nil || string(rec) != "4\nlayout 1\njoined 4\n" {
		t.Errorf("the joined node's groups record: %q, %v; want 4 groups of layout 1, joined", rec, err)
	}
	setPhase("n4 joined")
	load.finish(t, []string{"one group", "plan", "restarting n1", "restarting n2", "n3 on one group", "moving with n3 down", "n3 back on one group", "restarting n3", "four groups", "moved", "n4 joined"})
	held.check(t, plain)
	for g := 1; g < 4; g++ {
		first, _ := fsm.DefaultSlots(g, 4)
		info, err := infoRaft(c.nodes[0].addr)
		if err != nil || !servesSlot(info["raft_group"+strconv.Itoa(g)], first) {
			t.Errorf("group %d: %q, %v; want it to serve slot %d", g, info["raft_group"+strconv.Itoa(g)], err, first)
		}
	}
	sameGroupTables(t, c, 4)
}

// checkNotRunHere checks n, a node of one group whose group 0 moved the slot of heldKeys[1] to
// group 1 (heldKeys[0]'s stayed): every request on the moved key, forwarded, read locally
// (READONLY), pipelined, in a script, or with a key group 0 still serves, is refused with the
// reason, changing nothing; a backup is refused; the plan is recorded again.
func checkNotRunHere(t *testing.T, n *node, heldKeys []string) {
	t.Helper()
	ctx := context.Background()
	testutil.WaitFor(t, 20*time.Second, func() error {
		if info, err := infoRaft(n.addr); err != nil || info["raft_groups_planned"] != "4" {
			return fmt.Errorf("%s: raft_groups_planned %q, %v", n.id, info["raft_groups_planned"], err)
		}
		return nil
	})
	notRun := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "does not run yet") {
			t.Errorf("%s on %s, of one group: %v; want TRYAGAIN ... does not run yet", what, n.id, err)
		}
	}
	moved := heldKeys[1]
	_, err := call(n.addr, "LOCK", moved, "1000")
	notRun("LOCK "+moved, err)
	_, err = call(n.addr, "UNLOCK", moved, "1")
	notRun("UNLOCK "+moved, err)

	cl := redis.NewClient(&redis.Options{Addr: n.addr, PoolSize: 1, MaxRetries: -1})
	defer cl.Close()
	if err := cl.Do(ctx, "READONLY").Err(); err != nil {
		t.Fatalf("READONLY: %v", err)
	}
	// READONLY reads this node's table, which has the move once it caught up on group 0.
	testutil.WaitFor(t, 20*time.Second, func() error {
		if err := cl.Do(ctx, "PTTL", moved).Err(); err == nil || !strings.Contains(err.Error(), "does not run yet") {
			return fmt.Errorf("READONLY PTTL %s on %s, of one group: %v; want TRYAGAIN ... does not run yet", moved, n.id, err)
		}
		return nil
	})
	notRun("READONLY MGET "+heldKeys[0]+" "+moved, cl.Do(ctx, "MGET", heldKeys[0], moved).Err())
	cmds, _ := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "PTTL", heldKeys[0])
		p.Do(ctx, "PTTL", moved)
		return nil
	})
	if len(cmds) != 2 || cmds[0].Err() != nil {
		t.Errorf("pipelined PTTL %s: %v", heldKeys[0], cmds)
	} else {
		notRun("pipelined PTTL "+moved, cmds[1].Err())
	}
	notRun("EVAL reading "+moved, cl.Do(ctx, "EVAL", "return redis.call('pttl', KEYS[1])", "1", moved).Err())
	if _, err := call(n.addr, "RAFT", "BACKUP"); err == nil || !strings.Contains(err.Error(), "restart it") {
		t.Errorf("RAFT BACKUP on %s, of one group, with slots moved away: %v; want refused", n.id, err)
	}
}

// checkSpans checks every key's locks: no token granted twice, tokens in real-time order, and
// never two holders at once.
func checkSpans(t *testing.T, spans map[string][]heldSpan) {
	t.Helper()
	for key, ss := range spans {
		slices.SortFunc(ss, func(a, b heldSpan) int { return int(a.token - b.token) })
		for i := 1; i < len(ss); i++ {
			if ss[i].token == ss[i-1].token {
				t.Errorf("%s: token %d granted twice (%s, %s)", key, ss[i].token, ss[i-1].client, ss[i].client)
			}
		}
		for _, a := range ss {
			for _, b := range ss {
				if a.granted.Before(b.lockSent) && a.token > b.token {
					t.Errorf("%s: token %d (%s) granted before token %d (%s) was asked for", key, a.token, a.client, b.token, b.client)
				}
				if a != b && a.granted.Before(b.unlockSent) && b.granted.Before(a.unlockSent) {
					t.Errorf("%s: held by %s (token %d) and %s (token %d) at once", key, a.client, a.token, b.client, b.token)
				}
			}
		}
	}
}
