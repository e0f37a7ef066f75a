package tests

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestClusterForwarding checks that any node serves any client: a plain go-redis client on each
// node, RESP2 and RESP3, runs the native lock flow (a follower forwards it to the leader over one
// upstream connection per client, so the token-less UNLOCK of the connection that locked works
// through it too); a cluster-mode client given every address routes itself to the leader.
func TestClusterForwarding(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	t.Logf("leader %s", l.id)
	for _, n := range c.nodes {
		role := "follower"
		if n == l {
			role = "leader"
		}
		for _, proto := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s-%s-RESP%d", n.id, role, proto), func(t *testing.T) {
				testForwardedFlow(t, c, n, proto, fmt.Sprintf("fwd/%s/%d", n.id, proto))
			})
		}
	}
	t.Run("ClusterClient", func(t *testing.T) {
		for _, proto := range []int{2, 3} {
			testClusterClient(t, c, l, proto, fmt.Sprintf("cc/%d", proto))
		}
	})
}

// testForwardedFlow runs LOCK, a contender on the same node and on another, LOCKINFO, a
// token-less RENEW and UNLOCK on the locking connection (and a refused one elsewhere) on n.
func testForwardedFlow(t *testing.T, c *cluster, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	rdb := newClient(t, n.addr, proto)
	mine, other := rdb.Conn(), rdb.Conn()
	t.Cleanup(func() { mine.Close(); other.Close() })
	elsewhere := newClient(t, c.others(n)[0].addr, proto)

	tok, err := mine.Do(ctx, "LOCK", key, 10000).Int64()
	if err != nil || tok <= 0 {
		t.Fatalf("LOCK: %d, %v; want a token", tok, err)
	}
	if got, err := other.Do(ctx, "LOCK", key, 10000).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("LOCK by a contender on the same node: %v, %v; want nil", got, err)
	}
	if got, err := elsewhere.Do(ctx, "LOCK", key, 10000, "OWNER", "x").Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("LOCK by a contender on another node: %v, %v; want nil", got, err)
	}
	if st, held, err := lockInfo(ctx, elsewhere, key); err != nil || !held || st.token != tok {
		t.Errorf("LOCKINFO on another node: %+v held=%v, %v; want token %d", st, held, err, tok)
	}
	if got, err := mine.Do(ctx, "RENEW", key, 20000).Int64(); err != nil || got != 1 {
		t.Errorf("RENEW without a token on the locking connection: %d, %v; want 1", got, err)
	}
	if err := other.Do(ctx, "UNLOCK", key).Err(); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("UNLOCK without a token on another connection: %v; want an error asking for the token", err)
	}
	if got, err := mine.Do(ctx, "UNLOCK", key).Int64(); err != nil || got != 1 {
		t.Errorf("UNLOCK without a token on the locking connection: %d, %v; want 1", got, err)
	}
	if got, err := elsewhere.Exists(ctx, key).Result(); err != nil || got != 0 {
		t.Errorf("EXISTS after UNLOCK, on another node: %d, %v; want 0", got, err)
	}
	next, err := other.Do(ctx, "LOCK", key, 10000).Int64()
	if err != nil || next <= tok {
		t.Errorf("LOCK after UNLOCK: %d, %v; want a token > %d", next, err, tok)
	}
	if got, err := other.Do(ctx, "UNLOCK", key).Int64(); err != nil || got != 1 {
		t.Errorf("UNLOCK without a token by the next holder: %d, %v; want 1", got, err)
	}
}

// testClusterClient locks and unlocks through a go-redis ClusterClient given every node's
// address: CLUSTER SLOTS names the leader as the owner of every slot.
func testClusterClient(t *testing.T, c *cluster, l *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs(c.nodes), Protocol: proto, MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
	})
	t.Cleanup(func() { cc.Close() })
	owner, err := cc.MasterForKey(ctx, key)
	if err != nil || owner.Options().Addr != l.addr {
		addr := ""
		if owner != nil {
			addr = owner.Options().Addr
		}
		t.Errorf("RESP%d: the master of %q: %q, %v; want the leader %s at %s", proto, key, addr, err, l.id, l.addr)
	}
	tok, err := cc.Do(ctx, "LOCK", key, 10000).Int64()
	if err != nil || tok <= 0 {
		t.Fatalf("RESP%d: LOCK through a ClusterClient: %d, %v; want a token", proto, tok, err)
	}
	if got, err := cc.Do(ctx, "LOCK", key, 10000).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("RESP%d: LOCK again: %v, %v; want nil", proto, got, err)
	}
	if ok, err := cc.SetNX(ctx, key+"/set", "v", 10*time.Second).Result(); err != nil || !ok {
		t.Errorf("RESP%d: SET NX PX: %v, %v; want OK", proto, ok, err)
	}
	if got, err := cc.Get(ctx, key+"/set").Result(); err != nil || got != "v" {
		t.Errorf("RESP%d: GET: %q, %v; want v", proto, got, err)
	}
	if got, err := cc.Do(ctx, "UNLOCK", key, tok).Int64(); err != nil || got != 1 {
		t.Errorf("RESP%d: UNLOCK %d: %d, %v; want 1", proto, tok, got, err)
	}
	if got, err := cc.Del(ctx, key+"/set").Result(); err != nil || got != 1 {
		t.Errorf("RESP%d: DEL: %d, %v; want 1", proto, got, err)
	}
}

