package tests

import "testing"

// TestClusterScriptsSurviveFailover: a script loaded through one node is found by EVALSHA
// through every node, and still after the leader is killed (the script cache is replicated),
// and a compare-and-delete script through a follower releases only its owner's lock.
func TestClusterScriptsSurviveFailover(t *testing.T) {
	c := newCluster(t, 3)
	const release = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	f := c.followers()[0]
	v, err := call(f.addr, "SCRIPT", "LOAD", release)
	if err != nil {
		t.Fatalf("SCRIPT LOAD through a follower: %v", err)
	}
	sha, _ := v.(string)
	for _, n := range c.nodes {
		if _, err := call(n.addr, "SET", "job", "me", "NX", "PX", "30000"); err != nil {
			t.Fatalf("SET on %s: %v", n.id, err)
		}
		if got, err := callInt(n.addr, "EVALSHA", sha, "1", "job", "someone-else"); err != nil || got != 0 {
			t.Errorf("EVALSHA wrong owner on %s = %d, %v; want 0", n.id, got, err)
		}
		if got, err := callInt(n.addr, "EVALSHA", sha, "1", "job", "me"); err != nil || got != 1 {
			t.Errorf("EVALSHA on %s = %d, %v; want 1", n.id, got, err)
		}
	}
	old := c.leader()
	survivor := c.killLeaderThenSet(t, old, "job", "me")
	if got, err := callInt(survivor.addr, "EVALSHA", sha, "1", "job", "me"); err != nil || got != 1 {
		t.Errorf("EVALSHA after the failover = %d, %v; want 1 (the script cache is replicated)", got, err)
	}
}
