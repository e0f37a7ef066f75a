package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// groupLeaders reads each raft group's leader from n's INFO raft (raft_groupN lines).
func groupLeaders(n *node) ([]string, error) {
	info, err := infoRaft(n.addr)
	if err != nil {
		return nil, err
	}
	groups, err := strconv.Atoi(info["raft_groups"])
	if err != nil {
		return nil, fmt.Errorf("%s: raft_groups %q", n.id, info["raft_groups"])
	}
	out := make([]string, groups)
	for g := range groups {
		for _, f := range strings.Split(info["raft_group"+strconv.Itoa(g)], ",") {
			if v, ok := strings.CutPrefix(f, "leader="); ok {
				out[g] = v
			}
		}
	}
	return out, nil
}

// waitSpread waits until every live node names the same leader for each group and those
// leaders are want distinct nodes.
func waitSpread(t *testing.T, c *cluster, want int) []string {
	t.Helper()
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
		for _, l := range first {
			if l == "" {
				return fmt.Errorf("a group has no leader: %v", first)
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

// TestFourGroupsOnThreeNodes: a 3-node cluster of 4 raft groups spreads the groups' leaders
// over the three nodes; plain clients on any node, go-redis's cluster client and redis-cli -c
// all read and write every slot; fencing tokens of a key increase; a leader's kill -9 leaves
// every key served, and its groups come back to it after it restarts.
func TestFourGroupsOnThreeNodes(t *testing.T) {
	c := newCluster(t, 3, "--groups", "4")
	waitSpread(t, c, 3)
	ctx := context.Background()

	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	for i, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.addr})
		defer cl.Close()
		for j, k := range keys {
			if j%3 != i {
				continue
			}
			if err := cl.Set(ctx, k, "v"+k, 0).Err(); err != nil {
				t.Fatalf("SET %s through %s: %v", k, n.id, err)
			}
		}
	}
	for _, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.addr})
		defer cl.Close()
		for _, k := range keys {
			if v, err := cl.Get(ctx, k).Result(); err != nil || v != "v"+k {
				t.Fatalf("GET %s through %s: %q, %v", k, n.id, v, err)
			}
		}
		if err := cl.MSet(ctx, keys[0], "x", keys[1], "y").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
			t.Errorf("MSET of keys in two slots through %s: %v; want CROSSSLOT", n.id, err)
		}
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs(c.nodes)})
	defer cc.Close()
	for _, k := range keys {
		if v, err := cc.Get(ctx, k).Result(); err != nil || v != "v"+k {
			t.Fatalf("cluster client GET %s: %q, %v", k, v, err)
		}
		if err := cc.Set(ctx, "{"+k+"}c", "c", 0).Err(); err != nil {
			t.Fatalf("cluster client SET: %v", err)
		}
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not installed: %v", err)
	}
	if out := redisCLI(t, c.nodes[0].addr, "", "-c", "SET", "cli-key", "cli"); out != "OK\n" {
		t.Errorf("redis-cli -c SET: %q", out)
	}
	if out := redisCLI(t, c.nodes[2].addr, "", "-c", "GET", "cli-key"); out != "cli\n" {
		t.Errorf("redis-cli -c GET: %q", out)
	}

	// Fencing tokens of one key increase from grant to grant, whichever node is asked.
	var last int64
	for i := range 6 {
		n := c.nodes[i%3]
		tok, err := callInt(n.addr, "LOCK", "fenced", "10000", "OWNER", "o"+strconv.Itoa(i))
		if err != nil || tok <= last {
			t.Fatalf("LOCK fenced through %s: token %d, %v; want above %d", n.id, tok, err, last)
		}
		last = tok
		if _, err := call(n.addr, "UNLOCK", "fenced", strconv.FormatInt(tok, 10)); err != nil {
			t.Fatal(err)
		}
	}

	// kill -9 the node that leads group 0: every key stays served by the other two.
	leaders := waitSpread(t, c, 3)
	var victim *node
	for _, n := range c.nodes {
		if n.id == leaders[0] {
			victim = n
		}
	}
	victim.kill9()
	rest := c.others(victim)
	testutil.WaitFor(t, 20*time.Second, func() error {
		for _, k := range keys {
			v, err := call(rest[0].addr, "GET", k)
			if err != nil || v != "v"+k {
				return fmt.Errorf("GET %s through %s after %s's kill: %v, %v", k, rest[0].id, victim.id, v, err)
			}
		}
		return nil
	})
	if _, err := call(rest[1].addr, "SET", keys[0], "after"); err != nil {
		t.Fatalf("SET after the kill: %v", err)
	}
	c.restart(victim)
	waitSpread(t, c, 3)
	if v, err := call(c.nodes[0].addr, "GET", keys[0]); err != nil || v != "after" {
		t.Errorf("GET %s after the restart: %v, %v", keys[0], v, err)
	}
}
