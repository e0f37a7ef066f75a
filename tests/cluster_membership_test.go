package tests

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// memberTimeout bounds membership changes: a join catches up and is promoted, a removed node
// learns of its removal and exits (a heartbeat timeout, then the node's shutdown).
const memberTimeout = 10 * time.Second

// TestClusterMembership changes the membership under load: a 4th node joins through a
// follower's address and becomes a voter; a follower is removed with RAFT REMOVE FORCE and its
// process exits; the remaining nodes converge with nothing acknowledged lost; then RAFT
// TRANSFER hands leadership to a chosen node.
func TestClusterMembership(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	load := startLoad(t, "mem", 3, 2, addrs(c.nodes))
	load.waitProgress(100, 20*time.Second)

	via := c.others(l)[0]
	n4 := c.join(via)
	waitMember(t, l, n4.id, "voter")
	t.Logf("%s joined through the follower %s and is a voter", n4.id, via.id)
	load.waitProgress(100, 20*time.Second)

	l = c.leader()
	victim := c.others(l)[0]
	if victim == n4 {
		victim = c.others(l)[1]
	}
	// The request goes through the new node: admin commands are forwarded too. The victim is
	// live: that takes FORCE.
	victim.ExpectExit()
	if v, err := call(n4.addr, "RAFT", "REMOVE", victim.id, "FORCE"); err != nil || v != "OK" {
		t.Fatalf("RAFT REMOVE %s FORCE through %s: %v, %v", victim.id, n4.id, v, err)
	}
	testutil.WaitFor(t, memberTimeout, func() error {
		ms, err := members(l.addr)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(ms, func(m map[string]string) bool { return m["id"] == victim.id }) {
			return fmt.Errorf("%s still a member: %v", victim.id, ms)
		}
		return nil
	})
	if err := victim.WaitExit(memberTimeout); err != nil {
		t.Errorf("the removed node %s did not exit: %v", victim.id, err)
		victim.kill9()
	} else {
		t.Logf("the removed node %s exited: %v", victim.id, victim.ExitStatus())
	}
	load.waitProgress(100, 20*time.Second)
	r := load.report()
	t.Logf("load: %d acknowledged, %d errors, %d unknown outcomes", r.acked, r.failed, r.unknowns)
	c.checkLoad(r)
	c.digests()

	// Leadership moves to the node asked for, asked through another node.
	l = c.leader()
	target := n4
	if target == l {
		target = c.others(l)[0]
	}
	through := c.others(target)[0]
	if v, err := call(through.addr, "RAFT", "TRANSFER", target.id); err != nil || v != "OK" {
		t.Fatalf("RAFT TRANSFER %s through %s: %v, %v", target.id, through.id, v, err)
	}
	if nl := c.leader(); nl != target {
		t.Fatalf("after RAFT TRANSFER %s: %s leads", target.id, nl.id)
	}
	t.Logf("leadership moved from %s to %s", l.id, target.id)
	waitWritable(t, []*node{through}, "mem-probe")
	c.digests()
}

// waitMember waits until RAFT MEMBERS on n lists id with the given suffrage.
func waitMember(t *testing.T, n *node, id, suffrage string) {
	t.Helper()
	testutil.WaitFor(t, memberTimeout, func() error {
		ms, err := members(n.addr)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m["id"] == id && m["suffrage"] == suffrage {
				return nil
			}
		}
		return fmt.Errorf("RAFT MEMBERS on %s: %v; waiting for %s as a %s", n.id, ms, id, suffrage)
	})
}

