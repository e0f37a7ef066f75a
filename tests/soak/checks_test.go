package soak

import (
	"strings"
	"testing"
	"time"
)

// flat is a run of 30 intervals whose figures do not move: three nodes at 60 MiB, 150
// goroutines and 40 open files, two families at a steady p99, every message delivered.
func flat() Figures {
	f := Figures{Samples: 30, Ops: 900000, LongestStall: 3 * time.Second,
		PubSub: PubSubFigures{Published: 18000, Received: 54000, ReceivedBy: map[string]int64{"n1": 18000, "n2": 18000, "n3": 18000}}}
	for s := 1; s <= f.Samples; s++ {
		for _, n := range []string{"n1", "n2", "n3"} {
			f.Nodes = append(f.Nodes, NodeSample{Sample: s, Node: n, PID: 100, Up: true, RSS: 60 << 20, Goroutines: 150, OpenFDs: 40, Requests: 3000, Errors: 5})
		}
		for _, fam := range []string{"lock_wait", "set_nx"} {
			f.Families = append(f.Families, FamilySample{Sample: s, Family: fam, Ops: 5000, P50: time.Millisecond, P99: 8 * time.Millisecond, P999: 20 * time.Millisecond})
		}
	}
	return f
}

// ramp makes the figure set grow linearly from its flat value to to over the run.
func ramp(f *Figures, node string, set func(s *NodeSample, x float64)) {
	for i := range f.Nodes {
		if f.Nodes[i].Node == node {
			set(&f.Nodes[i], float64(f.Nodes[i].Sample-1)/float64(f.Samples-1))
		}
	}
}

