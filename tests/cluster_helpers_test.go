package tests

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// cluster is a raftlock cluster of real processes on 127.0.0.1.
type cluster struct {
	t     *testing.T
	nodes []*node  // every node ever started, in the order started; restart replaces an entry
	extra []string // flags every node gets (snapshot tuning, --redirect)
	// clientTLS, when set, is how the tests' helpers reach the nodes' client ports (their
	// flags in extra make them speak TLS).
	clientTLS *tls.Config
	// nodeArgs, when set, gives node i (from 0) flags of its own (its --metrics-addr).
	nodeArgs func(i int) []string
	bin      string // the binary the nodes start with (node.bin); empty: raftlockBin
}

// Cluster timing bounds. A dead leader is replaced in about a second (500 ms election timeout);
// the bounds leave room for the race detector on two cores.
const (
	clusterReadyTimeout = 30 * time.Second
	settleTimeout       = 15 * time.Second // a leader all live nodes agree on
	convergeTimeout     = 20 * time.Second // equal digests
)

// newCluster starts size nodes n1..nsize bootstrapped together with --peers, each with the
// extra flags, and returns once every node serves requests (through the leader) and every
// member's client address is in the member table.
func newCluster(t *testing.T, size int, extra ...string) *cluster {
	t.Helper()
	return newClusterTLS(t, size, nil, extra...)
}

// newClusterTLS is newCluster for nodes whose client ports speak TLS (per extra's flags): the
// tests reach them with clientTLS.
func newClusterTLS(t *testing.T, size int, clientTLS *tls.Config, extra ...string) *cluster {
	t.Helper()
	return newClusterWith(t, size, &cluster{clientTLS: clientTLS, extra: extra})
}

// newClusterOf is newCluster whose nodes run the binary bin (an older release, say).
func newClusterOf(t *testing.T, bin string, size int, extra ...string) *cluster {
	t.Helper()
	return newClusterWith(t, size, &cluster{bin: bin, extra: extra})
}

// newClusterWith is newCluster with the flags, TLS and binary of proto (its nodes are started
// anew).
func newClusterWith(t *testing.T, size int, proto *cluster) *cluster {
	t.Helper()
	var lastErr error
	for range 3 { // a port picked free may be taken before the node binds it
		c := &cluster{t: t, extra: proto.extra, clientTLS: proto.clientTLS, nodeArgs: proto.nodeArgs, bin: proto.bin}
		if lastErr = c.start(size); lastErr == nil {
			c.waitAnnounced(size)
			c.waitSettled()
			return c
		}
		for _, n := range c.nodes {
			if n.proc != nil && n.Running() {
				n.kill9()
			}
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("start a %d-node cluster: %v", size, lastErr)
	return nil
}

func (c *cluster) start(size int) error {
	ports := uniquePorts(c.t, 2*size)
	var peers []string
	for i := range size {
		n := &node{
			id:       fmt.Sprintf("n%d", i+1),
			bin:      c.bin,
			dir:      c.t.TempDir(),
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[size+i])),
		}
		peers = append(peers, n.id+"="+n.raftAddr)
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		n.args = append([]string{"--peers", strings.Join(peers, ",")}, c.extra...)
		if c.nodeArgs != nil {
			n.args = append(n.args, c.nodeArgs(i)...)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))
		if c.clientTLS != nil {
			testutil.UseTLS(c.t, addr, c.clientTLS)
		}
		if err := n.start(c.t, addr); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := n.waitReady(clusterReadyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// uniquePorts returns n distinct ports that were free a moment ago.
func uniquePorts(t testing.TB, n int) []int {
	var ports []int
	for len(ports) < n {
		if p := freePort(t); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// waitAnnounced waits until the member table holds a client address for want members: the
// announce loop records them about a second after start.
func (c *cluster) waitAnnounced(want int) {
	c.t.Helper()
	testutil.WaitFor(c.t, settleTimeout, func() error {
		ms, err := members(c.leader().addr)
		if err != nil {
			return err
		}
		known := 0
		for _, m := range ms {
			if m["client_addr"] != "" {
				known++
			}
		}
		if known != want {
			return fmt.Errorf("%d of %d members announced a client address: %v", known, want, ms)
		}
		return nil
	})
}

// waitSettled waits for what a new cluster's first leader writes once its members have
// announced themselves: the switch to the current log format, the cluster ID and the member
// addresses, applied on every node. Tests then start from a quiet cluster (a forged TimeoutNow
// to a follower still catching up on those entries loses its election).
func (c *cluster) waitSettled() {
	c.t.Helper()
	if c.bin != "" {
		return // an older release's cluster: it has no log format to switch to
	}
	testutil.WaitFor(c.t, settleTimeout, func() error {
		applied := map[string]bool{}
		for _, n := range c.nodes {
			v, err := call(n.addr, "INFO", "raft")
			if err != nil {
				return err
			}
			info := fmt.Sprint(v)
			if !strings.Contains(info, fmt.Sprintf("raft_log_format:%d\r\n", fsm.FormatCurrent)) || strings.Contains(info, "cluster_id:\r\n") {
				return fmt.Errorf("%s has not switched to log format %d or learnt the cluster ID yet", n.id, fsm.FormatCurrent)
			}
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "raft_applied_index:"); ok {
					applied[v] = true
				}
			}
		}
		if len(applied) != 1 {
			return fmt.Errorf("the nodes have applied different indexes: %v", applied)
		}
		return nil
	})
}

// live returns the nodes running and not paused.
func (c *cluster) live() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.Running() && !n.Paused() {
			out = append(out, n)
		}
	}
	return out
}

