package soak

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// NodeSample is one node's process at the end of one sampling interval.
type NodeSample struct {
	Sample int    // 1-based interval number
	Node   string // n1, n2, n3
	PID    int
	// Up is false when the node was down (being restarted) when sampled: no figures.
	Up bool
	// Fresh marks a process younger than one interval when sampled: it just restarted, and its
	// figures are those of a start, not of a steady state.
	Fresh bool
	// Restarted marks the interval in which the node was restarted.
	Restarted bool
	// Leader: raftlock_is_leader on its /metrics. A leader runs more goroutines and holds more
	// connections than a follower, so a figure that moves with leadership is not drift.
	Leader     bool
	RSS        uint64 // bytes: process_resident_memory_bytes from its /metrics
	Goroutines int    // go_goroutines from its /metrics; -1 if that could not be read
	OpenFDs    int    // process_open_fds from its /metrics
	// Requests the load sent through this node in the interval, and those that failed.
	Requests, Errors int
}

// FamilySample is one operation family's figures over one interval, every node's clients
// together.
type FamilySample struct {
	Sample         int
	Family         string
	Ops, Errors    int
	P50, P99, P999 time.Duration // over the requests that got a reply
}

// PubSubFigures count messages on subscriptions. Lost counts messages whose PUBLISH was
// acknowledged after a subscription was confirmed and that it never delivered while connected:
// up to the last it delivered, or, open at the end of the run, up to the last acknowledged.
type PubSubFigures struct {
	Published, Received, Lost int64
	ReceivedBy                map[string]int64 // by each node's subscriber
}

// Figures are everything a run recorded that the checks judge.
type Figures struct {
	Samples  int // intervals recorded
	Nodes    []NodeSample
	Families []FamilySample
	PubSub   PubSubFigures
	// Ops is every operation answered during the paced load; LongestStall the longest time in
	// which none was.
	Ops          int64
	LongestStall time.Duration
	// FailedRestarts names each restart after which the node did not serve again in time;
	// LogProblems each node log that shows a panic, a data race or a fatal error.
	FailedRestarts, LogProblems []string
	// Exits says each node process that exited on its own during the run, when and how.
	Exits []string
}

// Limits are the checks' thresholds; doc.go says why each is what it is.
type Limits struct {
	// Growth of a process's figure (or a family's p99) from the first third to the last fails
	// only past both the ratio and the absolute amount.
	RSSRatio        float64
	RSSBytes        uint64
	GoroutineRatio  float64
	Goroutines      int
	FDRatio         float64
	FDs             int
	P99Ratio        float64
	P99Floor        time.Duration // p99 growth below this is never a failure
	MaxStall        time.Duration
	MinFamilyOps    int // intervals in which a family answered fewer are not judged for its p99
	WarmupIntervals int // the first intervals, judged for nothing
}

// DefaultLimits are the thresholds make soak runs with.
func DefaultLimits() Limits {
	return Limits{
		RSSRatio: 1.5, RSSBytes: 64 << 20,
		GoroutineRatio: 1.5, Goroutines: 200,
		FDRatio: 1.5, FDs: 64,
		P99Ratio: 3, P99Floor: 5 * time.Millisecond,
		MaxStall:        30 * time.Second,
		MinFamilyOps:    20,
		WarmupIntervals: 1,
	}
}

// Result is one check's verdict and the figures behind it.
type Result struct {
	Check  string // "rss n1 pid 4242", "p99 set_nx", "pubsub loss" ...
	Failed bool
	// Judged is false when there were too few figures to judge (a process with fewer than six
	// usable samples); such a check neither passes nor fails the run.
	Judged bool
	Detail string
}

func (r Result) String() string {
	verdict := "ok  "
	switch {
	case r.Failed:
		verdict = "FAIL"
	case !r.Judged:
		verdict = "n/a "
	}
	return fmt.Sprintf("%s %-22s %s", verdict, r.Check, r.Detail)
}

// Failed reports whether any result failed.
func Failed(results []Result) bool {
	return slices.ContainsFunc(results, func(r Result) bool { return r.Failed })
}

