package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// node is one raftlock process on its own loopback IP 127.0.0.(idx+2).
type node struct {
	idx        int
	id         string
	ip         string
	clientAddr string // where clients (and the harness) reach it directly
	fwdAddr    string // what it advertises as its client address: the forwarding proxy
	raftAddr   string // where it listens for raft
	proxyAddr  string // what it advertises for raft: the proxy in front of raftAddr
	dir        string
	logPath    string
	extra      []string
	peers      string

	mu      sync.Mutex
	join    string         // client address to join through (set when the node is re-added)
	proc    *testutil.Proc // the current process; nil before the first start
	removed bool           // removed from the cluster and not re-added yet
	offset  time.Duration  // the lease clock offset of the running process
}

type cluster struct {
	bin   string
	root  string
	nodes []*node
	net   *network
	rec   *recorder
	logf  func(format string, args ...any)
	// mounted are the node folders with a tmpfs of their own (disk.go), unmounted by stop.
	mounted []string
	// groups is the number of raft groups the nodes run (--groups): a membership change
	// reaches every group, and suffrage reads them all.
	groups int
}

// newNode allocates the addresses of node idx and starts its two proxies.
func (c *cluster) newNode(idx int, extra []string) (*node, error) {
	ip := fmt.Sprintf("127.0.0.%d", idx+2)
	var ports []int
	for len(ports) < 4 {
		p, err := testutil.FreePort(ip)
		if err != nil {
			return nil, err
		}
		dup := false
		for _, q := range ports {
			dup = dup || q == p
		}
		if !dup {
			ports = append(ports, p)
		}
	}
	addr := func(i int) string { return net.JoinHostPort(ip, strconv.Itoa(ports[i])) }
	n := &node{idx: idx, id: fmt.Sprintf("n%d", idx+1), ip: ip,
		clientAddr: addr(0), raftAddr: addr(1), proxyAddr: addr(2), fwdAddr: addr(3),
		dir:     filepath.Join(c.root, fmt.Sprintf("n%d", idx+1), "data"),
		logPath: filepath.Join(c.root, fmt.Sprintf("n%d.log", idx+1)),
		extra:   extra}
	c.net.mu.Lock()
	c.net.ipIndex[ip] = idx
	c.net.mu.Unlock()
	if err := c.net.addProxy("raft", idx, n.proxyAddr, n.raftAddr, c.net.byIP); err != nil {
		return nil, err
	}
	fwdSource := func(in net.Conn) (int, bool) {
		if i, ok := c.net.byIP(in); ok {
			return i, true // a server that dials from its own IP
		}
		return procSource(in, c.pids())
	}
	if err := c.net.addProxy("forward", idx, n.fwdAddr, n.clientAddr, fwdSource); err != nil {
		return nil, err
	}
	return n, nil
}

// pids maps each running node to its process ID.
func (c *cluster) pids() map[int]int {
	out := map[int]int{}
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.runningLocked() {
			out[n.idx] = n.proc.Pid()
		}
		n.mu.Unlock()
	}
	return out
}

// startCluster starts size nodes bootstrapped together and waits until each serves requests.
// With disks, each node's folder gets a tmpfs of its own first if the harness may mount one
// (cluster.mounted; disk.go).
func startCluster(bin, root string, size int, extra []string, disks bool, rec *recorder, logf func(string, ...any)) (*cluster, error) {
	c := &cluster{bin: bin, root: root, net: newNetwork(), rec: rec, logf: logf}
	var peers []string
	for i := range size {
		n, err := c.newNode(i, extra)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		peers = append(peers, n.id+"="+n.proxyAddr)
	}
	if disks {
		if ok, why := c.mountDisks(); !ok {
			c.unmountDisks()
			logf("no tmpfs per node, so no disk-full fault in this run: %s", why)
		}
	}
	for _, n := range c.nodes {
		n.peers = strings.Join(peers, ",")
		if err := c.start(n); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := n.waitServing(60 * time.Second); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// start starts n's process. A new process's lease clock starts at offset 0: for the record,
// that is a clock change (clock.go).
func (c *cluster) start(n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.runningLocked() {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(n.dir), 0o755); err != nil {
		return err
	}
	args := []string{"--id", n.id, "--dir", n.dir, "--addr", n.clientAddr, "--advertise", n.fwdAddr,
		"--raft-addr", n.raftAddr, "--raft-advertise", n.proxyAddr, "--test-clock", "true", "--test-disk-faults", "true",
		"--log-level", "info"}
	if n.join != "" {
		args = append(args, "--join", n.join)
	} else {
		args = append(args, "--peers", n.peers)
	}
	args = append(args, n.extra...)
	at := c.rec.now()
	p, err := testutil.Start(n.id, n.logPath, c.bin, args...)
	if err != nil {
		return err
	}
	if n.offset != 0 {
		c.rec.clock(ClockEvent{Node: n.idx, Invoke: at, Complete: c.rec.now(), Offset: 0})
	}
	n.proc, n.offset = p, 0
	return nil
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked()
}

func (n *node) runningLocked() bool { return n.proc != nil && n.proc.Running() }

// up reports whether the node runs and is not paused.
func (n *node) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runningLocked() && !n.proc.Paused()
}

// current returns the node's current process, or nil before its first start.
func (n *node) current() *testutil.Proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc
}