// restart gives node a new process (PID 200, 201 ...) at each of the samples at: the sample
// that closes the interval of a restart is its new process's first, fresh. It returns, for
// each sample of node, how many samples its process had lived before it.
func restart(f *Figures, node string, at ...int) map[int]int {
	age := map[int]int{}
	for i := range f.Nodes {
		s := &f.Nodes[i]
		if s.Node != node {
			continue
		}
		life, start := 0, 1
		for j, r := range at {
			if s.Sample >= r {
				life, start = j+1, r
			}
		}
		if life > 0 {
			s.PID = 200 + life - 1
			s.Fresh = s.Sample == start
			s.Restarted = s.Sample == start
		}
		age[s.Sample] = s.Sample - start
	}
	return age
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(f *Figures)
		fails  []string // the checks that must fail; every other must pass
	}{
		{"flat", func(*Figures) {}, nil},
		{"rss grows 60 -> 200 MiB on n2", func(f *Figures) {
			ramp(f, "n2", func(s *NodeSample, x float64) { s.RSS = uint64((60 + 140*x) * (1 << 20)) })
		}, []string{"rss n2 pid 100"}},
		{"rss doubles but by less than 64 MiB", func(f *Figures) {
			ramp(f, "n1", func(s *NodeSample, x float64) { s.RSS = uint64((30 + 40*x) * (1 << 20)) })
		}, nil},
		{"goroutines 150 -> 900 on n1", func(f *Figures) {
			ramp(f, "n1", func(s *NodeSample, x float64) { s.Goroutines = int(150 + 750*x) })
		}, []string{"goroutines n1 pid 100"}},
		{"goroutines +150 only", func(f *Figures) {
			ramp(f, "n1", func(s *NodeSample, x float64) { s.Goroutines = int(100 + 150*x) })
		}, nil},
		{"open fds 40 -> 300 on n3", func(f *Figures) {
			ramp(f, "n3", func(s *NodeSample, x float64) { s.OpenFDs = int(40 + 260*x) })
		}, []string{"open fds n3 pid 100"}},
		{"p99 of set_nx 8 -> 40 ms", func(f *Figures) {
			for i := range f.Families {
				if f.Families[i].Family == "set_nx" && f.Families[i].Sample > 20 {
					f.Families[i].P99 = 40 * time.Millisecond
				}
			}
		}, []string{"p99 set_nx"}},
		{"p99 triples but stays under the floor", func(f *Figures) {
			for i := range f.Families {
				f.Families[i].P99 = time.Millisecond
				if f.Families[i].Sample > 20 {
					f.Families[i].P99 = 4 * time.Millisecond
				}
			}
		}, nil},
		{"a spike in a few intervals is not drift", func(f *Figures) {
			for i := range f.Families {
				if s := f.Families[i].Sample; s == 22 || s == 25 || s == 29 {
					f.Families[i].P99 = time.Second
				}
			}
			for i := range f.Nodes {
				if s := f.Nodes[i].Sample; s == 24 || s == 27 {
					f.Nodes[i].RSS, f.Nodes[i].Goroutines, f.Nodes[i].OpenFDs = 900<<20, 5000, 900
				}
			}
		}, nil},
		{"the p99 of intervals with a restart is left out", func(f *Figures) {
			// Half the last third's intervals hold a restart and its failover.
			for i := range f.Nodes {
				if s := &f.Nodes[i]; s.Node == "n2" && s.Sample > 20 && s.Sample%2 == 1 {
					s.Restarted = true
				}
			}
			for i := range f.Families {
				if s := &f.Families[i]; s.Sample > 20 && s.Sample%2 == 1 {
					s.P99 = 100 * time.Millisecond
				}
			}
		}, nil},
		{"warm-up and fresh processes are left out", func(f *Figures) {
			for i := range f.Nodes {
				// Low figures right after a start would make the steady state look like growth.
				if s := &f.Nodes[i]; s.Sample == 1 || (s.Node == "n2" && s.Sample >= 4 && s.Sample <= 6) {
					s.RSS, s.Goroutines, s.OpenFDs, s.Fresh = 4<<20, 10, 8, s.Sample != 1
				}
			}
			for i := range f.Nodes {
				if s := &f.Nodes[i]; s.Node == "n3" && s.Sample == 7 {
					s.Up, s.RSS, s.Goroutines, s.OpenFDs = false, 0, 0, 0
				}
			}
		}, nil},
		{"n2 restarted, flat", func(f *Figures) { restart(f, "n2", 11, 21) }, nil},
		{"a leak on n2 that each restart resets", func(f *Figures) {
			// Every process of n2 grows 15 MiB an interval from 60 MiB; each third of the run
			// holds processes of every age, so only a process's own life shows the growth.
			age := restart(f, "n2", 11, 21)
			for i := range f.Nodes {
				if s := &f.Nodes[i]; s.Node == "n2" {
					s.RSS = uint64(60+15*age[s.Sample]) << 20
				}
			}
		}, []string{"rss n2 pid 100", "rss n2 pid 200", "rss n2 pid 201"}},
		{"goroutines of n1 never read", func(f *Figures) {
			for i := range f.Nodes {
				if f.Nodes[i].Node == "n1" {
					f.Nodes[i].Goroutines = -1
				}
			}
		}, []string{"goroutines n1 pid 100"}},
		{"most requests through n3 fail at the end", func(f *Figures) {
			for i := range f.Nodes {
				if s := &f.Nodes[i]; s.Node == "n3" && s.Sample > 20 {
					s.Errors = 2000
				}
			}
		}, []string{"errors n3"}},
		{"requests fail only while n3 restarts", func(f *Figures) {
			for i := range f.Nodes {
				if s := &f.Nodes[i]; s.Node == "n3" && s.Sample > 20 && s.Sample%3 == 0 {
					s.Restarted, s.Errors = true, 3000
				} else if s.Node == "n3" && s.Sample == 29 {
					s.Up = false
				}
			}
		}, nil},
		{"a message lost", func(f *Figures) { f.PubSub.Lost = 1 }, []string{"pubsub loss"}},
		{"nothing delivered", func(f *Figures) { f.PubSub.Received, f.PubSub.ReceivedBy = 0, nil }, []string{"pubsub delivery"}},
		{"n3's subscriber received nothing", func(f *Figures) {
			f.PubSub.Received, f.PubSub.ReceivedBy = 36000, map[string]int64{"n1": 18000, "n2": 18000}
		}, []string{"pubsub delivery"}},
		{"the load stalled 45 s", func(f *Figures) { f.LongestStall = 45 * time.Second }, []string{"served"}},
		{"nothing served", func(f *Figures) { f.Ops = 0 }, []string{"served"}},
		{"a node did not come back", func(f *Figures) { f.FailedRestarts = []string{"n2 at 8m0s: not ready after 60s"} }, []string{"restarts"}},
		{"a node exited on its own", func(f *Figures) {
			f.Exits = []string{"n2 exited on its own at 19:40:12 (status exit status 1)"}
		}, []string{"exits"}},
		{"a panic in a log", func(f *Figures) { f.LogProblems = []string{`n1: log contains "panic:"`} }, []string{"node logs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := flat()
			tt.change(&f)
			results := Check(f, DefaultLimits())
			var failed []string
			for _, r := range results {
				if !r.Judged && !r.Failed {
					t.Errorf("%s not judged on 30 intervals: %s", r.Check, r.Detail)
				}
				if r.Failed {
					failed = append(failed, r.Check)
				}
			}
			if strings.Join(failed, ",") != strings.Join(tt.fails, ",") {
				t.Errorf("failed checks %q, want %q", failed, tt.fails)
				for _, r := range results {
					t.Log(r)
				}
			}
			if Failed(results) != (len(tt.fails) > 0) {
				t.Errorf("Failed = %v, want %v", Failed(results), len(tt.fails) > 0)
			}
		})
	}
}

// A run too short for thirds judges no growth and no error rate, and says so, without failing: even a figure
// never read.
func TestCheckShortRun(t *testing.T) {
	f := flat()
	f.Samples = 2
	var nodes []NodeSample
	for _, s := range f.Nodes {
		if s.Sample <= 2 {
			nodes = append(nodes, s)
		}
	}
	f.Nodes = nodes
	f.Nodes[0].Goroutines = -1
	for _, r := range Check(f, DefaultLimits()) {
		byThirds := strings.HasPrefix(r.Check, "rss") || strings.HasPrefix(r.Check, "goroutines") ||
			strings.HasPrefix(r.Check, "open fds") || strings.HasPrefix(r.Check, "p99") || strings.HasPrefix(r.Check, "errors")
		if r.Failed || r.Judged == byThirds {
			t.Errorf("%v: judged %v, want %v", r, r.Judged, !byThirds)
		}
	}
}
