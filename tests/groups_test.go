package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/server"
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
// leaders are where the balancer places them (cluster/balance.go: group g on the g mod n-th of
// the voters sorted by ID), on want distinct nodes: no hand-off is still to come, so the
// leaders a test reads stay put unless it makes them move.
func waitSpread(t *testing.T, c *cluster, want int) []string {
	t.Helper()
	var ids []string
	for _, n := range c.nodes {
		ids = append(ids, n.id)
	}
	return waitSpreadOver(t, c, ids, want)
}

// TestFourGroupsOnThreeNodes: a 3-node cluster of 4 raft groups spreads the groups' leaders
// over the three nodes; each node's status page lists the four groups with their slots and
// leaders; plain clients on any node, go-redis's cluster client and redis-cli -c all read and
// write every slot; fencing tokens of a key increase; a leader's kill -9 leaves every key
// served, and its groups come back to it after it restarts.
func TestFourGroupsOnThreeNodes(t *testing.T) {
	webs := make([]string, 3)
	c := newClusterWith(t, 3, &cluster{extra: []string{"--groups", "4"}, nodeArgs: func(i int) []string {
		webs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		return []string{"--metrics-addr", webs[i]}
	}})
	leaders := waitSpread(t, c, 3)
	checkGroupsStatus(t, webs[0], leaders)
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
	// A connection that read CLUSTER SLOTS is a cluster-mode client's: a node that does not lead
	// a key's group tells it MOVED to the leader; a plain connection is served through it.
	for _, n := range c.nodes {
		var key string
		var leader *node
		for _, k := range keys {
			for _, o := range c.nodes {
				if o.id == leaders[server.GroupOfKey([]byte(k), 4)] && o != n {
					key, leader = k, o
				}
			}
		}
		if key == "" {
			continue // n leads every group (not with 4 groups spread over 3 nodes)
		}
		aware := redis.NewClient(&redis.Options{Addr: n.addr, PoolSize: 1})
		if err := aware.ClusterSlots(ctx).Err(); err != nil {
			t.Fatalf("CLUSTER SLOTS through %s: %v", n.id, err)
		}
		_, err := aware.Get(ctx, key).Result()
		if want := fmt.Sprintf("MOVED %d %s", fsm.KeySlot([]byte(key)), leader.addr); err == nil || err.Error() != want {
			t.Errorf("GET %s through %s after CLUSTER SLOTS: %v; want %q", key, n.id, err, want)
		}
		aware.Close()
		plain := redis.NewClient(&redis.Options{Addr: n.addr, PoolSize: 1})
		if v, err := plain.Get(ctx, key).Result(); err != nil || v != "v"+key {
			t.Errorf("plain GET %s through %s: %q, %v", key, n.id, v, err)
		}
		// A token-less UNLOCK takes its token from this connection's memory: it is forwarded
		// even once the connection asked CLUSTER SLOTS (the leader's connection would not know it).
		lockKey := "{" + key + "}lock"
		if err := plain.Do(ctx, "LOCK", lockKey, "60000").Err(); err != nil {
			t.Fatalf("LOCK %s through %s: %v", lockKey, n.id, err)
		}
		if err := plain.ClusterSlots(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := plain.Do(ctx, "UNLOCK", lockKey).Int(); err != nil || got != 1 {
			t.Errorf("token-less UNLOCK %s through %s after CLUSTER SLOTS: %d, %v; want 1", lockKey, n.id, got, err)
		}
		plain.Close()
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

	sameGroupTables(t, c, 4)

	// kill -9 the node that leads group 0: every key stays served by the other two.
	leaders = waitSpread(t, c, 3)
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
	sameGroupTables(t, c, 4)
}

// sameGroupTables waits until every node's table of each raft group is the same, by RAFT
// DIGEST g (applied index and the table's hash): the groups' replicas agree.
func sameGroupTables(t *testing.T, c *cluster, groups int) {
	t.Helper()
	for g := range groups {
		testutil.WaitFor(t, 20*time.Second, func() error {
			var first string
			for _, n := range c.live() {
				v, err := call(n.addr, "RAFT", "DIGEST", strconv.Itoa(g))
				if err != nil {
					return fmt.Errorf("RAFT DIGEST %d on %s: %v", g, n.id, err)
				}
				d := fmt.Sprint(v)
				if first == "" {
					first = d
				} else if d != first {
					return fmt.Errorf("group %d: %s's table is %s, another node's %s", g, n.id, d, first)
				}
			}
			return nil
		})
	}
}

// checkGroupsStatus checks a node's status page at web: /status.json lists each raft group
// with its slots and its leader (leaders), and the page, rendered in headless Chromium, shows
// a row per group.
func checkGroupsStatus(t *testing.T, web string, leaders []string) {
	t.Helper()
	var st struct {
		Groups []struct {
			Group    int    `json:"group"`
			Slots    string `json:"slots"`
			LeaderID string `json:"leader_id"`
		} `json:"groups"`
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		res, err := http.Get("http://" + web + "/status.json")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return err
		}
		if len(st.Groups) != len(leaders) {
			return fmt.Errorf("status.json lists %d groups, want %d", len(st.Groups), len(leaders))
		}
		for g, sg := range st.Groups {
			first, last := fsm.DefaultSlots(g, len(leaders))
			if sg.Group != g || sg.Slots != fmt.Sprintf("%d-%d", first, last) || sg.LeaderID != leaders[g] {
				return fmt.Errorf("status.json's group %d: %+v; want slots %d-%d, leader %s", g, sg, first, last, leaders[g])
			}
		}
		return nil
	})
	dom := string(chromium(t, "http://"+web+"/", "--dump-dom"))
	if strings.Contains(dom, `id="groups-section" hidden`) {
		t.Error("the status page hides its raft groups section on a node of several groups")
	}
	for g := range leaders {
		if !strings.Contains(dom, fmt.Sprintf(`data-group="%d"`, g)) {
			t.Errorf("the status page has no row for raft group %d", g)
		}
	}
}

