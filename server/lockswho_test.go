package server

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// lockFields are LOCKS's or LOCKWAITERS's entries (RESP3 maps) by their key or owner.
func lockFields(t *testing.T, entries any, by string) map[string]map[any]any {
	t.Helper()
	list, ok := entries.([]any)
	if !ok {
		t.Fatalf("entries %#v, want an array", entries)
	}
	out := map[string]map[any]any{}
	for _, e := range list {
		m, ok := e.(map[any]any)
		if !ok {
			t.Fatalf("entry %#v, want a map", e)
		}
		out[m[by].(string)] = m
	}
	return out
}

// LOCKS says when each holder was granted its lock and which node its client is on: this one,
// or none for a link that names a node that is not a member; a lock taken again by its holder
// keeps its first grant time; a key SET without NX has neither. LOCKWAITERS says when a waiter
// queued.
func TestLocksSinceAndNode(t *testing.T) {
	ctx := context.Background()
	m := startMember(t, nil)
	leaderAddr, _ := serveAdmin(t, m.Core(), m, nil) // NodeID n1, the core's raft ID
	followerAddr, _ := serveNode(t, followerOf{m.Core(), leaderAddr}, func(c *Config) { c.NodeID = "n2" })
	leader, follower := client(t, leaderAddr, 3), client(t, followerAddr, 3)

	before := time.Now().UnixMilli()
	mustDo := func(c *redis.Client, args ...any) any {
		t.Helper()
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return v
	}
	mustDo(follower, "LOCK", "a", "60000", "OWNER", "alice")
	mustDo(leader, "LOCK", "b", "60000", "SHARED", "OWNER", "bob")
	mustDo(leader, "SEMACQUIRE", "s", "2", "60000", "OWNER", "sem")
	mustDo(follower, "SET", "c", "x")
	after := time.Now().UnixMilli()

	locks := func() map[string]map[any]any {
		page := mustDo(leader, "LOCKS", "COUNT", "100").([]any)
		return lockFields(t, page[1], "owner")
	}
	got := locks()
	// n2 is no member of this one-node cluster: a link naming it names none (a member's is
	// shown: tests/lockswho_test.go, on three nodes).
	for owner, node := range map[string]any{"alice": nil, "bob": "n1", "sem": "n1"} {
		e := got[owner]
		if e == nil {
			t.Fatalf("LOCKS has no %s: %v", owner, got)
		}
		since, ok := e["since"].(int64)
		if !ok || since < before || since > after || e["node"] != node {
			t.Errorf("%s's lock: since %v node %v, want a time in [%d, %d] and %v", owner, e["since"], e["node"], before, after, node)
		}
	}
	if e := got["x"]; e == nil || e["since"] != nil || e["node"] != nil {
		t.Errorf("a key SET without NX: %v, want no grant time and no node", e)
	}

	// alice asks again (a retry): the same token, held since the first grant.
	first := got["alice"]["since"]
	time.Sleep(5 * time.Millisecond)
	mustDo(follower, "LOCK", "a", "60000", "OWNER", "alice")
	if again := locks()["alice"]["since"]; again != first {
		t.Errorf("held since %v after the same holder's LOCK again, want %v", again, first)
	}

	// A waiter through the follower.
	waitStart := time.Now().UnixMilli()
	w := dialRaw(t, followerAddr)
	w.sendOnly("LOCK", "a", "60000", "OWNER", "walt", "WAIT", "10000")
	var walt map[any]any
	for end := time.Now().Add(5 * time.Second); walt == nil && time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		walt = lockFields(t, mustDo(leader, "LOCKWAITERS", "a"), "owner")["walt"]
	}
	if walt == nil {
		t.Fatal("the follower's waiter never showed in LOCKWAITERS")
	}
	if since, ok := walt["since"].(int64); !ok || since < waitStart || since > time.Now().UnixMilli() || walt["node"] != nil {
		t.Errorf("the waiter: since %v node %v, want a time since %d and no node", walt["since"], walt["node"], waitStart)
	}
}

// A leader that refuses RAFT ORIGIN (one older than it, here one that finds the ID invalid) still
// serves the follower's clients: their locks name no node (not the leader: their client is not
// on it), and nothing else changes.
func TestForwardingWithoutOrigin(t *testing.T) {
	m := startMember(t, nil)
	leaderAddr, _ := serveAdmin(t, m.Core(), m, nil)
	followerAddr, _ := serveNode(t, followerOf{m.Core(), leaderAddr}, func(c *Config) { c.NodeID = "not an id" })
	r := dialRaw(t, followerAddr)
	if got := r.do("LOCK", "a", "60000", "OWNER", "alice"); len(got) < 2 || got[0] != ':' {
		t.Fatalf("LOCK through the follower = %q", got)
	}
	page, err := client(t, leaderAddr, 3).Do(context.Background(), "LOCKS").Result()
	if err != nil {
		t.Fatal(err)
	}
	if e := lockFields(t, page.([]any)[1], "owner")["alice"]; e == nil || e["node"] != nil || e["since"] == nil {
		t.Errorf("alice's lock %v, want it granted, with a grant time and no node", e)
	}
}