// others returns the live nodes other than n.
func (c *cluster) others(n *node) []*node {
	return slices.DeleteFunc(c.live(), func(m *node) bool { return m == n })
}

// addrs returns the client addresses of nodes.
func addrs(nodes []*node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.addr
	}
	return out
}

// restart restarts a stopped or killed node on its directory and addresses, and puts the new
// process in its place.
func (c *cluster) restart(n *node) *node {
	c.t.Helper()
	i := slices.Index(c.nodes, n)
	if i < 0 {
		c.t.Fatalf("restart: %s is not in the cluster", n.id)
	}
	c.nodes[i] = n.restart(c.t)
	return c.nodes[i]
}

// join starts a new node with --join through via's client address and returns once it serves
// requests. It may not be a voter yet: it is promoted once it has caught up.
func (c *cluster) join(via *node) *node {
	c.t.Helper()
	return c.joinWith(via, func(string) []string { return nil })
}

// leader waits until exactly one live node is the leader, ready to serve, and every other live
// node names it as the leader; it returns that node.
func (c *cluster) leader() *node {
	c.t.Helper()
	var found *node
	testutil.WaitFor(c.t, settleTimeout, func() error {
		var err error
		found, err = c.findLeader()
		return err
	})
	return found
}

// findLeader is one try of leader.
func (c *cluster) findLeader() (*node, error) {
	var leaders []*node
	leaderIDs := map[string]string{}
	live := c.live()
	if len(live) == 0 {
		return nil, errors.New("no live node")
	}
	for _, n := range live {
		info, err := infoRaft(n.addr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.id, err)
		}
		if info["raft_state"] == "Leader" && info["raft_ready"] == "true" {
			leaders = append(leaders, n)
		}
		leaderIDs[n.id] = info["raft_leader_id"]
	}
	if len(leaders) != 1 {
		return nil, fmt.Errorf("%d ready leaders; each node's leader: %v", len(leaders), leaderIDs)
	}
	for id, l := range leaderIDs {
		if l != leaders[0].id {
			return nil, fmt.Errorf("%s names %q as the leader, not %s", id, l, leaders[0].id)
		}
	}
	return leaders[0], nil
}

// followers returns the live nodes other than the leader.
func (c *cluster) followers() []*node { return c.others(c.leader()) }

// digest is a node's RAFT DIGEST: its applied index and a hash of its table.
type digest struct {
	applied int64
	sum     string
}

