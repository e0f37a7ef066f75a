package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestClusterACL checks that ACL users are replicated state: an ACL SETUSER sent to a follower
// (forwarded to the leader like a write) is enforced on every node, a follower forwards a
// user's requests to the leader logged in as that user, and an ACL DELUSER ends the user
// everywhere.
func TestClusterACL(t *testing.T) {
	c := newCluster(t, 3)
	f := c.followers()
	ctx := context.Background()
	if v, err := call(f[0].addr, "ACL", "SETUSER", "alice", "on", ">pw", "~locks:a:*", "+@read", "+@write", "-@admin"); err != nil || v != "OK" {
		t.Fatalf("ACL SETUSER on a follower: %v %v", v, err)
	}
	for _, n := range c.live() {
		testutil.WaitFor(t, convergeTimeout, func() error {
			v, err := call(n.addr, "ACL", "GETUSER", "alice")
			if err == nil && v == nil {
				return errors.New("alice is not there yet")
			}
			return err
		})
		alice := userClient(t, n.addr, "alice", "pw")
		key := "locks:a:" + n.id
		if tok, err := alice.Do(ctx, "LOCK", key, "10000").Int64(); err != nil || tok <= 0 {
			t.Errorf("%s: alice's LOCK %s: %v %v", n.id, key, tok, err)
		}
		if err := alice.Do(ctx, "LOCK", "locks:b:1", "10000").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM this user has no permissions to access one of the keys") {
			t.Errorf("%s: alice's LOCK of another team's key: %v", n.id, err)
		}
		if err := alice.Do(ctx, "RAFT", "REMOVE", "n1").Err(); err == nil || err.Error() != "NOPERM this user has no permissions to run the 'raft|remove' command" {
			t.Errorf("%s: alice's RAFT REMOVE: %v", n.id, err)
		}
		if err := userClient(t, n.addr, "alice", "bad").Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Errorf("%s: a wrong password: %v", n.id, err)
		}
	}
	if v, err := callInt(c.leader().addr, "ACL", "DELUSER", "alice"); err != nil || v != 1 {
		t.Fatalf("ACL DELUSER: %v %v", v, err)
	}
	for _, n := range c.live() {
		testutil.WaitFor(t, convergeTimeout, func() error {
			cl := userClient(t, n.addr, "alice", "pw")
			defer cl.Close()
			err := cl.Ping(ctx).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
				return err
			}
			return nil
		})
	}
}

// userClient is a go-redis client logging in as user, closed with the test.
func userClient(t *testing.T, addr, user, pass string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass, MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	return c
}
