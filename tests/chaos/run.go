package chaos

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config is one chaos run.
type Config struct {
	Bin       string        // raftlock binary
	Dir       string        // parent of the run folder
	Seed      uint64        // drives faults and clients
	Nodes     int           // cluster size (3 or 5)
	Clients   int           // concurrent workload clients
	Duration  time.Duration // workload time under faults
	SlowLinks bool          // add slow-link faults
	Snapshots bool          // run nodes with tiny snapshot thresholds
	Logf      func(format string, args ...any)
}

// Result is what a run found.
type Result struct {
	Ops, Faults, Unknown int
	Violations           []string
	Inconclusive         []string // keys porcupine could not decide in time
	Folder               string   // set when the run failed: history, visualizations, logs
}

// Summary is the one-line summary of a run.
func (r Result) Summary() string {
	return fmt.Sprintf("chaos: ops=%d faults=%d unknown=%d violations=%d", r.Ops, r.Faults, r.Unknown, len(r.Violations))
}

// Run starts a cluster, runs the workload under faults, heals, checks, and stops the cluster.
func Run(cfg Config) (res Result, err error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Clients == 0 {
		cfg.Clients = 6
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	root := filepath.Join(cfg.Dir, fmt.Sprintf("chaos-seed%d-%s", cfg.Seed, time.Now().Format("150405.000")))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return res, err
	}
	var extra []string
	if cfg.Snapshots {
		extra = []string{"--snapshot-threshold", "64", "--trailing-logs", "32", "--snapshot-interval", "1s"}
	}
	c, err := startCluster(cfg.Bin, root, cfg.Nodes, extra, logf)
	if err != nil {
		return res, err
	}
	rec := newRecorder(cfg.Seed)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73))
	var addrMu sync.Mutex
	addrs := func() []string {
		addrMu.Lock()
		defer addrMu.Unlock()
		out := make([]string, len(c.nodes))
		for i, n := range c.nodes {
			out[i] = n.clientAddr
		}
		return out
	}
	keyOf := func(r *rand.Rand) string {
		return fmt.Sprintf("k%d.%d", rec.now()/int64(10*time.Second), r.IntN(3))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i+1))), rec: rec, addrs: addrs,
			node: i, stop: &stop, keyOf: keyOf}
		wg.Add(1)
		go func() { defer wg.Done(); w.run() }()
	}

	// faults, one at a time
	end := time.Now().Add(cfg.Duration)
	nfaults := 0
	for time.Now().Add(2 * time.Second).Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		if !time.Now().Before(end) {
			break
		}
		f := injectFault(c, rng, rec, cfg, logf)
		rec.fault(f)
		nfaults++
	}
	if d := time.Until(end); d > 0 {
		time.Sleep(d)
	}
	stop.Store(true)
	wg.Wait()
	healAll(c, logf)
	healedAt := time.Now()

	var violations []string
	// recovery: a fresh acquire succeeds within 10 s of the last heal
	if err := freshAcquire(c, healedAt.Add(10*time.Second)); err != nil {
		violations = append(violations, "recovery: "+err.Error())
	}
	// convergence: every node's table digest equal
	if d, err := converge(c, 20*time.Second); err != nil {
		violations = append(violations, fmt.Sprintf("convergence: %v (last digests %v)", err, d))
	}
	if err := c.stop(); err != nil {
		violations = append(violations, "stop: "+err.Error())
	}
	c.net.mu.Lock()
	logf("proxy: %d raft connections from identified nodes, %d from unknown sources", c.net.knownSrc, c.net.unknownSrc)
	if c.net.unknownSrc > 0 {
		violations = append(violations, fmt.Sprintf("harness: %d raft connections came from an unknown source IP: link faults cannot be directed", c.net.unknownSrc))
	}
	c.net.mu.Unlock()
	var logs []string
	for _, n := range c.nodes {
		logs = append(logs, n.logPath)
	}
	violations = append(violations, checkLogs(logs)...)

	h := rec.h
	res.Ops, res.Faults = len(h.Ops), nfaults
	for _, op := range h.Ops {
		if op.Outcome == Unknown {
			res.Unknown++
		}
	}
	violations = append(violations, checkFencing(h.Ops)...)
	violations = append(violations, checkResource(h.Writes)...)
	lin := checkLinearizable(h.Ops, 60*time.Second)
	var badKeys []LinResult
	for _, l := range lin {
		switch l.Result {
		case porcupine.Illegal:
			violations = append(violations, "linearizability: key "+l.Key+" has no linearization")
			badKeys = append(badKeys, l)
		case porcupine.Unknown:
			res.Inconclusive = append(res.Inconclusive, l.Key)
		}
	}
	res.Violations = violations
	if len(violations) == 0 {
		os.RemoveAll(root)
		return res, nil
	}
	res.Folder = root
	writeFailure(root, h, badKeys, violations, c)
	return res, nil
}

