package main

import (
	"bytes"
	"context"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// This file is the one place that starts and stops server processes. Every
// process is started by startProc and stopped, by its PID, by stopAll; the
// caller that starts a cluster defers its stop.

const (
	// stopGrace is how long a process gets to exit after SIGTERM before it
	// is killed. raftlock hands leadership off on SIGTERM, which is quick on
	// loopback.
	stopGrace = 10 * time.Second
	// readyTimeout bounds the wait for a cluster to elect a leader and
	// accept a write.
	readyTimeout = 30 * time.Second
	// pollEvery is the pause between readiness probes.
	pollEvery = 50 * time.Millisecond
)

// proc is one server process the driver started.
type proc struct {
	name string
	log  string        // path of its stdout+stderr
	cmd  *exec.Cmd     // started
	done chan struct{} // closed once it has exited and been reaped
}

// startProc starts argv with its output in logPath. The child gets SIGKILL
// should the driver die without stopping it (PR_SET_PDEATHSIG), so even a
// kill -9 of the driver leaves no server behind.
func startProc(name, logPath string, argv ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // how it exited shows in its log; stopAll only needs to know that it did
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether p has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the last lines of p's output, for an error message.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.log) // best effort: the message is only a hint
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-5):], "\n")
}

// stopAll sends SIGTERM to every process, then waits for each, killing any
// that has not exited within stopGrace.
func stopAll(procs []*proc) {
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM) // fails only if it has exited already
	}
	deadline := time.Now().Add(stopGrace)
	for _, p := range procs {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-p.done:
		case <-t.C:
			fmt.Fprintf(os.Stderr, "compare: %s (pid %d) ignored SIGTERM; killing it\n", p.name, p.cmd.Process.Pid)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		t.Stop()
	}
}

// freePorts returns n distinct free loopback ports. They are held open
// together so that they differ, then released for the servers to bind; the
// kernel hands out ephemeral ports from far above 6379.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// cluster is a running deployment of one system.
type cluster struct {
	procs []*proc
	// addrs are the client addresses of its nodes. For raftlock and etcd
	// addrs[0] is the leader's: the benchmark drives them through it.
	addrs []string
}

func (c *cluster) stop() { stopAll(c.procs) }

// checkAlive returns an error naming the first process that has exited.
func (c *cluster) checkAlive() error {
	for _, p := range c.procs {
		if p.exited() {
			return fmt.Errorf("%s exited: %s", p.name, p.logTail())
		}
	}
	return nil
}

// startRaftlock starts an n-node raftlock cluster (loopback; every reply waits
// for the fsync of a majority) in dir and waits for its leader to grant a lock.
func startRaftlock(ctx context.Context, bin, dir string, n int) (*cluster, error) {
	return startRaftNodes(ctx, "raftlock", dir, n, func(id, data, client, raft, peers string) []string {
		return []string{bin, "--id", id, "--dir", data, "--addr", client, "--raft-addr", raft,
			"--peers", peers, "--log-level", "warn"}
	})
}

// startRaftNodes starts n nodes of a raft-replicated server in dir, node i as argv(its id, its
// data directory, its client and raft addresses, every node's "id=raft address"), and waits
// until one says it leads (raftlockLeads: raftlock and the raft floor answer the same).
func startRaftNodes(ctx context.Context, name, dir string, n int, argv func(id, data, client, raft, peers string) []string) (*cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var peers []string
	for i := range n {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, addr(ports[n+i])))
	}
	c := &cluster{}
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		data := filepath.Join(dir, id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			c.stop()
			return nil, err
		}
		p, err := startProc(name+" "+id, data+".log", argv(id, data, addr(ports[i]), addr(ports[n+i]), strings.Join(peers, ","))...)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.addrs = append(c.addrs, addr(ports[i]))
	}
	if err := c.waitLeader(ctx, raftlockLeads); err != nil {
		c.stop()
		return nil, fmt.Errorf("%s, %d nodes: %w", name, n, err)
	}
	return c, nil
}

// raftlockLeads reports whether the node at a says it leads, after checking that it grants
// and releases a lock.
func raftlockLeads(ctx context.Context, a string) (bool, error) {
	cl := newRESPClient(a)
	defer cl.Close()
	info, err := cl.Info(ctx, "raft").Result()
	if err != nil || !strings.Contains(info, "raft_state:Leader") {
		return false, nil
	}
	tok, err := cl.Do(ctx, "LOCK", "compare:ready", 1000).Int64()
	if err == nil {
		err = cl.Do(ctx, "UNLOCK", "compare:ready", tok).Err()
	}
	return err == nil, err
}

