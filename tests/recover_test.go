package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// TestRecoverLostQuorum: a 3-node cluster with committed locks loses two nodes for good (kill
// -9, never restarted). `raftlock recover` on the third's dir, with only itself as peer, lets it
// start alone: it serves, every lock it had committed is there with its owner and token, its
// cluster ID is the same, and new grants get larger tokens.
//
// With two raft groups, and a slot moved from one to the other before the loss, every group is
// recovered (the move replayed as the node applied it) and the locks of both, moved ones
// included, are there.
func TestRecoverLostQuorum(t *testing.T) {
	t.Run("one group", func(t *testing.T) { recoverLostQuorum(t, 1) })
	t.Run("two groups", func(t *testing.T) { recoverLostQuorum(t, 2) })
}

func recoverLostQuorum(t *testing.T, groups int) {
	c := newCluster(t, 3, "--groups", strconv.Itoa(groups))
	l := c.leader()
	cluster := clusterID(t, l.addr)
	survivor := c.others(l)[0]
	const keys = 30
	tokens := map[string]int64{}
	var top int64
	for i := range keys {
		key := fmt.Sprintf("recover/%d", i)
		tok, err := callInt(l.addr, "LOCK", key, "600000", "OWNER", fmt.Sprintf("owner-%d", i))
		if err != nil {
			t.Fatalf("LOCK %s: %v", key, err)
		}
		tokens[key], top = tok, max(top, tok)
	}
	moved := fsm.KeySlot([]byte("recover/0"))
	target := 1 - fsm.GroupOfSlot(moved, 2)
	groupOf := func(key string) int { // the key's group once recover/0's slot moved
		if slot := fsm.KeySlot([]byte(key)); slot != moved {
			return fsm.GroupOfSlot(slot, 2)
		}
		return target
	}
	if groups > 1 {
		// recover/0's slot moves to the other group.
		slot := moved
		if _, err := callWithin(time.Minute, l.addr, "RAFT", "MOVESLOTS", strconv.Itoa(slot), strconv.Itoa(slot), strconv.Itoa(target)); err != nil {
			t.Fatalf("RAFT MOVESLOTS %d: %v", slot, err)
		}
		waitServedBy(t, c.nodes, slot, target, 10*time.Second)
		sameGroupTables(t, c, groups)
	}
	// Every lock is on the survivor (committed on a quorum, applied there) before the loss.
	c.digests()
	for _, n := range c.others(survivor) {
		n.kill9()
	}
	survivor.ExpectExit()
	if err := survivor.stop(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, raftlockBin, "recover", "--dir", survivor.dir,
		"--peers", survivor.id+"="+survivor.raftAddr).CombinedOutput()
	if err != nil {
		t.Fatalf("raftlock recover: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "recovered") {
		t.Errorf("raftlock recover said nothing of what it did:\n%s", out)
	}
	t.Logf("raftlock recover:\n%s", out)

	n := survivor.restart(t) // with its old --peers: reported and ignored
	if !strings.Contains(n.Log(), "--peers differs") {
		t.Errorf("the recovered node did not report its old --peers as ignored")
	}
	if got := clusterID(t, n.addr); got != cluster {
		t.Errorf("cluster_id after recovery = %s, want %s", got, cluster)
	}
	if ms, err := members(n.addr); err != nil || len(ms) != 1 || ms[0]["id"] != survivor.id || ms[0]["suffrage"] != "voter" {
		t.Errorf("RAFT MEMBERS after recovery: %v, %v; want %s alone", ms, err, survivor.id)
	}
	rdb := newClient(t, n.addr, 2)
	for i := range keys {
		key := fmt.Sprintf("recover/%d", i)
		st, held, err := lockInfo(ctx, rdb, key)
		if err != nil || !held || st.token != tokens[key] || st.owner != fmt.Sprintf("owner-%d", i) {
			t.Errorf("LOCKINFO %s after recovery: %+v held=%v, %v; want owner-%d, token %d", key, st, held, err, i, tokens[key])
		}
	}
	// Each key once, in the group that serves it: no group kept a moved key or lost one.
	if n, err := callInt(n.addr, "DBSIZE"); err != nil || n != keys {
		t.Errorf("DBSIZE after recovery: %d, %v; want %d", n, err, keys)
	}
	if _, err := call(n.addr, "RAFT", "BACKUP"); err != nil {
		t.Errorf("RAFT BACKUP after recovery (it checks that one group serves each slot): %v", err)
	}
	if groups > 1 {
		// Tokens are per group: the new key's must be above its own group's.
		top = 0
		for key, tok := range tokens {
			if groupOf(key) == groupOf("recover/new") {
				top = max(top, tok)
			}
		}
	}
	tok, err := callInt(n.addr, "LOCK", "recover/new", "60000")
	if err != nil || tok <= top {
		t.Errorf("LOCK after recovery: token %d, %v; want one above %d", tok, err, top)
	}
}