// waitServing waits until the node answers a linearizable read (through the leader).
func (n *node) waitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &client{addr: n.clientAddr}
	defer c.close()
	var err error
	for time.Now().Before(deadline) {
		if !n.running() {
			return fmt.Errorf("%s exited while starting (see %s)", n.id, n.logPath)
		}
		if _, err = c.do(2*time.Second, "LOCKINFO", "chaos-probe"); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not serving after %v: %v", n.id, timeout, err)
}

// kill9 kills the process (SIGKILL) and waits for it.
func (n *node) kill9() {
	if p := n.current(); p != nil && p.Running() {
		p.Kill()
	}
}

// waitExit waits up to timeout for the process to exit on its own.
func (n *node) waitExit(timeout time.Duration) bool {
	p := n.current()
	return p == nil || p.WaitExit(timeout) == nil
}

// quit makes a node that does not exit on its own dump its goroutines into its log (SIGQUIT),
// so the log shows where it hangs, then kills it if it still runs.
func (n *node) quit() {
	if p := n.current(); p != nil && p.Running() {
		p.Quit()
	}
}

// stopClean stops the node (SIGTERM; after 15 s a goroutine dump and SIGKILL). Only a node that
// would not stop is an error: one that exited on its own or uncleanly shows in its log.
func (n *node) stopClean() error {
	p := n.current()
	if p == nil {
		return nil
	}
	if err := p.Stop(15 * time.Second); errors.Is(err, testutil.ErrWouldNotStop) {
		return fmt.Errorf("%s %w", n.id, err)
	}
	return nil
}

func (n *node) pause() {
	if p := n.current(); p != nil && p.Running() {
		p.Pause()
	}
}

func (n *node) resume() {
	if p := n.current(); p != nil && p.Running() {
		p.Resume()
	}
}

// stop stops every node cleanly and closes the proxies. It returns the first stop problem.
func (c *cluster) stop() error {
	var first error
	for _, n := range c.nodes {
		if err := n.stopClean(); err != nil && first == nil {
			first = err
		}
	}
	c.net.close()
	c.unmountDisks()
	return first
}

// query asks one node a command with a short timeout.
func query(addr string, args ...string) (any, error) {
	c := &client{addr: addr}
	defer c.close()
	return c.do(3*time.Second, args...)
}

// leader returns the index of a node that says it is the leader (INFO raft), or -1.
func (c *cluster) leader() int {
	for _, n := range c.nodes {
		if !n.up() {
			continue
		}
		v, err := query(n.clientAddr, "INFO", "raft")
		if err != nil {
			continue
		}
		s, _ := v.(string)
		for _, line := range strings.Split(s, "\n") {
			if strings.EqualFold(strings.TrimSpace(line), "raft_state:leader") {
				return n.idx
			}
		}
	}
	return -1
}

// shift moves node i's lease clock by d (DEBUG CLOCK-SHIFT) and records the change. A shift
// whose reply is lost may still apply later: it is recorded as taking effect at any time from
// now on.
func (c *cluster) shift(i int, d time.Duration) error {
	n := c.nodes[i]
	if !n.up() {
		return fmt.Errorf("%s is not running", n.id)
	}
	inv := c.rec.now()
	v, err := query(n.clientAddr, "DEBUG", "CLOCK-SHIFT", strconv.FormatInt(d.Milliseconds(), 10))
	n.mu.Lock()
	defer n.mu.Unlock()
	e := ClockEvent{Node: i, Invoke: inv, Complete: c.rec.now(), Offset: int64(n.offset + d)}
	if err != nil {
		e.Complete = never
	} else if total, ok := asInt(v); ok {
		e.Offset = total * int64(time.Millisecond)
	}
	n.offset = time.Duration(e.Offset)
	c.rec.clock(e)
	return err
}

// member is one row of RAFT MEMBERS.
type member struct{ id, suffrage string }