// movedSlot is Redis Cluster's slot of the hash tag {foo} (CLUSTER KEYSLOT foo = 12182).
const movedSlot = 12182

// TestClusterRedirect runs a cluster with --redirect true: a follower answers a plain client's
// lock commands and linearizable reads with -MOVED naming the slot and the leader's address, a
// READONLY connection reads its own table, and a ClusterClient whose topology is stale (it
// thinks a follower owns every slot) follows the MOVED to the leader.
func TestClusterRedirect(t *testing.T) {
	c := newCluster(t, 3, "--redirect", "true")
	l := c.leader()
	f := c.others(l)[0]
	ctx := testContext(t, 30*time.Second)
	key := "{foo}redirect"

	plain := newClient(t, f.addr, 2)
	wantMoved := "MOVED " + strconv.Itoa(movedSlot) + " " + l.addr
	for _, args := range [][]any{{"LOCK", key, 10000}, {"GET", key}, {"UNLOCK", key, 1}} {
		if err := plain.Do(ctx, args...).Err(); err == nil || err.Error() != wantMoved {
			t.Errorf("%v on the follower %s: %v; want %q", args, f.id, err, wantMoved)
		}
	}
	// The leader answers, and a READONLY connection on the follower reads its own table.
	tok, err := newClient(t, l.addr, 3).Do(ctx, "LOCK", key, 10000, "OWNER", "o").Int64()
	if err != nil {
		t.Fatalf("LOCK on the leader: %v", err)
	}
	ro := plain.Conn()
	t.Cleanup(func() { ro.Close() })
	if err := ro.ReadOnly(ctx).Err(); err != nil {
		t.Fatalf("READONLY: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if got, err := ro.Get(ctx, key).Result(); err != nil || got != "o" {
			return fmt.Errorf("GET on a READONLY connection to the follower: %q, %v; want o", got, err)
		}
		return nil
	})
	if err := ro.Do(ctx, "LOCK", key+"2", 10000).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Errorf("LOCK on a READONLY connection to the follower: %v; want MOVED", err)
	}

	for _, proto := range []int{2, 3} {
		follower := redis.ClusterSlot{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: f.addr}}}
		cc := redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{follower}, nil
			},
			Protocol: proto, MaxRetries: -1, DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
		})
		t.Cleanup(func() { cc.Close() })
		k := fmt.Sprintf("%s/cc%d", key, proto)
		tok2, err := cc.Do(ctx, "LOCK", k, 10000).Int64()
		if err != nil || tok2 <= tok {
			t.Errorf("RESP%d: LOCK through a ClusterClient pointed at the follower: %d, %v; want a token > %d", proto, tok2, err, tok)
			continue
		}
		if got, err := cc.Do(ctx, "UNLOCK", k, tok2).Int64(); err != nil || got != 1 {
			t.Errorf("RESP%d: UNLOCK through a ClusterClient pointed at the follower: %d, %v; want 1", proto, got, err)
		}
	}
	c.digests()
}

// TestClusterPipelinedForwarding pipelines through every node: a follower forwards the
// pipeline as a pipeline (each command sent before the replies of the earlier ones come back),
// and the replies still come in order with what sending them one at a time would give.
func TestClusterPipelinedForwarding(t *testing.T) {
	c := newCluster(t, 3)
	for _, n := range c.nodes {
		t.Run(n.id, func(t *testing.T) {
			ctx := testContext(t, 20*time.Second)
			rdb := redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, PoolSize: 1})
			defer rdb.Close()
			const count = 40
			pipe := rdb.Pipeline()
			locks := make([]*redis.Cmd, count)
			for i := range locks {
				locks[i] = pipe.Do(ctx, "LOCK", fmt.Sprintf("pipe/%s/%d", n.id, i), 10000)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			var prev int64
			for i, cmd := range locks {
				tok, err := cmd.Int64()
				if err != nil || tok <= prev {
					t.Fatalf("LOCK %d = %d, %v; want a token above %d", i, tok, err, prev)
				}
				prev = tok
			}
			// Token-less UNLOCKs rely on the tokens the connection remembered; a LOCK, UNLOCK,
			// LOCK of one key in one pipeline must see each other.
			pipe = rdb.Pipeline()
			unlocks := make([]*redis.Cmd, count)
			for i := range unlocks {
				unlocks[i] = pipe.Do(ctx, "UNLOCK", fmt.Sprintf("pipe/%s/%d", n.id, i))
			}
			key := "pipe/" + n.id + "/same"
			first := pipe.Do(ctx, "LOCK", key, 10000)
			release := pipe.Do(ctx, "UNLOCK", key)
			again := pipe.Do(ctx, "LOCK", key, 10000)
			exists := pipe.Do(ctx, "EXISTS", key)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			for i, cmd := range unlocks {
				if v, err := cmd.Int64(); err != nil || v != 1 {
					t.Errorf("UNLOCK %d = %d, %v; want 1", i, v, err)
				}
			}
			t1, err1 := first.Int64()
			r, err2 := release.Int64()
			t2, err3 := again.Int64()
			e, err4 := exists.Int64()
			if err := errors.Join(err1, err2, err3, err4); err != nil || r != 1 || t2 <= t1 || e != 1 {
				t.Errorf("LOCK, UNLOCK, LOCK, EXISTS = %d, %d, %d, %d (%v); want a token, 1, a later token, 1", t1, r, t2, e, err)
			}
		})
	}
}
