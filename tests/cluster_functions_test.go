package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestClusterFunctionsSurviveFailover: a library loaded through one node is callable through
// every node, still after the leader is killed (libraries are replicated through the log, and
// each node learns what they register by running them), and on the killed node once it is
// back.
func TestClusterFunctionsSurviveFailover(t *testing.T) {
	c := newCluster(t, 3)
	const lib = "#!lua name=locks\n" +
		"redis.register_function('release', function(keys, args) if redis.call('get', keys[1]) == args[1] then return redis.call('del', keys[1]) end return 0 end)\n" +
		"redis.register_function{function_name='holder', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}\n"
	f := c.followers()[0]
	if v, err := call(f.addr, "FUNCTION", "LOAD", lib); err != nil || v != "locks" {
		t.Fatalf("FUNCTION LOAD through a follower = %v, %v", v, err)
	}
	for _, n := range c.nodes {
		if _, err := call(n.addr, "SET", "job", "me", "NX", "PX", "30000"); err != nil {
			t.Fatalf("SET on %s: %v", n.id, err)
		}
		if got, err := call(n.addr, "FCALL_RO", "holder", "1", "job"); err != nil || got != "me" {
			t.Errorf("FCALL_RO holder on %s = %v, %v; want me", n.id, got, err)
		}
		if got, err := callInt(n.addr, "FCALL", "release", "1", "job", "someone-else"); err != nil || got != 0 {
			t.Errorf("FCALL release, wrong owner, on %s = %d, %v; want 0", n.id, got, err)
		}
		if got, err := callInt(n.addr, "FCALL", "release", "1", "job", "me"); err != nil || got != 1 {
			t.Errorf("FCALL release on %s = %d, %v; want 1", n.id, got, err)
		}
	}
	old := c.leader()
	old.kill9()
	var survivor *node
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, n := range c.live() {
			if _, err := call(n.addr, "SET", "job", "me", "NX", "PX", "30000"); err != nil {
				return err
			}
			survivor = n
			return nil
		}
		return errors.New("no live node")
	})
	if got, err := callInt(survivor.addr, "FCALL", "release", "1", "job", "me"); err != nil || got != 1 {
		t.Errorf("FCALL after the failover = %d, %v; want 1 (libraries are replicated)", got, err)
	}
	back := c.restart(old)
	testutil.WaitFor(t, 10*time.Second, func() error {
		if _, err := call(back.addr, "SET", "job2", "me", "NX", "PX", "30000"); err != nil {
			return err
		}
		got, err := call(back.addr, "FCALL_RO", "holder", "1", "job2")
		if err != nil || got != "me" {
			return errors.New("FCALL_RO holder on the restarted node: not yet me")
		}
		return nil
	})
	if got, err := call(back.addr, "FUNCTION", "LIST", "LIBRARYNAME", "locks"); err != nil || len(got.([]any)) != 1 {
		t.Errorf("FUNCTION LIST on the restarted node = %v, %v", got, err)
	}
}
