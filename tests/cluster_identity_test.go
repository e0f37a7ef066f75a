package tests

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// The attacks of issue 13 on the cluster's identity and membership, as regression tests: each
// once broke a cluster through one command any client could send, or an operator's slip.

// startSingle starts a node on dir with its own id and extra flags, on fresh ports, and waits
// until it serves (launch).
func startSingle(t *testing.T, id, dir string, args ...string) *node {
	t.Helper()
	var lastErr error
	for range 3 {
		ports := uniquePorts(t, 2)
		n := &node{id: id, dir: dir, raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])), args: args}
		if lastErr = n.launch(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))); lastErr == nil {
			return n
		}
	}
	t.Fatalf("start %s: %v", id, lastErr)
	return nil
}

// startRefused starts n's process (again) with args in place of its own and waits for it to
// exit, as a node that refuses to start must; it returns the process's log.
func startRefused(t *testing.T, n *node, args ...string) string {
	t.Helper()
	m := &node{id: n.id, dir: n.dir, raftAddr: n.raftAddr, starts: n.starts, args: args}
	if err := m.start(t, n.addr); err != nil {
		t.Fatal(err)
	}
	m.ExpectExit()
	if err := m.WaitExit(20 * time.Second); err != nil {
		m.kill9()
		t.Fatalf("%s started where it should have refused: %v\n%s", n.id, err, m.Log())
	}
	return m.Log()
}

// clusterID returns INFO raft's cluster_id on addr, once it is set.
func clusterID(t *testing.T, addr string) string {
	t.Helper()
	var id string
	testutil.WaitFor(t, settleTimeout, func() error {
		info, err := infoRaft(addr)
		if err != nil {
			return err
		}
		if id = info["cluster_id"]; id == "" {
			return fmt.Errorf("no cluster_id yet in INFO raft on %s", addr)
		}
		return nil
	})
	return id
}

// TestIdentityStartChecks: a node on a fresh dir without --peers or --join says loudly that it
// forms a NEW cluster, with the cluster ID INFO raft and RAFT STATS then report; restarted
// under another --id its dir is refused; restarted with another --peers it says it ignores
// them, and keeps its identity.
func TestIdentityStartChecks(t *testing.T) {
	dir := t.TempDir()
	n := startSingle(t, "n1", dir)
	id := clusterID(t, n.addr)
	m := regexp.MustCompile(`forming a NEW single-node cluster.*cluster_id=(\w+)`).FindStringSubmatch(n.Log())
	if m == nil || m[1] != id {
		t.Errorf("no log line about forming a new cluster with cluster_id=%s (got %v):\n%s", id, m, n.Log())
	}
	stats, err := call(n.addr, "RAFT", "STATS")
	if err != nil || !strings.Contains(fmt.Sprint(stats), "cluster_id "+id) {
		t.Errorf("RAFT STATS: %v, %v; want cluster_id %s", stats, err, id)
	}
	if _, err := callInt(n.addr, "LOCK", "job", "60000", "OWNER", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}

	other := &node{id: "n2", dir: dir, raftAddr: n.raftAddr, proc: n.proc}
	log := startRefused(t, other)
	if !strings.Contains(log, "data dir belongs to node") || !strings.Contains(log, "--id n1") {
		t.Errorf("a start under another --id did not say whose dir it is:\n%s", log)
	}

	n.args = []string{"--peers", "n1=" + n.raftAddr + ",n9=127.0.0.1:1"}
	n = n.restart(t)
	if !strings.Contains(n.Log(), "--peers differs from this node's configuration and is IGNORED") ||
		!strings.Contains(n.Log(), "RAFT ADD") {
		t.Errorf("a changed --peers on an existing dir was not reported:\n%s", n.Log())
	}
	if got := clusterID(t, n.addr); got != id {
		t.Errorf("cluster_id after restart = %s, want %s", got, id)
	}
	if ms, err := members(n.addr); err != nil || len(ms) != 1 {
		t.Errorf("RAFT MEMBERS after a restart with another --peers: %v, %v; want n1 alone", ms, err)
	}
}

