package tests

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// A client configured with database 9 (go-redis's DB option SELECTs it at connect) works through
// a follower: its keys are database 9's on every node, and database 0 does not see them.
func TestDatabasesThroughFollower(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f := c.others(l)[0]
	ctx := testContext(t, 20e9)
	in9 := redis.NewClient(&redis.Options{Addr: f.addr, DB: 9, MaxRetries: -1})
	defer in9.Close()
	if err := in9.Set(ctx, "db:key", "nine", 0).Err(); err != nil {
		t.Fatalf("SET in database 9 through follower %s: %v", f.id, err)
	}
	if ok, err := in9.SetNX(ctx, "db:lock", "me", 0).Result(); err != nil || !ok {
		t.Fatalf("SETNX in database 9: %v, %v", ok, err)
	}
	on9 := redis.NewClient(&redis.Options{Addr: l.addr, DB: 9, MaxRetries: -1})
	defer on9.Close()
	if v, err := on9.Get(ctx, "db:key").Result(); err != nil || v != "nine" {
		t.Errorf("GET in database 9 on the leader = %q, %v", v, err)
	}
	on0 := redis.NewClient(&redis.Options{Addr: l.addr, MaxRetries: -1})
	defer on0.Close()
	if n, err := on0.Exists(ctx, "db:key", "db:lock").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS in database 0 = %d, %v; want 0", n, err)
	}
	if n, err := in9.DBSize(ctx).Result(); err != nil || n != 2 {
		t.Errorf("DBSIZE in database 9 = %d, %v; want 2", n, err)
	}
}