// members asks node i for the membership of raft group g (RAFT MEMBERS GROUP g; RAFT
// MEMBERS for group 0).
func (c *cluster) members(i, g int) ([]member, error) {
	args := []string{"RAFT", "MEMBERS"}
	if g > 0 {
		args = append(args, "GROUP", strconv.Itoa(g))
	}
	v, err := query(c.nodes[i].clientAddr, args...)
	if err != nil {
		return nil, err
	}
	rows, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("RAFT MEMBERS reply %#v", v)
	}
	var out []member
	for _, r := range rows {
		kv, ok := r.([]any)
		if !ok {
			return nil, fmt.Errorf("RAFT MEMBERS row %#v", r)
		}
		var m member
		for j := 0; j+1 < len(kv); j += 2 {
			switch kv[j] {
			case "id":
				m.id, _ = kv[j+1].(string)
			case "suffrage":
				m.suffrage, _ = kv[j+1].(string)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// suffrage is id's suffrage as some up node other than id sees it ("" when not a member). With
// several raft groups it is the suffrage id has in every group, or the groups' suffrages
// joined by "/" while they differ (a membership change is still going from group to group).
func (c *cluster) suffrage(id int) (string, error) {
	var last error = errors.New("no other node is up")
next:
	for _, n := range c.nodes {
		if n.idx == id || !n.up() || n.isRemoved() {
			continue
		}
		var each []string
		for g := range max(c.groups, 1) {
			ms, err := c.members(n.idx, g)
			if err != nil {
				last = err
				continue next
			}
			got := ""
			for _, m := range ms {
				if m.id == c.nodes[id].id {
					got = m.suffrage
				}
			}
			each = append(each, got)
		}
		if each = slices.Compact(each); len(each) == 1 {
			return each[0], nil
		}
		return strings.Join(each, "/"), nil
	}
	return "", last
}

func (n *node) isRemoved() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.removed
}

// waitSuffrage waits until the other nodes see node i with the given suffrage ("": removed).
func (c *cluster) waitSuffrage(i int, want string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var got string
	var err error
	for time.Now().Before(deadline) {
		if got, err = c.suffrage(i); err == nil && got == want {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("%s is %q, not %q, after %v", c.nodes[i].id, got, want, timeout)
}

// repairSuffrage makes node i a voter of every group again after a removal that reached some
// groups only, as an operator would (RAFT PROMOTE through a member that is up, for up to 30 s),
// and says what it did.
func (c *cluster) repairSuffrage(i int) string {
	got, err := c.suffrage(i)
	if err != nil || got == "voter" || got == "" {
		return ""
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		for _, o := range c.nodes {
			if o.idx != i && o.up() && !o.isRemoved() {
				query(o.clientAddr, "RAFT", "PROMOTE", c.nodes[i].id)
				break
			}
		}
		if now, err := c.suffrage(i); err == nil && now == "voter" {
			return fmt.Sprintf("; its suffrage was %q, RAFT PROMOTE made it a voter of every group", got)
		}
	}
	now, _ := c.suffrage(i)
	return fmt.Sprintf("; its suffrage was %q, still %q after 30 s of RAFT PROMOTE", got, now)
}

// readd starts node i afresh (empty data directory) joining through a member that is up.
func (c *cluster) readd(i int) error {
	n := c.nodes[i]
	via := ""
	if l := c.leader(); l >= 0 && l != i {
		via = c.nodes[l].clientAddr
	}
	for _, o := range c.nodes {
		if via == "" && o.idx != i && o.up() && !o.isRemoved() {
			via = o.clientAddr
		}
	}
	if via == "" {
		return errors.New("no member is up to join through")
	}
	n.kill9()
	if err := os.RemoveAll(n.dir); err != nil {
		return err
	}
	n.mu.Lock()
	n.join, n.removed = via, false
	n.mu.Unlock()
	return c.start(n)
}

// digests returns every running node's RAFT DIGEST as "id:applied/sha".
func (c *cluster) digests() ([]string, error) {
	var out []string
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		v, err := query(n.clientAddr, "RAFT", "DIGEST")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n.id, err)
		}
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return nil, fmt.Errorf("%s: RAFT DIGEST reply %v", n.id, v)
		}
		out = append(out, fmt.Sprintf("%s:%v/%v", n.id, a[0], a[1]))
	}
	return out, nil
}

// finalReads reads keys from every node's own table (READONLY).
func (c *cluster) finalReads(keys []string) (map[string]map[string]finalRead, error) {
	out := map[string]map[string]finalRead{}
	for _, n := range c.nodes {
		cl := &client{addr: n.clientAddr}
		if _, err := cl.do(3*time.Second, "READONLY"); err != nil {
			cl.close()
			return nil, fmt.Errorf("%s: READONLY: %w", n.id, err)
		}
		m := map[string]finalRead{}
		for _, k := range keys {
			v, err := cl.do(3*time.Second, "LOCKINFO", k)
			if err != nil {
				cl.close()
				return nil, fmt.Errorf("%s: LOCKINFO %s: %w", n.id, k, err)
			}
			var op Op
			if err := parseLockInfo(&op, v); err != nil {
				cl.close()
				return nil, fmt.Errorf("%s: LOCKINFO %s: %v: %#v", n.id, k, err, v)
			}
			m[k] = finalRead{Free: op.Free, Owner: op.RdOwner, Token: op.RdToken}
		}
		cl.close()
		out[n.id] = m
	}
	return out, nil
}