// TestIdentityForeignClusterRefused: a node of cluster B started with --join pointing at
// cluster A refuses to start (its dir is B's), and cluster A's leader refuses RAFT ADD of a
// node whose client address answers with B's cluster ID.
func TestIdentityForeignClusterRefused(t *testing.T) {
	a := startSingle(t, "a1", t.TempDir())
	b := startSingle(t, "b1", t.TempDir())
	idA, idB := clusterID(t, a.addr), clusterID(t, b.addr)
	if idA == idB {
		t.Fatalf("two clusters formed apart share the cluster ID %s", idA)
	}
	if v, err := call(a.addr, "RAFT", "ADD", "b1", b.raftAddr, "CLIENT", b.addr); err == nil ||
		!strings.Contains(err.Error(), "belongs to another cluster") || !strings.Contains(err.Error(), idB) {
		t.Errorf("RAFT ADD of cluster B's node on cluster A: %v, %v; want a refusal naming cluster %s", v, err, idB)
	}
	if ms, _ := members(a.addr); len(ms) != 1 {
		t.Errorf("cluster A's members after the refused ADD: %v", ms)
	}
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	log := startRefused(t, b, "--join", a.addr)
	if !strings.Contains(log, "belongs to cluster "+idB) || !strings.Contains(log, "empty its --dir") {
		t.Errorf("cluster B's node joining cluster A did not refuse with what to do:\n%s", log)
	}
	b.args = nil
	b = b.restart(t) // its own cluster, untouched
	if got := clusterID(t, b.addr); got != idB {
		t.Errorf("cluster B's ID after the refused join: %s, want %s", got, idB)
	}
}

// TestAttackAddDeadVoter: RAFT ADD of a dead address on a 1-node cluster once added a voter and
// took the cluster out of quorum for good. Now it is a non-voter, never promoted (it never
// catches up), and the node keeps granting locks.
func TestAttackAddDeadVoter(t *testing.T) {
	n := startNode(t, t.TempDir())
	if _, err := callInt(n.addr, "RAFT", "ADD", "evil", "127.0.0.1:9"); err != nil {
		t.Fatalf("RAFT ADD evil: %v", err)
	}
	if v, err := call(n.addr, "RAFT", "PROMOTE", "evil"); err == nil || !strings.Contains(err.Error(), "not caught up") {
		t.Errorf("RAFT PROMOTE evil: %v, %v; want a refusal (not caught up)", v, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := callInt(n.addr, "LOCK", fmt.Sprintf("after-evil/%d", i), "60000"); err != nil {
			t.Fatalf("LOCK %d after RAFT ADD evil: %v", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitMember(t, n, "evil", "nonvoter")
	if info, err := infoRaft(n.addr); err != nil || info["raft_voters"] != "1" {
		t.Errorf("INFO raft after RAFT ADD evil: voters %q, %v; want 1", info["raft_voters"], err)
	}
}

// TestAttackRemoveBelowQuorum: two RAFT REMOVEs once shrank a 3-node cluster to one. With one
// node down, removing a live voter would leave two voters of which one is reachable: refused.
// Removing the dead one is fine.
func TestAttackRemoveBelowQuorum(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	id := clusterID(t, l.addr)
	for _, n := range c.nodes {
		if got := clusterID(t, n.addr); got != id {
			t.Errorf("%s reports cluster_id %s, the leader %s", n.id, got, id)
		}
	}
	down, live := c.others(l)[0], c.others(l)[1]
	down.kill9()
	testutil.WaitFor(t, settleTimeout, func() error {
		info, err := infoRaft(l.addr)
		if err != nil {
			return err
		}
		if info["raft_reachable_voters"] != "2" {
			return fmt.Errorf("the leader reaches %s voters; waiting for 2", info["raft_reachable_voters"])
		}
		return nil
	})
	if v, err := call(l.addr, "RAFT", "REMOVE", live.id); err == nil || !strings.Contains(err.Error(), "quorum") {
		t.Fatalf("RAFT REMOVE %s with %s down: %v, %v; want a refusal (quorum)", live.id, down.id, v, err)
	}
	waitWritable(t, []*node{l, live}, "after-refused-remove")
	if v, err := call(l.addr, "RAFT", "REMOVE", down.id); err != nil || v != "OK" {
		t.Fatalf("RAFT REMOVE of the dead %s: %v, %v", down.id, v, err)
	}
	waitWritable(t, []*node{l, live}, "after-remove-dead")
}

// fakePeer is a RESP server that claims to be the ready leader of a cluster without the
// victim, and counts the connections it gets and the LOCKs it is sent.
type fakePeer struct {
	ln    net.Listener
	conns atomic.Int64
	locks atomic.Int64
}

func startFakePeer(t *testing.T, leaderID string, stats ...string) *fakePeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			go f.serve(nc, leaderID, stats)
		}
	}()
	return f
}

func (f *fakePeer) addr() string { return f.ln.Addr().String() }

func (f *fakePeer) serve(nc net.Conn, leaderID string, stats []string) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	for {
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		args, err := readCommand(br)
		if err != nil {
			return
		}
		if len(args) > 0 && strings.EqualFold(args[0], "LOCK") {
			f.locks.Add(1)
		}
		var out []byte
		switch strings.ToUpper(strings.Join(args, " ")) {
		case "RAFT STATS":
			// The ready leader, plus any fields the test gives (stats: name, value, ...).
			fields := append([]string{"raft_state", "Leader", "raft_ready", "true"}, stats...)
			out = fmt.Appendf(nil, "*%d\r\n", len(fields))
			for _, s := range fields {
				out = fmt.Appendf(out, "$%d\r\n%s\r\n", len(s), s)
			}
		case "RAFT MEMBERS":
			out = fmt.Appendf(nil, "*1\r\n*2\r\n$2\r\nid\r\n$%d\r\n%s\r\n", len(leaderID), leaderID)
		default:
			out = []byte(":66\r\n") // a forged token for anything else
		}
		if _, err := nc.Write(out); err != nil {
			return
		}
	}
}

