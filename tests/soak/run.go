package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Config is one soak run.
type Config struct {
	Bin          string        // the raftlock binary
	Dir          string        // where the CSV files, the plot and the node logs and data go
	Duration     time.Duration // the paced load
	RestartEvery time.Duration // 0: no restarts
	Load         float64       // the pace, as a fraction of the measured capacity
	Measure      time.Duration // the unpaced run that measures the capacity
	Interval     time.Duration // one sample (a CSV row per node) each
	Limits       Limits
	Logf         func(format string, args ...any)
}

// Restart is one node restart, for the record and the plot.
type Restart struct {
	At   time.Duration // since the paced load began
	Node string
	Kill bool          // SIGKILL; else SIGTERM
	Out  time.Duration // from the signal until the node served again
	Err  string        // why it did not serve again in time
}

// Report is what a run recorded and judged.
type Report struct {
	Capacity    float64 // requests per second, unpaced
	Pace        float64 // requests per second the workers were paced at, together
	Figures     Figures
	Restarts    []Restart
	Results     []Result
	Interrupted bool // ctx ended before the run did: Results are empty
	CSV, Plot   string
}

// pubsubSettle bounds the wait, once the load has ended, for every open subscription to deliver
// the last acknowledged message of its channel.
const pubsubSettle = 10 * time.Second

// restartNodes are the nodes restarted in turn. n1 is never restarted: it is the process held
// under load for the whole run, whose figures show what a long life does to one process, while
// its peers' restarts and the leader changes they cause come and go around it.
var restartNodes = []int{1, 2}

// Run starts a 3-node cluster, measures its capacity with the mix unpaced, paces the mix at
// cfg.Load of it for cfg.Duration while restarting a node every cfg.RestartEvery, samples every
// node every cfg.Interval, writes the figures and the plot into cfg.Dir and judges them. Every
// process it starts is stopped before it returns, whatever happened.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	logf := cfg.Logf
	c, err := startCluster(ctx, cfg.Bin, cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := c.stop(); serr != nil && err == nil && ctx.Err() == nil {
			err = fmt.Errorf("stopping the cluster: %w", serr)
		}
	}()
	logf("cluster up: %s %s, %s %s, %s %s (logs %s/n*.log)", c.nodes[0].id, c.nodes[0].addr,
		c.nodes[1].id, c.nodes[1].addr, c.nodes[2].id, c.nodes[2].addr, cfg.Dir)

	rec := newRecorder(len(c.nodes))
	ps := newPubsubTracker(pubChannels)
	setup := newClient(c.nodes[0].addr, 1)
	sha, err := setup.ScriptLoad(ctx, compareAndDelete).Result()
	setup.Close()
	if err != nil {
		return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
	}
	workers := makeWorkers(c, sha)
	defer func() {
		for _, w := range workers {
			w.rdb.Close()
		}
	}()

	// Capacity: the same mix, unpaced.
	logf("measuring capacity: the mix unpaced for %v", cfg.Measure)
	capacity, steps := measure(ctx, workers, cfg.Measure)
	for _, w := range workers {
		w.rec, w.pubsub = rec, ps
	}
	if ctx.Err() != nil {
		return &Report{Interrupted: true}, nil
	}
	rep = &Report{Capacity: capacity, Pace: capacity * cfg.Load}
	logf("capacity %.0f requests/s; pacing at %.0f%%: %.0f requests/s", capacity, 100*cfg.Load, rep.Pace)

	// Subscribers: one per node, on every channel. They outlive the load until the last
	// acknowledged messages arrived (at most pubsubSettle).
	subCtx, stopSubs := context.WithCancel(context.Background())
	var subs sync.WaitGroup
	for _, n := range c.nodes {
		rdb := newClient(n.addr, 1)
		subs.Go(func() {
			defer rdb.Close()
			ps.subscribe(subCtx, rdb, n.id)
		})
	}
	defer func() { stopSubs(); subs.Wait() }()
	sleep(ctx, 2*time.Second) // subscribed before anything is published

	// began is taken first: the load's deadline is then never before its last interval's end.
	began := time.Now()
	loadCtx, stopLoad := context.WithDeadline(ctx, began.Add(cfg.Duration))
	defer stopLoad()
	rec.start(began)
	var wg sync.WaitGroup
	for i, w := range workers {
		every := time.Second // a worker that did nothing unpaced tries once a second
		if rate := cfg.Load * float64(steps[i]) / cfg.Measure.Seconds(); rate > 0 {
			every = time.Duration(float64(time.Second) / rate)
		}
		wg.Go(func() { w.run(loadCtx, every) })
	}

	// Restarts, one node in turn, each node alternating SIGTERM and SIGKILL, half an interval
	// off the samples: no sample is taken in the middle of one.
	var restartsMu sync.Mutex
	if cfg.RestartEvery > 0 {
		wg.Go(func() {
			for i := 0; ; i++ {
				at := began.Add(cfg.RestartEvery*time.Duration(i+1) + cfg.Interval/2)
				if !at.Before(began.Add(cfg.Duration)) {
					return
				}
				sleep(loadCtx, time.Until(at))
				if loadCtx.Err() != nil {
					return // a restart as the load ends would only slow the ending
				}
				// n2 TERM, n3 KILL, n2 KILL, n3 TERM ...: each node alternates the two.
				n := c.nodes[restartNodes[i%len(restartNodes)]]
				kill := (i+i/len(restartNodes))%2 == 1
				restartsMu.Lock()
				rep.Restarts = append(rep.Restarts, Restart{At: time.Since(began), Node: n.id, Kill: kill})
				restartsMu.Unlock()
				out, err := c.restart(loadCtx, n, kill)
				restartsMu.Lock()
				r := &rep.Restarts[len(rep.Restarts)-1]
				r.Out = out
				if err != nil && loadCtx.Err() == nil {
					r.Err = err.Error()
				}
				logf("%v: restarted %s (%s): serving again after %v %s", r.At.Round(time.Second), n.id, how(kill), out.Round(time.Millisecond), r.Err)
				restartsMu.Unlock()
			}
		})
	}

	// Samples, one every interval until the load ends.
	var rows []csvRow
	tick := time.NewTicker(cfg.Interval)
	for sample := 1; ; sample++ {
		select {
		case <-loadCtx.Done():
		case <-tick.C:
		}
		if loadCtx.Err() != nil && time.Since(began) < cfg.Interval*time.Duration(sample)-cfg.Interval/10 {
			break // the load ended (interrupted) well before this interval did
		}
		perNode := rec.swap()
		restartsMu.Lock()
		restarted := restartedIn(rep.Restarts, cfg.Interval*time.Duration(sample-1), cfg.Interval*time.Duration(sample))
		restartsMu.Unlock()
		for i, n := range c.nodes {
			s := n.sample(cfg.Interval)
			s.Sample, s.Restarted = sample, restarted[n.id]
			for _, w := range perNode[i] {
				s.Requests += w.ops
				s.Errors += w.errorCount()
			}
			rep.Figures.Nodes = append(rep.Figures.Nodes, s)
			rows = append(rows, csvRow{at: time.Since(began), node: s, load: loadColumns(perNode[i])})
		}
		fs := familySamples(sample, perNode)
		rep.Figures.Families = append(rep.Figures.Families, fs...)
		rep.Figures.Samples = sample
		logf("%s", progressLine(sample, time.Since(began), rep.Figures.Nodes[len(rep.Figures.Nodes)-len(c.nodes):], fs, cfg.Interval))
		if loadCtx.Err() != nil {
			break
		}
	}
	tick.Stop()
	wg.Wait()
	rep.Figures.Ops, rep.Figures.LongestStall = rec.stop(time.Now())
	// The last acknowledged messages reach the subscribers, or the settle time ends.
	for settle := time.Now().Add(pubsubSettle); ctx.Err() == nil && !ps.caughtUp() && time.Now().Before(settle); {
		sleep(ctx, 100*time.Millisecond)
	}
	stopSubs()
	subs.Wait()
	rep.Figures.PubSub = ps.figures()
	for _, r := range rep.Restarts {
		if r.Err != "" {
			rep.Figures.FailedRestarts = append(rep.Figures.FailedRestarts, fmt.Sprintf("%s at %v: %s", r.Node, r.At.Round(time.Second), r.Err))
		}
	}
	rep.Figures.LogProblems = c.logProblems()
	rep.Figures.Exits = c.exits()

	if err := writeFiles(cfg.Dir, rep, rows, cfg.Interval, cfg.Limits.WarmupIntervals); err != nil {
		return rep, err
	}
	rep.CSV = filepath.Join(cfg.Dir, "soak.csv")
	rep.Plot = filepath.Join(cfg.Dir, "soak.svg")
	if ctx.Err() != nil {
		rep.Interrupted = true
		return rep, nil
	}
	rep.Results = Check(rep.Figures, cfg.Limits)
	return rep, nil
}