// Check judges a run's figures against l. For each process (a node and PID: n2 and n3 have one
// per restart) it compares the median of the last third of that process's usable samples with
// the median of the first third, for RSS, goroutines and open files; for each family's p99, the
// median of the run's last third of intervals with its first, leaving out the warm-up and the
// intervals in which a node restarted. It also checks each node's error rate in the last
// third, pub/sub loss and delivery, that the load was served throughout, that no node exited on
// its own, that every restarted node served again, and the node logs.
func Check(f Figures, l Limits) []Result {
	third := f.Samples / 3
	inFirst := func(s int) bool { return s > l.WarmupIntervals && s <= third }
	inLast := func(s int) bool { return s > l.WarmupIntervals && s > f.Samples-third }
	var out []Result

	var nodes []string
	for _, s := range f.Nodes {
		if !slices.Contains(nodes, s.Node) {
			nodes = append(nodes, s.Node)
		}
	}
	slices.Sort(nodes)
	procs := processes(f.Nodes, l.WarmupIntervals)
	longest := 0
	for _, p := range procs {
		longest = max(longest, len(p.usable))
	}
	for _, p := range procs {
		rss := make([]float64, len(p.usable))
		fds := make([]float64, len(p.usable))
		var gor []float64
		for i, s := range p.usable {
			rss[i], fds[i] = float64(s.RSS), float64(s.OpenFDs)
			if s.Goroutines >= 0 {
				gor = append(gor, float64(s.Goroutines))
			}
		}
		name := fmt.Sprintf(" %s pid %d", p.node, p.pid)
		for _, r := range []Result{
			processGrowth("rss"+name, rss, l.RSSRatio, float64(l.RSSBytes), mib),
			processGrowth("goroutines"+name, gor, l.GoroutineRatio, float64(l.Goroutines), count),
			processGrowth("open fds"+name, fds, l.FDRatio, float64(l.FDs), count),
		} {
			// The run was long enough to judge its longest-lived process (n1): a figure of it
			// that could not be judged (never read) leaves a leak unseen, which fails.
			if !r.Judged && len(p.usable) == longest && longest >= minProcessSamples {
				r.Failed, r.Detail = true, "could not judge: "+r.Detail
			}
			out = append(out, r)
		}
	}

	for _, n := range nodes {
		out = append(out, errorRate(f, n, inLast))
	}

	families := []string{}
	for _, s := range f.Families {
		if !slices.Contains(families, s.Family) {
			families = append(families, s.Family)
		}
	}

	// An interval in which a node restarted holds its failover: a spike, not drift.
	restarted := map[int]bool{}
	for _, s := range f.Nodes {
		if s.Restarted {
			restarted[s.Sample] = true
		}
	}
	for _, fam := range families {
		var p99 [2][]float64
		for _, s := range f.Families {
			if s.Family != fam || s.Ops-s.Errors < l.MinFamilyOps || restarted[s.Sample] {
				continue
			}
			for i, in := range []func(int) bool{inFirst, inLast} {
				if in(s.Sample) {
					p99[i] = append(p99[i], float64(s.P99))
				}
			}
		}
		out = append(out, growth("p99 "+fam, p99, l.P99Ratio, float64(l.P99Floor), millis))
	}

	ps := f.PubSub
	out = append(out,
		Result{Check: "pubsub loss", Judged: true, Failed: ps.Lost > 0,
			Detail: fmt.Sprintf("%d lost on subscriptions that stayed connected; %d published (acknowledged), %d received", ps.Lost, ps.Published, ps.Received)},
		pubsubDelivery(ps, nodes),
		Result{Check: "served", Judged: true, Failed: f.Ops == 0 || f.LongestStall > l.MaxStall,
			Detail: fmt.Sprintf("%d operations answered; longest time with none %v (limit %v)", f.Ops, f.LongestStall.Round(time.Millisecond), l.MaxStall)},
		Result{Check: "exits", Judged: true, Failed: len(f.Exits) > 0, Detail: listOr(f.Exits, "no node exited on its own")},
		Result{Check: "restarts", Judged: true, Failed: len(f.FailedRestarts) > 0, Detail: listOr(f.FailedRestarts, "every restarted node served again")},
		Result{Check: "node logs", Judged: true, Failed: len(f.LogProblems) > 0, Detail: listOr(f.LogProblems, "no panic, data race or fatal error")})
	return out
}