// readCommand reads one multibulk command.
func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return nil, err
	}
	var args []string
	for range n {
		if _, err := br.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		a, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args = append(args, strings.TrimRight(a, "\r\n"))
	}
	return args, nil
}

// TestAttackFakeAnnounce: a RAFT ANNOUNCE from a non-member, or naming the leader, or a member
// under another raft address, once re-pointed follower forwarding at a fake server. Now each is
// refused and every LOCK through a follower is granted by the real leader.
func TestAttackFakeAnnounce(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f, other := c.others(l)[0], c.others(l)[1]
	fake := startFakePeer(t, "nobody")
	for _, args := range [][]string{
		{"evil", fake.addr(), "127.0.0.1:1"},
		{l.id, fake.addr(), l.raftAddr},
		{other.id, fake.addr(), "127.0.0.1:1"},
	} {
		for _, via := range []*node{l, f} {
			if v, err := call(via.addr, append([]string{"RAFT", "ANNOUNCE"}, args...)...); err == nil {
				t.Errorf("RAFT ANNOUNCE %v through %s: %v; want a refusal", args, via.id, v)
			}
		}
	}
	if v, err := call(f.addr, "RAFT", "ANNOUNCE", "evil", fake.addr()); err == nil {
		t.Errorf("RAFT ANNOUNCE in the old two-argument form: %v; want a refusal", v)
	}
	ms, _ := members(l.addr)
	for _, m := range ms {
		if m["client_addr"] == fake.addr() {
			t.Errorf("the fake address got into the member table: %v", ms)
		}
	}
	for i := range 20 {
		key := fmt.Sprintf("via-follower/%d", i)
		tok, err := callInt(f.addr, "LOCK", key, "60000", "OWNER", "real")
		if err != nil {
			t.Fatalf("LOCK %s through %s: %v", key, f.id, err)
		}
		v, err := call(l.addr, "VALIDATE", key, strconv.FormatInt(tok, 10))
		if err != nil || v != int64(1) {
			t.Errorf("VALIDATE %s %d on the leader: %v, %v; the follower's grant did not come from it", key, tok, v, err)
		}
	}
	if n := fake.conns.Load(); n != 0 {
		t.Errorf("the fake server got %d connections", n)
	}
}

// TestAttackFakeRemoved: a fake "leader" saying "you were removed" once made a node exit. A
// member's client address is pointed at a fake server (an announcement that names a member and
// its own raft address passes the leader's call-back when the fake answers RAFT STATS with that
// member's ID and the cluster's ID, until peers authenticate with TLS or ACLs), the real
// leader and that member go down, and the leaderless victim asks the fake, which says the
// victim is no member. It reports it and keeps running; with the others back, it serves again.
func TestAttackFakeRemoved(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	victim, other := c.others(l)[0], c.others(l)[1]
	fake := startFakePeer(t, other.id, "raft_id", other.id, "cluster_id", clusterID(t, l.addr))
	if v, err := call(l.addr, "RAFT", "ANNOUNCE", other.id, fake.addr(), other.raftAddr); err != nil || v != "OK" {
		t.Fatalf("RAFT ANNOUNCE %s %s: %v, %v", other.id, fake.addr(), v, err)
	}
	testutil.WaitFor(t, settleTimeout, func() error {
		ms, err := members(victim.addr)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if m["id"] == other.id && m["client_addr"] == fake.addr() {
				return nil
			}
		}
		return fmt.Errorf("%s's member table: %v", victim.id, ms)
	})
	l.kill9()
	other.kill9()
	testutil.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(victim.Log(), "does not list this node") {
			return fmt.Errorf("%s has not asked the fake leader yet", victim.id)
		}
		return nil
	})
	if fake.conns.Load() == 0 {
		t.Fatalf("the victim never asked the fake")
	}
	time.Sleep(time.Second) // a node that obeyed would be gone by now
	if !victim.Running() {
		t.Fatalf("%s exited on a fake leader's word:\n%s", victim.id, victim.Log())
	}
	c.restart(l)
	c.restart(other)
	waitWritable(t, []*node{victim}, "after-fake-removal")
}
