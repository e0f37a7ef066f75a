package tests

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRecoverLostQuorum: a 3-node cluster with committed locks loses two nodes for good (kill
// -9, never restarted). `raftlock recover` on the third's dir, with only itself as peer, lets it
// start alone: it serves, every lock it had committed is there with its owner and token, its
// cluster ID is the same, and new grants get larger tokens.
func TestRecoverLostQuorum(t *testing.T) {
	c := newCluster(t, 3)
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
	tok, err := callInt(n.addr, "LOCK", "recover/new", "60000")
	if err != nil || tok <= top {
		t.Errorf("LOCK after recovery: token %d, %v; want one above %d", tok, err, top)
	}
}