// startRedis starts n independent redis-servers in dir: with fsync, an
// append-only file fsynced before every reply (appendfsync always);
// without, no persistence at all.
func startRedis(ctx context.Context, bin, dir string, n int, fsync bool) (*cluster, error) {
	ports, err := freePorts(n)
	if err != nil {
		return nil, err
	}
	c := &cluster{}
	for i, port := range ports {
		data := filepath.Join(dir, fmt.Sprintf("r%d", i+1))
		if err := os.MkdirAll(data, 0o755); err != nil {
			c.stop()
			return nil, err
		}
		args := []string{bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--dir", data}
		if fsync {
			args = append(args, "--appendonly", "yes", "--appendfsync", "always")
		} else {
			args = append(args, "--appendonly", "no")
		}
		p, err := startProc(fmt.Sprintf("redis-server r%d", i+1), data+".log", args...)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.addrs = append(c.addrs, addr(port))
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for _, a := range c.addrs {
		err := poll(ctx, c, func() error {
			cl := newRESPClient(a)
			defer cl.Close()
			return cl.Ping(ctx).Err()
		})
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("redis-server %s: %w", a, err)
		}
	}
	return c, nil
}

// startFloor starts the Go floor server (tests/bench/cmd/floor) in dir:
// durable, every write waits for an fdatasync of its log (group commit);
// otherwise it writes nothing.
func startFloor(ctx context.Context, bin, dir string, durable bool) (*cluster, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{bin, "-addr", addr(ports[0])}
	if durable {
		args = append(args, "-dir", dir)
	}
	p, err := startProc("floor", filepath.Join(dir, "floor.out"), args...)
	if err != nil {
		return nil, err
	}
	c := &cluster{procs: []*proc{p}, addrs: []string{addr(ports[0])}}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	err = poll(ctx, c, func() error {
		cl := newRESPClient(c.addrs[0])
		defer cl.Close()
		return cl.Ping(ctx).Err()
	})
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("floor %s: %w", c.addrs[0], err)
	}
	return c, nil
}

// floorRaftPace is when the raft floor sends its next batch (its -pace): "write", once the
// leader has written the last, as raftlock does, so that the floor is what raftlock's own
// settings allow. (Its "commit" makes larger batches on 3 nodes for the same fsyncs; raftlock
// gave that up, raftnode/groupcommit.go says why.) On one node the two are the same.
const floorRaftPace = "write"

// startFloorRaft starts the raft floor (tests/bench/cmd/floor with -peers: the Go floor with
// its log replicated by hashicorp/raft, as raftlock's is) on n nodes in dir, and waits for its
// leader to grant a lock.
func startFloorRaft(ctx context.Context, bin, dir string, n int) (*cluster, error) {
	return startRaftNodes(ctx, "raft floor", dir, n, func(id, data, client, raft, peers string) []string {
		return []string{bin, "-addr", client, "-dir", data, "-id", id, "-raft-addr", raft, "-peers", peers, "-pace", floorRaftPace}
	})
}

// startEtcd starts an n-member etcd cluster in dir (etcd fsyncs its WAL
// before acknowledging, by default) and waits for its leader to accept a
// write.
func startEtcd(ctx context.Context, bin, dir string, n int) (*cluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://%s", i+1, addr(ports[n+i])))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // for the logs; etcd makes its data dirs
		return nil, err
	}
	token := filepath.Base(dir) // unique per cluster, so members of old ones cannot join
	c := &cluster{}
	for i := range n {
		name := fmt.Sprintf("e%d", i+1)
		data := filepath.Join(dir, name)
		client, peer := "http://"+addr(ports[i]), "http://"+addr(ports[n+i])
		p, err := startProc("etcd "+name, data+".log", bin, "--name", name, "--data-dir", data,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--log-level", "warn")
		if err != nil {
			c.stop()
			return nil, err
		}
		c.procs = append(c.procs, p)
		c.addrs = append(c.addrs, addr(ports[i]))
	}
	if err := c.waitLeader(ctx, etcdLeads); err != nil {
		c.stop()
		return nil, fmt.Errorf("etcd, %d members: %w", n, err)
	}
	return c, nil
}

// etcdLeads reports whether the member at a leads, by its status, after checking that it
// accepts a write.
func etcdLeads(ctx context.Context, a string) (bool, error) {
	cl, err := clientv3.New(clientv3.Config{Endpoints: []string{a}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return false, err
	}
	defer cl.Close()
	st, err := cl.Status(ctx, a)
	if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
		return false, nil
	}
	_, err = cl.Put(ctx, "/compare/ready", "1")
	return err == nil, err
}

// waitLeader polls until leads says one of c's nodes leads (and works), then moves its
// address to addrs[0], where the load goes.
func (c *cluster) waitLeader(ctx context.Context, leads func(context.Context, string) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return poll(ctx, c, func() error {
		for i, a := range c.addrs {
			ok, err := leads(ctx, a)
			if err != nil {
				return err
			}
			if ok {
				c.addrs[0], c.addrs[i] = c.addrs[i], c.addrs[0]
				return nil
			}
		}
		return errors.New("no leader yet")
	})
}

// poll calls try every pollEvery until it succeeds, ctx ends or a process
// of c exits; on failure it returns try's last error.
func poll(ctx context.Context, c *cluster, try func() error) error {
	for {
		err := try()
		if err == nil {
			return nil
		}
		if dead := c.checkAlive(); dead != nil {
			return dead
		}
		t := time.NewTimer(pollEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		case <-t.C:
		}
	}
}

// loadAvg returns the 1-minute load average, or -1 if it cannot be read.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	fields := bytes.Fields(b)
	if len(fields) == 0 {
		return -1
	}
	f, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil {
		return -1
	}
	return f
}