// digests checks that every live node ends up with the same table. It first writes a
// barrier through the leader (a LOCK and its UNLOCK, which leave the table as it was), then
// waits until every live node has applied it and they all report the same applied index and
// the same digest. It returns that digest.
func (c *cluster) digests() digest {
	c.t.Helper()
	l := c.leader()
	tok, err := callInt(l.addr, "LOCK", "digest-barrier", "60000")
	if err != nil {
		c.t.Fatalf("digest barrier: LOCK on the leader %s: %v", l.id, err)
	}
	if r, err := callInt(l.addr, "UNLOCK", "digest-barrier", strconv.FormatInt(tok, 10)); err != nil || r != 1 {
		c.t.Fatalf("digest barrier: UNLOCK on the leader %s: %d, %v", l.id, r, err)
	}
	// The leader has applied the UNLOCK: its applied index is at or past it. (A token is not
	// an index: a group commit grants several tokens at one index.)
	info, err := infoRaft(l.addr)
	if err != nil {
		c.t.Fatalf("digest barrier: INFO raft on the leader %s: %v", l.id, err)
	}
	barrier, err := strconv.ParseInt(info["raft_applied_index"], 10, 64)
	if err != nil {
		c.t.Fatalf("digest barrier: the leader %s's raft_applied_index %q: %v", l.id, info["raft_applied_index"], err)
	}
	var common digest
	var differ bool // the last look found equal applied indexes and different tables
	err = testutil.Poll(convergeTimeout, testutil.PollInterval, func() error {
		differ = false
		got := map[string]digest{}
		for _, n := range c.live() {
			d, err := nodeDigest(n.addr)
			if err != nil {
				return fmt.Errorf("%s: RAFT DIGEST: %w", n.id, err)
			}
			got[n.id] = d
		}
		first := true
		for id, d := range got {
			if d.applied < barrier {
				return fmt.Errorf("%s has applied up to %d, not yet the barrier at %d; digests %v", id, d.applied, barrier, got)
			}
			if first {
				common, first = d, false
			} else if d != common {
				differ = d.applied == common.applied
				return fmt.Errorf("digests differ: %v", got)
			}
		}
		return nil
	})
	if err != nil {
		if differ {
			err = fmt.Errorf("%w\n%s", err, c.tableDiff())
		}
		c.t.Fatal(err)
	}
	return common
}

// tableDiff compares the live nodes' tables, read with RAFT BACKUP, key by key, and describes
// the keys where a node differs from the first: what a "digests differ" failure needs to be
// understood. A lease is compared by the index that set it and whether there is one: a backup
// holds what is left of it by each node's own timer.
func (c *cluster) tableDiff() string {
	type entry struct {
		owner, value string
		token        fsm.Token
		leaseRev     uint64
		leased       bool
	}
	var b strings.Builder
	var first map[string]entry
	var firstID string
	for _, n := range c.live() {
		v, err := callWithin(10*time.Second, n.addr, "RAFT", "BACKUP")
		data, ok := v.(string)
		if err != nil || !ok {
			fmt.Fprintf(&b, "%s: RAFT BACKUP: %v %T\n", n.id, err, v)
			continue
		}
		_, m, err := backup.Decode([]byte(data))
		if err != nil {
			fmt.Fprintf(&b, "%s: decode its backup: %v\n", n.id, err)
			continue
		}
		table := map[string]entry{}
		m.Ascend("", func(key string, l fsm.Lock) bool {
			table[key] = entry{owner: string(l.Owner), value: fmt.Sprint(l.Value), token: l.Token, leaseRev: l.LeaseRev, leased: l.LeaseMs > 0}
			return true
		})
		fmt.Fprintf(&b, "%s: applied %d, %d keys, last token %d\n", n.id, m.Applied(), len(table), m.LastToken())
		if first == nil {
			first, firstID = table, n.id
			continue
		}
		shown := 0
		keys := slices.AppendSeq(slices.Collect(maps.Keys(first)), maps.Keys(table))
		slices.Sort(keys)
		for _, key := range slices.Compact(keys) {
			a, inFirst := first[key]
			o, inThis := table[key]
			if inFirst == inThis && a == o {
				continue
			}
			if shown++; shown > 20 {
				b.WriteString("  ... and more\n")
				break
			}
			fmt.Fprintf(&b, "  %q: %s %+v (held %v) / %s %+v (held %v)\n", key, firstID, a, inFirst, n.id, o, inThis)
		}
	}
	return b.String()
}

