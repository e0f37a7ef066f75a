package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// node is one raftlock process on its own loopback IP 127.0.0.(idx+1).
type node struct {
	idx        int
	id         string
	ip         string
	clientAddr string
	raftAddr   string // where the node listens for raft
	proxyAddr  string // what it advertises: the proxy in front of raftAddr
	dir        string
	logPath    string
	extra      []string
	peers      string
	join       string // client address to join through (a node added later)

	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

type cluster struct {
	bin   string
	root  string
	nodes []*node
	net   *network
	logf  func(format string, args ...any)
}

// freePort returns a port free on ip a moment ago.
func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// newNode allocates the addresses of node idx and its proxy.
func (c *cluster) newNode(idx int, extra []string) (*node, error) {
	ip := fmt.Sprintf("127.0.0.%d", idx+1)
	var ports [3]int
	for i := range ports {
		for {
			p, err := freePort(ip)
			if err != nil {
				return nil, err
			}
			if i == 0 || (p != ports[0] && (i < 2 || p != ports[1])) {
				ports[i] = p
				break
			}
		}
	}
	n := &node{idx: idx, id: fmt.Sprintf("n%d", idx+1), ip: ip,
		clientAddr: net.JoinHostPort(ip, strconv.Itoa(ports[0])),
		raftAddr:   net.JoinHostPort(ip, strconv.Itoa(ports[1])),
		proxyAddr:  net.JoinHostPort(ip, strconv.Itoa(ports[2])),
		dir:        filepath.Join(c.root, fmt.Sprintf("n%d", idx+1), "data"),
		logPath:    filepath.Join(c.root, fmt.Sprintf("n%d.log", idx+1)),
		extra:      extra}
	c.net.mu.Lock()
	c.net.ipIndex[ip] = idx
	c.net.mu.Unlock()
	if _, err := c.net.addProxy(idx, n.proxyAddr, n.raftAddr); err != nil {
		return nil, err
	}
	return n, nil
}

// startCluster starts size nodes bootstrapped together and waits until each serves requests.
func startCluster(bin, root string, size int, extra []string, logf func(string, ...any)) (*cluster, error) {
	c := &cluster{bin: bin, root: root, net: newNetwork(), logf: logf}
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
	for _, n := range c.nodes {
		n.peers = strings.Join(peers, ",")
		if err := n.start(c.bin); err != nil {
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

func (n *node) start(bin string) error {
	if err := os.MkdirAll(filepath.Dir(n.dir), 0o755); err != nil {
		return err
	}
	lf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "=== chaos: start %s at %s\n", n.id, time.Now().Format(time.RFC3339Nano))
	args := []string{"--id", n.id, "--dir", n.dir, "--addr", n.clientAddr, "--raft-addr", n.raftAddr,
		"--raft-advertise", n.proxyAddr, "--log-level", "info"}
	if n.join != "" {
		args = append(args, "--join", n.join)
	} else {
		args = append(args, "--peers", n.peers)
	}
	args = append(args, n.extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return err
	}
	n.cmd, n.done, n.paused = cmd, make(chan struct{}), false
	done := n.done
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(lf, "=== chaos: %s exited: %v\n", n.id, err)
		lf.Close()
		close(done)
	}()
	return nil
}

func (n *node) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
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

func (n *node) signal(sig syscall.Signal) {
	if n.running() {
		_ = n.cmd.Process.Signal(sig)
	}
}

// kill9 kills the process by PID and waits for it.
func (n *node) kill9() {
	if !n.running() {
		return
	}
	n.signal(syscall.SIGKILL)
	<-n.done
	n.paused = false
}

// stopClean resumes the node if paused, sends SIGTERM and waits; SIGKILL after 15 s.
func (n *node) stopClean() error {
	if !n.running() {
		return nil
	}
	if n.paused {
		n.signal(syscall.SIGCONT)
		n.paused = false
	}
	n.signal(syscall.SIGTERM)
	select {
	case <-n.done:
		return nil
	case <-time.After(15 * time.Second):
		n.kill9()
		return errors.New(n.id + " did not stop within 15s of SIGTERM; killed")
	}
}

func (n *node) pause() {
	n.signal(syscall.SIGSTOP)
	n.paused = true
}

func (n *node) resume() {
	n.signal(syscall.SIGCONT)
	n.paused = false
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
	return first
}

// query asks one node a command with a short timeout.
func query(addr string, args ...string) (any, error) {
	c := &client{addr: addr}
	defer c.close()
	return c.do(3*time.Second, args...)
}

// leader returns the index of the node that says it is the leader (RAFT STATS / INFO raft), or -1.
func (c *cluster) leader() int {
	for _, n := range c.nodes {
		if !n.running() || n.paused {
			continue
		}
		v, err := query(n.clientAddr, "INFO", "raft")
		if err != nil {
			continue
		}
		s, _ := v.(string)
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if line == "raft_state:leader" || line == "state:Leader" || line == "raft_state:Leader" {
				return n.idx
			}
		}
	}
	return -1
}

// digests returns every running node's RAFT DIGEST as "applied/sha".
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