// writeFailure puts the history, the visualizations of failing keys and the violations next to
// the node logs, and drops the data directories.
func writeFailure(root string, h History, bad []LinResult, violations []string, c *cluster) {
	if b, err := json.MarshalIndent(h, "", " "); err == nil {
		os.WriteFile(filepath.Join(root, "history.json"), b, 0o644)
	}
	os.WriteFile(filepath.Join(root, "violations.txt"), []byte(strings.Join(violations, "\n")+"\n"), 0o644)
	model := lockModel.ToModel()
	for _, l := range bad {
		porcupine.VisualizePath(model, l.Info, filepath.Join(root, "lin-"+l.Key+".html"))
	}
	for _, n := range c.nodes {
		os.RemoveAll(filepath.Dir(n.dir) + "/data")
	}
}

// injectFault runs one fault to its end (heal included) and returns its record.
func injectFault(c *cluster, rng *rand.Rand, rec *recorder, cfg Config, logf func(string, ...any)) Fault {
	kinds := []string{"partition-leader", "partition-minority", "pause", "kill"}
	if cfg.SlowLinks {
		kinds = append(kinds, "slow")
	}
	kind := kinds[rng.IntN(len(kinds))]
	f := Fault{Kind: kind, Start: rec.now()}
	n := len(c.nodes)
	pick := func() int {
		if rng.IntN(2) == 0 {
			if l := c.leader(); l >= 0 {
				return l
			}
		}
		return rng.IntN(n)
	}
	switch kind {
	case "partition-leader", "partition-minority":
		var minority []int
		if kind == "partition-leader" {
			l := c.leader()
			if l < 0 {
				l = rng.IntN(n)
			}
			minority = []int{l}
		} else {
			perm := rng.Perm(n)
			minority = perm[:(n-1)/2]
		}
		var majority []int
		for i := range n {
			if !containsInt(minority, i) {
				majority = append(majority, i)
			}
		}
		c.net.isolate(minority, majority)
		hold := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		f.Desc = fmt.Sprintf("isolate %v from %v for %v", minority, majority, hold)
		time.Sleep(hold)
		c.net.heal()
	case "pause":
		i := pick()
		hold := time.Duration(1000+rng.IntN(2000)) * time.Millisecond
		f.Desc = fmt.Sprintf("SIGSTOP %s for %v", c.nodes[i].id, hold)
		c.nodes[i].pause()
		time.Sleep(hold)
		c.nodes[i].resume()
	case "kill":
		i := pick()
		down := time.Duration(500+rng.IntN(2500)) * time.Millisecond
		f.Desc = fmt.Sprintf("kill -9 %s, restart after %v", c.nodes[i].id, down)
		c.nodes[i].kill9()
		time.Sleep(down)
		if err := c.nodes[i].start(c.bin); err != nil {
			f.Desc += " (restart failed: " + err.Error() + ")"
		}
	case "slow":
		i := rng.IntN(n)
		d := time.Duration(20+rng.IntN(180)) * time.Millisecond
		hold := time.Duration(2000+rng.IntN(4000)) * time.Millisecond
		for j := range n {
			if j != i {
				c.net.setDelay(i, j, d)
				c.net.setDelay(j, i, d)
			}
		}
		f.Desc = fmt.Sprintf("slow links of %s (~%v per chunk) for %v", c.nodes[i].id, d, hold)
		time.Sleep(hold)
		c.net.heal()
	}
	f.End = rec.now()
	logf("fault %s: %s", kind, f.Desc)
	return f
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// healAll removes network faults, resumes paused nodes and restarts dead ones.
func healAll(c *cluster, logf func(string, ...any)) {
	c.net.heal()
	for _, n := range c.nodes {
		if n.paused {
			n.resume()
		}
		if !n.running() {
			if err := n.start(c.bin); err != nil {
				logf("heal: restart %s: %v", n.id, err)
			}
		}
	}
}

// freshAcquire takes a new key through any node before deadline.
func freshAcquire(c *cluster, deadline time.Time) error {
	key := fmt.Sprintf("fresh-%d", time.Now().UnixNano())
	var last error
	for i := 0; time.Now().Before(deadline); i++ {
		n := c.nodes[i%len(c.nodes)]
		v, err := query(n.clientAddr, "LOCK", key, "5000", "OWNER", "fresh")
		if err == nil {
			if t, ok := asInt(v); ok && t > 0 {
				return nil
			}
			err = fmt.Errorf("reply %#v", v)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no fresh acquire within 10s of the last heal: %v", last)
}

// converge waits until every node reports the same digest.
func converge(c *cluster, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	var d []string
	var err error
	for time.Now().Before(deadline) {
		d, err = c.digests()
		if err == nil && len(d) == len(c.nodes) {
			same := true
			for _, x := range d[1:] {
				if x[strings.Index(x, ":"):] != d[0][strings.Index(d[0], ":"):] {
					same = false
				}
			}
			if same {
				return d, nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		err = fmt.Errorf("digests differ after %v", timeout)
	}
	return d, err
}