// errorRate fails when more than half the requests sent through node in the last third, in
// intervals in which it was up and not restarted, failed.
func errorRate(f Figures, node string, inLast func(int) bool) Result {
	r := Result{Check: "errors " + node}
	requests, errs := 0, 0
	for _, s := range f.Nodes {
		if s.Node == node && s.Up && !s.Restarted && inLast(s.Sample) {
			requests += s.Requests
			errs += s.Errors
		}
	}
	if requests == 0 {
		r.Detail = "no request through it in the last third while it was up and not restarted"
		return r
	}
	r.Judged, r.Failed = true, 2*errs > requests
	r.Detail = fmt.Sprintf("%d of %d requests failed in the last third while it was up and not restarted (fails above half)", errs, requests)
	return r
}

// pubsubDelivery fails when something was published and a node's subscriber received none of it.
func pubsubDelivery(ps PubSubFigures, nodes []string) Result {
	r := Result{Check: "pubsub delivery", Judged: true}
	var by []string
	for _, n := range nodes {
		got := ps.ReceivedBy[n]
		by = append(by, fmt.Sprintf("%s %d", n, got))
		if ps.Published > 0 && got == 0 {
			r.Failed = true
		}
	}
	r.Detail = fmt.Sprintf("received by each node's subscriber: %s; %d published", strings.Join(by, ", "), ps.Published)
	return r
}

// minProcessSamples is how many usable samples a process needs for its growth to be judged:
// two in each third at least.
const minProcessSamples = 6

// process is one node's process (node and PID) and its usable samples, in order: those taken
// while it was up, past the warm-up, leaving out its first interval (a start is not a steady
// state) and any sample taken when it was younger than an interval.
type process struct {
	node   string
	pid    int
	usable []NodeSample
}

// processes groups the samples by process, ordered by node and then by first sample.
func processes(samples []NodeSample, warmup int) []*process {
	var out []*process
	byKey := map[string]*process{}
	for _, s := range samples {
		if !s.Up {
			continue
		}
		key := fmt.Sprintf("%s/%d", s.Node, s.PID)
		p := byKey[key]
		if p == nil {
			// Its first sample closes the interval it started in: left out.
			p = &process{node: s.Node, pid: s.PID}
			byKey[key] = p
			out = append(out, p)
			continue
		}
		if s.Fresh || s.Sample <= warmup {
			continue
		}
		p.usable = append(p.usable, s)
	}
	slices.SortStableFunc(out, func(a, b *process) int { return strings.Compare(a.node, b.node) })
	return out
}

// processGrowth judges one process's figure over its life: the median of the last third of its
// usable samples against the median of the first third.
func processGrowth(name string, vs []float64, ratio, abs float64, unit func(float64) string) Result {
	if len(vs) < minProcessSamples {
		return Result{Check: name, Detail: fmt.Sprintf("too few samples to judge (%d usable, %d needed)", len(vs), minProcessSamples)}
	}
	third := len(vs) / 3
	return growth(name, [2][]float64{slices.Clone(vs[:third]), slices.Clone(vs[len(vs)-third:])}, ratio, abs, unit)
}

// growth compares the medians of the two thirds: it fails when the last is above ratio times
// the first and more than abs above it.
func growth(name string, thirds [2][]float64, ratio, abs float64, unit func(float64) string) Result {
	if len(thirds[0]) == 0 || len(thirds[1]) == 0 {
		return Result{Check: name, Detail: fmt.Sprintf("too few intervals to judge (%d in the first third, %d in the last)", len(thirds[0]), len(thirds[1]))}
	}
	first, last := median(thirds[0]), median(thirds[1])
	r := Result{Check: name, Judged: true, Failed: last > ratio*first && last-first > abs}
	change := "n/a"
	if first > 0 {
		change = fmt.Sprintf("%.2fx", last/first)
	}
	r.Detail = fmt.Sprintf("median %s -> %s (%s; fails above %.1fx and +%s)", unit(first), unit(last), change, ratio, unit(abs))
	return r
}

// median of vs (not empty); vs is sorted in place.
func median(vs []float64) float64 {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func mib(v float64) string    { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func count(v float64) string  { return fmt.Sprintf("%.0f", v) }
func millis(v float64) string { return fmt.Sprintf("%.2f ms", v/float64(time.Millisecond)) }

func listOr(items []string, none string) string {
	if len(items) == 0 {
		return none
	}
	return strings.Join(items, "; ")
}