// makeWorkers makes the mix's workers, each with its own connection to one node.
func makeWorkers(c *cluster, sha string) []*worker {
	var ws []*worker
	add := func(kind string, node, channel int) {
		name := fmt.Sprintf("%s%d", kind, len(ws))
		ws = append(ws, &worker{name: name, kind: kind, node: node, channel: channel,
			rdb: newClient(c.nodes[node].addr, 1), rng: rand.New(rand.NewPCG(uint64(len(ws)), 0x50a4)),
			sha: sha})
	}
	for node := range c.nodes {
		for _, k := range mix {
			for range k.n {
				add(k.kind, node, 0)
			}
		}
	}
	for ch := range pubChannels {
		add(kindPublisher, ch%len(c.nodes), ch)
	}
	return ws
}

// measure runs the workers unpaced for d and returns the requests answered per second and
// each worker's steps. What they do meanwhile is counted apart from the run's figures.
func measure(ctx context.Context, ws []*worker, d time.Duration) (float64, []int64) {
	counter, unheard := newRecorder(clusterSize), newPubsubTracker(pubChannels)
	for _, w := range ws {
		w.rec, w.pubsub = counter, unheard
	}
	counter.start(time.Now())
	mctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { w.run(mctx, 0) })
	}
	wg.Wait()
	answered, _ := counter.stop(time.Now())
	steps := make([]int64, len(ws))
	for i, w := range ws {
		steps[i] = w.steps.Swap(0)
	}
	return float64(answered) / d.Seconds(), steps
}

func how(kill bool) string {
	if kill {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// restartedIn returns the nodes restarted in [from, to).
func restartedIn(rs []Restart, from, to time.Duration) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		if r.At >= from && r.At < to {
			out[r.Node] = true
		}
	}
	return out
}

// MkdirOut makes dir, or a fresh directory under the system's temporary one if dir is empty.
func MkdirOut(dir string) (string, error) {
	if dir == "" {
		return os.MkdirTemp("", "raftlock-soak-")
	}
	return dir, os.MkdirAll(dir, 0o755)
}
