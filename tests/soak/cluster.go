package soak

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// Cluster bounds.
const (
	clusterSize = 3
	// readyTimeout bounds a node's wait to serve after a start or restart: a SIGKILLed node
	// replays its log and may install a snapshot first.
	readyTimeout = 60 * time.Second
	// probeTimeout bounds each readiness probe and each scrape of /metrics.
	probeTimeout = 3 * time.Second
)

// node is one raftlock process of the cluster, on loopback, and the process now running it.
type node struct {
	id          string
	dir         string
	logPath     string
	addr        string // clients
	metricsAddr string // /readyz, /metrics
	args        []string

	mu      sync.Mutex
	proc    *testutil.Proc // nil while the node is down between a stop and its start
	started time.Time
	// exits has a watch of each process it started, which notes when it exited.
	exits map[*testutil.Proc]*exitWatch
}

// exitWatch is when a process exited, written by its watcher before it closes noted.
type exitWatch struct {
	at    time.Time
	noted chan struct{}
}

// cluster is clusterSize raftlock processes bootstrapped together, as scripts/cluster.sh starts them.
type cluster struct {
	bin   string
	nodes []*node
	// watchers note when each process exits; stop waits for them.
	watchers sync.WaitGroup
	mu       struct {
		sync.Mutex
		exits []string // processes that exited on their own, as Figures.Exits says them
	}
}

// startCluster starts clusterSize nodes of bin, each with its data dir and log under root, and waits
// until each serves. On error every process it started is stopped.
func startCluster(ctx context.Context, bin, root string) (*cluster, error) {
	c := &cluster{bin: bin}
	var peers []string
	for i := range clusterSize {
		var ports [3]int
		for j := range ports {
			p, err := testutil.FreePort("127.0.0.1")
			if err != nil {
				return nil, err
			}
			ports[j] = p
		}
		hp := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
		n := &node{id: fmt.Sprintf("n%d", i+1), addr: hp(ports[0]), metricsAddr: hp(ports[2])}
		n.dir = filepath.Join(root, n.id)
		n.logPath = filepath.Join(root, n.id+".log")
		n.args = []string{"--id", n.id, "--dir", n.dir, "--addr", n.addr, "--raft-addr", hp(ports[1]),
			"--metrics-addr", n.metricsAddr}
		peers = append(peers, n.id+"="+hp(ports[1]))
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		n.args = append(n.args, "--peers", strings.Join(peers, ","))
		if err := c.start(n); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := n.waitReady(ctx, readyTimeout); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// start starts n's process, its output appended to its log.
func (c *cluster) start(n *node) error {
	p, err := testutil.Start(n.id, n.logPath, c.bin, n.args...)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proc, n.started = p, time.Now()
	if n.exits == nil {
		n.exits = map[*testutil.Proc]*exitWatch{}
	}
	w := &exitWatch{noted: make(chan struct{})}
	n.exits[p] = w
	n.mu.Unlock()
	c.watchers.Go(func() {
		<-p.Exited()
		w.at = time.Now()
		close(w.noted)
	})
	return nil
}

// noteExit records err, from stopping n's process p, if it says p had exited on its own.
func (c *cluster) noteExit(n *node, p *testutil.Proc, err error) {
	if !errors.Is(err, testutil.ErrExitedEarly) {
		return
	}
	n.mu.Lock()
	w := n.exits[p]
	n.mu.Unlock()
	<-w.noted
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.exits = append(c.mu.exits, fmt.Sprintf("%s exited on its own at %s UTC (status %v)", n.id, w.at.UTC().Format("15:04:05"), p.ExitStatus()))
}

// exits returns every process that exited on its own so far, the running ones checked now: a
// node that exited stays down, its exit reported once.
func (c *cluster) exits() []string {
	for _, n := range c.nodes {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p != nil && !p.Running() {
			c.noteExit(n, p, p.Stop(0))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.mu.exits)
}

// current returns n's running process and when it started; nil while it is down.
func (n *node) current() (*testutil.Proc, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || !n.proc.Running() {
		return nil, time.Time{}
	}
	return n.proc, n.started
}

// restart stops n (SIGTERM with testutil.StopGrace, or SIGKILL if kill), starts it again on
// its data and waits until it serves. It returns how long the node was out.
func (c *cluster) restart(ctx context.Context, n *node, kill bool) (time.Duration, error) {
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	began := time.Now()
	if p != nil {
		var err error
		switch {
		case !p.Running():
			err = p.Stop(0) // it exited on its own: noted, and started again
		case kill:
			err = p.Kill()
		default:
			err = p.Stop(testutil.StopGrace)
		}
		c.noteExit(n, p, err)
		if err != nil && !errors.Is(err, testutil.ErrExitedEarly) {
			return 0, fmt.Errorf("stop %s: %w", n.id, err)
		}
	}
	if err := c.start(n); err != nil {
		return 0, err
	}
	if err := n.waitReady(ctx, readyTimeout); err != nil {
		return 0, err
	}
	return time.Since(began), nil
}

// waitReady waits until n's /readyz says ready and its client port answers PING.
func (n *node) waitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: probeTimeout}
	err := testutil.Poll(timeout, 100*time.Millisecond, func() error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %v", testutil.ErrGiveUp, ctx.Err())
		}
		if p, _ := n.current(); p == nil {
			return fmt.Errorf("%w: %s exited (see %s)", testutil.ErrGiveUp, n.id, n.logPath)
		}
		res, err := hc.Get("http://" + n.metricsAddr + "/readyz")
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", res.StatusCode, strings.TrimSpace(string(body)))
		}
		return testutil.Ping(n.addr, probeTimeout)
	})
	if err != nil {
		return fmt.Errorf("%s not ready: %w", n.id, err)
	}
	return nil
}

