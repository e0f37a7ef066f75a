package tests

import (
	"errors"
	"strconv"
	"strings"
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
	survivor := c.killLeaderThenSet(t, old, "job", "me")
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

// TestClusterFunctionsThroughSnapshot: a follower that catches up by installing the leader's
// snapshot, the library's entry long compacted away, has the library: it serves FCALL_RO
// itself (READONLY) with its own table.
func TestClusterFunctionsThroughSnapshot(t *testing.T) {
	c := newCluster(t, 3, snapshotFlags...)
	l := c.leader()
	const lib = "#!lua name=snap\nredis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}}"
	if v, err := call(l.addr, "FUNCTION", "LOAD", lib); err != nil || v != "snap" {
		t.Fatalf("FUNCTION LOAD = %v, %v", v, err)
	}
	f := c.others(l)[0]
	info, err := infoRaft(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	behind, _ := strconv.ParseUint(info["raft_last_index"], 10, 64)
	f.kill9()
	compactLeaderLogPast(t, l, behind)
	f = c.restart(f)
	c.digests() // converged
	if !strings.Contains(f.Log(), installedSnapshot) {
		t.Errorf("the restarted follower %s caught up without installing a snapshot", f.id)
	}
	conn, err := dialRESP(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got, err := conn.do("READONLY"); err != nil || string(got) != "+OK\r\n" {
		t.Fatalf("READONLY = %q, %v", got, err)
	}
	if got, err := conn.do("FCALL_RO", "peek", "1", "snap/filler"); err != nil || string(got) != "$2\r\n63\r\n" {
		t.Errorf("FCALL_RO on the follower restored from a snapshot = %q, %v; want 63", got, err)
	}
}
