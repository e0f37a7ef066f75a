package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestAnnounceImpostorRefused: RAFT ANNOUNCE of a follower's ID and raft address with a fake
// client address, then RAFT TRANSFER to that follower, must not send clients' LOCKs to the fake
// (the fakes here forge token 66): the leader calls the announced address back, and a server that does not answer as that member of this cluster is refused, on
// the leader and through a follower alike (an announcement is not forwarded), the member table
// keeps the real address, and after the transfer every LOCK is granted by the real leader; the
// fakes see none.
func TestAnnounceImpostorRefused(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f, other := c.others(l)[0], c.others(l)[1]
	c.waitAnnounced(3)
	// Each answers RAFT STATS as the ready leader, and as the test says beyond that.
	fakes := []*fakePeer{
		startFakePeer(t, "nobody"),                   // names no member
		startFakePeer(t, "nobody", "raft_id", "n99"), // another member
		startFakePeer(t, "nobody", "raft_id", f.id),  // the member, of no cluster
		startFakePeer(t, "nobody", "raft_id", f.id, "cluster_id", "0123456789abcdef0123456789abcdef"), // of another
	}
	for i, fake := range fakes {
		for _, via := range []*node{l, other} {
			v, err := call(via.addr, "RAFT", "ANNOUNCE", f.id, fake.addr(), f.raftAddr)
			if err == nil {
				t.Errorf("fake %d: RAFT ANNOUNCE %s %s %s through %s = %v; want a refusal", i, f.id, fake.addr(), f.raftAddr, via.id, v)
			}
		}
	}
	// Nothing announced, an unreachable address is refused too.
	if v, err := call(l.addr, "RAFT", "ANNOUNCE", f.id, "127.0.0.1:1", f.raftAddr); err == nil {
		t.Errorf("RAFT ANNOUNCE of an address where nothing listens = %v; want a refusal", v)
	}
	ms, err := members(l.addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m["id"] == f.id && m["client_addr"] != f.addr {
			t.Fatalf("the member table holds %s for %s, not its own %s: %v", m["client_addr"], f.id, f.addr, ms)
		}
	}
	// The member itself re-announcing its own address is still accepted (the leader calls
	// it back and it answers as itself).
	if v, err := call(l.addr, "RAFT", "ANNOUNCE", f.id, f.addr, f.raftAddr); err != nil || v != "OK" {
		t.Errorf("RAFT ANNOUNCE of %s's own address: %v, %v; want OK", f.id, v, err)
	}

	if v, err := call(other.addr, "RAFT", "TRANSFER", f.id); err != nil || v != "OK" {
		t.Fatalf("RAFT TRANSFER %s: %v, %v", f.id, v, err)
	}
	if nl := c.leader(); nl != f {
		t.Fatalf("after RAFT TRANSFER %s: %s leads", f.id, nl.id)
	}
	for i := range 10 {
		for _, via := range []*node{l, other, f} {
			key := fmt.Sprintf("after-announce/%s/%d", via.id, i)
			tok, err := callInt(via.addr, "LOCK", key, "60000", "OWNER", "real")
			if err != nil {
				t.Fatalf("LOCK %s through %s: %v", key, via.id, err)
			}
			if tok == 66 {
				t.Fatalf("LOCK %s through %s was granted by a fake: token %d", key, via.id, tok)
			}
			if v, err := call(f.addr, "VALIDATE", key, strconv.FormatInt(tok, 10)); err != nil || v != int64(1) {
				t.Errorf("VALIDATE %s %d on the leader %s: %v, %v", key, tok, f.id, v, err)
			}
		}
	}
	for i, fake := range fakes {
		if n := fake.locks.Load(); n != 0 {
			t.Errorf("fake %d was sent %d LOCKs", i, n)
		}
	}
}

// TestRemoveLiveVoterNeedsForce: two RAFT REMOVEs of live voters must not shrink a healthy
// 3-node cluster to one: removing a voter the leader reaches is refused without FORCE (on the
// leader or through a follower), and done with it; the second live voter is refused the same
// way. (A down voter is removed without FORCE: TestClusterRemovedWhileDown,
// TestAttackRemoveBelowQuorum.)
func TestRemoveLiveVoterNeedsForce(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	victim, second := c.others(l)[0], c.others(l)[1]
	for _, via := range []*node{l, second} {
		v, err := call(via.addr, "RAFT", "REMOVE", victim.id)
		if err == nil || !strings.Contains(err.Error(), "FORCE") {
			t.Fatalf("RAFT REMOVE %s (live) through %s: %v, %v; want a refusal naming FORCE", victim.id, via.id, v, err)
		}
	}
	if v, err := call(l.addr, "RAFT", "REMOVE", l.id); err == nil || !strings.Contains(err.Error(), "FORCE") {
		t.Fatalf("RAFT REMOVE of the leader itself: %v, %v; want a refusal naming FORCE", v, err)
	}
	if v, err := call(l.addr, "RAFT", "REMOVE", victim.id, "NOW"); err == nil || !strings.Contains(err.Error(), "syntax") {
		t.Fatalf("RAFT REMOVE %s NOW: %v, %v; want a syntax error", victim.id, v, err)
	}
	waitMember(t, l, victim.id, "voter")
	if ms, err := members(l.addr); err != nil || len(ms) != 3 {
		t.Fatalf("members after the refusals: %v, %v; want 3", ms, err)
	}

	victim.ExpectExit()
	if v, err := call(second.addr, "RAFT", "REMOVE", victim.id, "force"); err != nil || v != "OK" {
		t.Fatalf("RAFT REMOVE %s FORCE: %v, %v", victim.id, v, err)
	}
	if err := victim.WaitExit(memberTimeout); err != nil {
		t.Errorf("the removed %s did not exit: %v", victim.id, err)
		victim.kill9()
	}
	if v, err := call(l.addr, "RAFT", "REMOVE", second.id); err == nil || !strings.Contains(err.Error(), "FORCE") {
		t.Fatalf("the second RAFT REMOVE, of %s (live): %v, %v; want a refusal naming FORCE", second.id, v, err)
	}
	testutil.WaitFor(t, memberTimeout, func() error {
		ms, err := members(l.addr)
		if err == nil && len(ms) != 2 {
			err = fmt.Errorf("members %v; want 2", ms)
		}
		return err
	})
	waitWritable(t, []*node{l, second}, "after-forced-remove")
}