// TestGroupsBackupRestore: a backup of a 3-node cluster of 4 raft groups, taken from a node that
// follows group 0 (so it asks group 0's leader, and the leaders of the other groups it does not
// lead, for their read index with RAFT READINDEX g), holds every group's table; restored into a
// new 3-node cluster, it serves every lock with its owner and token on every node, runs 4 groups
// (recorded in each restored dir), and grants each group's tokens above the backup's.
func TestGroupsBackupRestore(t *testing.T) {
	c := newCluster(t, 3, "--groups", "4")
	leaders := waitSpread(t, c, 3)
	type held struct {
		owner string
		token int64
	}
	locked := map[string]held{}
	for i := range 48 {
		key := fmt.Sprintf("bk%d", i)
		n := c.nodes[i%3]
		tok, err := callInt(n.addr, "LOCK", key, "600000", "OWNER", "o"+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("LOCK %s through %s: %v", key, n.id, err)
		}
		locked[key] = held{"o" + strconv.Itoa(i), tok}
	}
	var from *node
	for _, n := range c.nodes {
		if n.id != leaders[0] {
			from = n
		}
	}
	file := filepath.Join(t.TempDir(), "groups.rlbackup")
	out := runRaftlock(t, "backup", "--from", from.addr, "--out", file)
	t.Logf("raftlock backup --from %s (group leaders %v):\n%s", from.id, leaders, out)
	if !strings.Contains(out, "4 raft groups") {
		t.Errorf("raftlock backup does not say it copied 4 raft groups:\n%s", out)
	}
	h, tables, err := backup.ReadFile(file)
	if err != nil {
		t.Fatalf("the backup does not read back: %v", err)
	}
	if len(tables) != 4 || len(h.Groups) != 4 || h.SourceNode != from.id {
		t.Fatalf("backup of %d tables, header %+v; want 4 groups from %s", len(tables), h, from.id)
	}
	for key, want := range locked {
		found := 0
		for _, m := range tables {
			if l, ok := m.Get(fsm.DBKey(0, []byte(key))); ok {
				found++
				if string(l.Owner) != want.owner || int64(l.Token) != want.token {
					t.Errorf("%s in the backup: owner %q token %d; want %s, %d", key, l.Owner, l.Token, want.owner, want.token)
				}
			}
		}
		if found != 1 {
			t.Errorf("%s is in %d of the backup's groups, want 1", key, found)
		}
	}

	restored := restoreCluster(t, file, func(n *node, _ string) {
		if b, err := os.ReadFile(filepath.Join(n.dir, "groups")); err != nil || string(b) != "4\n" {
			t.Errorf("%s's restored dir records groups %q, %v; want 4", n.id, b, err)
		}
	})
	waitSpread(t, restored, 3)
	ctx := testContext(t, 30*time.Second)
	for _, n := range restored.nodes {
		rdb := newClient(t, n.addr, 2)
		for key, want := range locked {
			st, ok, err := lockInfo(ctx, rdb, key)
			if err != nil || !ok || st.owner != want.owner || st.token != want.token {
				t.Errorf("LOCKINFO %s through %s after restore: %+v held=%v, %v; want owner %s, token %d", key, n.id, st, ok, err, want.owner, want.token)
			}
		}
	}
	// Each group's counter goes on above its tokens in the backup: a new key in the slot of
	// every locked key (same hash tag) gets a larger token.
	for key, want := range locked {
		tok, err := callInt(restored.nodes[0].addr, "LOCK", "{"+key+"}after", "60000")
		if err != nil || tok <= want.token {
			t.Errorf("LOCK {%s}after through %s: token %d, %v; want above %d", key, restored.nodes[0].id, tok, err, want.token)
		}
	}
}