// nodeDigest runs RAFT DIGEST on addr.
func nodeDigest(addr string) (digest, error) {
	v, err := call(addr, "RAFT", "DIGEST")
	if err != nil {
		return digest{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return digest{}, fmt.Errorf("RAFT DIGEST: unexpected reply %#v", v)
	}
	applied, ok1 := a[0].(int64)
	sum, ok2 := a[1].(string)
	if !ok1 || !ok2 || len(sum) != 64 {
		return digest{}, fmt.Errorf("RAFT DIGEST: unexpected reply %#v", v)
	}
	return digest{applied: applied, sum: sum}, nil
}

// infoRaft returns the fields of INFO raft on addr.
func infoRaft(addr string) (map[string]string, error) {
	v, err := call(addr, "INFO", "raft")
	if err != nil {
		return nil, err
	}
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("INFO raft: unexpected reply %#v", v)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// members returns RAFT MEMBERS on addr, one map per member (leader is "0" or "1").
func members(addr string) ([]map[string]string, error) { return groupMembers(addr, 0) }

// groupMembers is members of raft group g (RAFT MEMBERS GROUP g; RAFT MEMBERS for group 0).
func groupMembers(addr string, g int) ([]map[string]string, error) {
	args := []string{"RAFT", "MEMBERS"}
	if g > 0 {
		args = append(args, "GROUP", strconv.Itoa(g))
	}
	v, err := call(addr, args...)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("RAFT MEMBERS: unexpected reply %#v", v)
	}
	var out []map[string]string
	for _, item := range list {
		kv, ok := item.([]any)
		if !ok || len(kv)%2 != 0 {
			return nil, fmt.Errorf("RAFT MEMBERS: unexpected member %#v", item)
		}
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[fmt.Sprint(kv[i])] = fmt.Sprint(kv[i+1])
		}
		out = append(out, m)
	}
	return out, nil
}

// call sends one command to addr on a fresh RESP2 connection and returns the decoded reply
// (testutil.Plain: string, int64, nil, []any), or a *resp.ReplyError for an error reply.
func call(addr string, args ...string) (any, error) {
	return callWithin(ioTimeout, addr, args...)
}

// callWithin is call with the dial and the round trip each bounded by timeout.
func callWithin(timeout time.Duration, addr string, args ...string) (any, error) {
	ctx := context.Background()
	c, err := testutil.Dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	v, err := c.Do(ctx, args...)
	if err != nil {
		return nil, err
	}
	return testutil.Plain(v), nil
}

// callInt is call for an integer reply.
func callInt(addr string, args ...string) (int64, error) {
	v, err := call(addr, args...)
	if err != nil {
		return 0, err
	}
	i, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%s: %#v, want an integer", strings.Join(args, " "), v)
	}
	return i, nil
}

// parseReply decodes one complete reply read by respConn (testutil.Plain); an error reply is a
// *resp.ReplyError value, not an error.
func parseReply(raw []byte) (any, error) {
	v, _, err := resp.ParseValue(raw)
	if err != nil {
		return nil, fmt.Errorf("parse %q: %w", raw, err)
	}
	return testutil.Plain(v), nil
}

// killLeaderThenSet kills the leader l (kill -9) and returns the first live node through which
// SET key owner NX PX 30000 succeeds once a new leader serves.
func (c *cluster) killLeaderThenSet(t *testing.T, l *node, key, owner string) *node {
	t.Helper()
	l.kill9()
	var survivor *node
	testutil.WaitFor(t, 10*time.Second, func() error {
		for _, n := range c.live() {
			if _, err := call(n.addr, "SET", key, owner, "NX", "PX", "30000"); err != nil {
				return err
			}
			survivor = n
			return nil
		}
		return errors.New("no live node")
	})
	return survivor
}

// compactLeaderLogPast writes on the leader l until its log, snapshotted, no longer holds entry
// behind+1: a follower that stopped at behind must then catch up by installing a snapshot. The
// writes go one at a time, an entry each (a pipeline's would share a few entries), well past the
// entries a compaction keeps.
func compactLeaderLogPast(t *testing.T, l *node, behind uint64) {
	t.Helper()
	for i := range 4 * 16 {
		if _, err := call(l.addr, "SET", "snap/filler", strconv.Itoa(i)); err != nil {
			t.Fatalf("SET snap/filler: %v", err)
		}
	}
	if v, err := call(l.addr, "RAFT", "SNAPSHOT"); err != nil || v != "OK" {
		t.Fatalf("RAFT SNAPSHOT on the leader: %v, %v", v, err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		info, err := infoRaft(l.addr)
		if err != nil {
			return err
		}
		if first, _ := strconv.ParseUint(info["store_first_index"], 10, 64); first <= behind+1 {
			return fmt.Errorf("the leader's log starts at %d; waiting for it to be compacted past %d", first, behind+1)
		}
		return nil
	})
}