// sample reads n's process figures from its /metrics (open to loopback without credentials:
// ops/protect.go): RSS, open files and goroutines as the node reports them (ops/process.go),
// and whether it leads. A node that is down, or does not answer, gives a sample with Up false.
func (n *node) sample(interval time.Duration) NodeSample {
	s := NodeSample{Node: n.id, Goroutines: -1}
	p, started := n.current()
	if p == nil {
		return s
	}
	g, err := scrapeGauges(n.metricsAddr, "process_resident_memory_bytes", "process_open_fds", "go_goroutines", "raftlock_is_leader")
	if err != nil {
		return s
	}
	s.PID, s.Up, s.RSS, s.OpenFDs = p.Pid(), true, uint64(g[0]), int(g[1])
	s.Goroutines, s.Leader = int(g[2]), g[3] == 1
	s.Fresh = time.Since(started) < interval
	return s
}

// scrapeGauges reads unlabelled samples from the /metrics at addr, in the order of names.
func scrapeGauges(addr string, names ...string) ([]float64, error) {
	hc := &http.Client{Timeout: probeTimeout}
	res, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", res.Status)
	}
	out := make([]float64, len(names))
	found := 0
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if i := slices.Index(names, name); ok && i >= 0 {
			if out[i], err = strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("/metrics %s: %w", name, err)
			}
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if found < len(names) {
		return nil, fmt.Errorf("/metrics lacks one of %v", names)
	}
	return out, nil
}

// stop stops every running node cleanly (SIGTERM, then SIGKILL after testutil.StopGrace), by
// its PID, and returns the first problem. A node that had exited on its own is not one: exits
// reports it.
func (c *cluster) stop() error {
	var first error
	for _, n := range c.nodes {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			continue
		}
		err := p.Stop(testutil.StopGrace)
		c.noteExit(n, p, err)
		if err != nil && !errors.Is(err, testutil.ErrExitedEarly) && first == nil {
			first = fmt.Errorf("%s: %w", n.id, err)
		}
	}
	c.watchers.Wait()
	return first
}

// logProblems names each node log that shows a panic, a data race or a fatal error
// (testutil.LogMarkers).
func (c *cluster) logProblems() []string {
	var out []string
	for _, n := range c.nodes {
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", n.id, err))
			continue
		}
		for _, m := range testutil.LogMarkers {
			if strings.Contains(string(b), m) {
				out = append(out, fmt.Sprintf("%s: log contains %q (%s)", n.id, m, n.logPath))
			}
		}
	}
	return out
}