// snapshotFlags make raft snapshot and compact its log often.
var snapshotFlags = []string{"--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "1s"}

// installedSnapshot is what hashicorp/raft logs when a follower installed the leader's snapshot.
const installedSnapshot = "Installed remote snapshot"

// TestClusterSnapshotInstall kills a follower, runs about 500 grants and releases and 64 more
// writes so the leader's log is compacted past the follower's last entry, and restarts it: it can only catch
// up by installing the leader's snapshot, and ends with the same table. A node that joins after
// the compaction catches up the same way.
func TestClusterSnapshotInstall(t *testing.T) {
	c := newCluster(t, 3, snapshotFlags...)
	l := c.leader()
	f := c.others(l)[0]
	info, err := infoRaft(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	behind, _ := strconv.ParseUint(info["raft_last_index"], 10, 64)
	f.kill9()

	ctx := testContext(t, 60*time.Second)
	rdb := newClient(t, l.addr, 2)
	const keys = 250
	tokens := make([]int64, keys)
	for batch := 0; batch < keys; batch += 50 { // pipelined, 50 at a time
		pipe := rdb.Pipeline()
		var cmds []*redis.Cmd
		for i := batch; i < batch+50; i++ {
			cmds = append(cmds, pipe.Do(ctx, "LOCK", fmt.Sprintf("snap/%d", i), durLockTTL, "OWNER", "o"))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("pipelined LOCKs: %v", err)
		}
		for i, cmd := range cmds {
			if tokens[batch+i], err = cmd.Int64(); err != nil {
				t.Fatalf("LOCK snap/%d: %v", batch+i, err)
			}
		}
	}
	pipe := rdb.Pipeline()
	released := 0
	for i, tok := range tokens {
		if i%5 != 0 { // keep every fifth lock
			pipe.Do(ctx, "UNLOCK", fmt.Sprintf("snap/%d", i), tok)
			released++
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipelined UNLOCKs: %v", err)
	}
	compactLeaderLogPast(t, l, behind)
	t.Logf("%d grants and %d releases; the leader's log no longer holds entry %d, the follower's next", keys, released, behind+1)

	f = c.restart(f)
	d := c.digests()
	if !strings.Contains(f.Log(), installedSnapshot) {
		t.Errorf("the restarted follower %s caught up without installing a snapshot (no %q in its log)", f.id, installedSnapshot)
	}
	if !strings.Contains(f.Log(), "restored snapshot") {
		t.Errorf("the restarted follower %s did not restore a snapshot (no %q in its log)", f.id, "restored snapshot")
	}
	t.Logf("the restarted follower caught up by snapshot; converged at %d", d.applied)

	n4 := c.join(c.others(l)[0])
	waitMember(t, l, n4.id, "voter")
	c.digests()
	if !strings.Contains(n4.Log(), installedSnapshot) {
		t.Errorf("the new node %s caught up without installing a snapshot (no %q in its log)", n4.id, installedSnapshot)
	}
	// Every node answers from its own table what the leader does.
	for _, n := range c.live() {
		ro := newClient(t, n.addr, 3).Conn()
		if err := ro.ReadOnly(ctx).Err(); err != nil {
			t.Fatalf("READONLY on %s: %v", n.id, err)
		}
		for _, i := range []int{0, 5, 245} {
			st, held, err := lockInfo(ctx, ro, fmt.Sprintf("snap/%d", i))
			if err != nil || !held || st.token != tokens[i] {
				t.Errorf("LOCKINFO snap/%d on %s (READONLY): %+v held=%v, %v; want token %d", i, n.id, st, held, err, tokens[i])
			}
		}
		ro.Close()
	}
}

// TestClusterRemovedWhileDown removes a follower while it is down, then restarts it. The leader
// no longer replicates to it, so it never applies its own removal. It asks the leader, and says
// loudly that it was probably removed and what to do, but keeps running: only a committed
// configuration removes a node (a "leader" answering over RESP may be anyone). The others go
// on serving.
func TestClusterRemovedWhileDown(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	victim := c.others(l)[0]
	// The victim will ask the members it remembers (their client addresses, kept in its stable
	// store): let it learn them first, as any node that ran for a few seconds has.
	testutil.WaitFor(t, memberTimeout, func() error {
		info, err := call(victim.addr, "INFO", "raft")
		if err != nil {
			return err
		}
		if !strings.Contains(fmt.Sprint(info), "raft_member_hints:3\r\n") {
			return fmt.Errorf("%s remembers too few members: %v", victim.id, info)
		}
		return nil
	})
	victim.kill9()
	// Down, it is removed without FORCE once the leader's heartbeats to it fail.
	testutil.WaitFor(t, settleTimeout, func() error {
		info, err := infoRaft(l.addr)
		if err == nil && info["raft_reachable_voters"] != "2" {
			err = fmt.Errorf("the leader reaches %s voters; waiting for 2", info["raft_reachable_voters"])
		}
		return err
	})
	if v, err := call(l.addr, "RAFT", "REMOVE", victim.id); err != nil || v != "OK" {
		t.Fatalf("RAFT REMOVE %s while it is down: %v, %v", victim.id, v, err)
	}
	back := &node{dir: victim.dir, raftAddr: victim.raftAddr, id: victim.id, starts: victim.starts, args: victim.args}
	if err := back.start(t, victim.addr); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, func() error {
		if !back.Running() {
			return fmt.Errorf("the node removed while down exited: %v", back.ExitStatus())
		}
		if !strings.Contains(back.Log(), "probably removed while away") {
			return fmt.Errorf("the node removed while down has not said so yet")
		}
		return nil
	})
	if !back.Running() {
		t.Errorf("the node removed while down exited on the leader's word over RESP:\n%s", back.Log())
	}
	waitWritable(t, c.others(victim), "removed-while-down")
}
