package main

import (
	"sort"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-bench/internal/latency"
)

// sample is one grant: when its reply arrived (from the start of the run)
// and how long it took.
type sample struct {
	done time.Duration
	lat  time.Duration
}

// phase is a named stretch of a run, [Start, End) from the run's start.
type phase struct {
	Name       string
	Start, End time.Duration
}

// PhaseStats is what the grants completed within one phase show.
type PhaseStats struct {
	Name       string
	Start, End time.Duration
	Grants     uint64
	// PerSec is Grants over the phase's length.
	PerSec float64
	P50    time.Duration
	P99    time.Duration
	P999   time.Duration
	Max    time.Duration
	// MinWindowPerSec is the rate in the slowest whole window of the phase:
	// a stall shows here even when the phase's average hides it. -1 when the
	// phase is shorter than one window.
	MinWindowPerSec float64
}

// summarize sorts samples into phases by completion time (a grant held up
// by an expiry wave ends during the wave, or after it, and counts there) and
// summarizes each. phases must be in order and not overlap; samples outside
// every phase are ignored.
func summarize(samples []sample, phases []phase, window time.Duration) []PhaseStats {
	hists := make([]latency.Histogram, len(phases))
	windows := make([][]uint64, len(phases))
	for i, p := range phases {
		if window > 0 && p.End > p.Start {
			windows[i] = make([]uint64, (p.End-p.Start)/window)
		}
	}
	for _, s := range samples {
		// The first phase ending after s.done, if it has begun by then.
		i := sort.Search(len(phases), func(i int) bool { return phases[i].End > s.done })
		if i == len(phases) || s.done < phases[i].Start {
			continue
		}
		hists[i].Record(s.lat)
		if k := int((s.done - phases[i].Start) / window); window > 0 && k < len(windows[i]) {
			windows[i][k]++
		}
	}
	out := make([]PhaseStats, len(phases))
	for i, p := range phases {
		h := &hists[i]
		st := PhaseStats{
			Name: p.Name, Start: p.Start, End: p.End, Grants: h.Count(),
			P50: h.Quantile(0.5), P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max(),
			MinWindowPerSec: -1,
		}
		if d := p.End - p.Start; d > 0 {
			st.PerSec = float64(h.Count()) / d.Seconds()
		}
		for k, n := range windows[i] {
			if r := float64(n) / window.Seconds(); k == 0 || r < st.MinWindowPerSec {
				st.MinWindowPerSec = r
			}
		}
		out[i] = st
	}
	return out
}
