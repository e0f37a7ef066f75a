// Package stats holds the benchmark's arithmetic: latency percentiles over
// weighted samples and medians over runs.
package stats

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Samples is a set of latencies, each standing for n operations: a
// pipelined batch is timed once, and every operation it carried is charged
// the batch's round trip. The zero value is empty and ready to use. It is
// not safe for concurrent use: give each goroutine its own and Merge them.
type Samples struct {
	s      []sample
	total  uint64
	sorted bool
}

type sample struct {
	d time.Duration
	n uint64
}

// Add records n operations that each took d. n <= 0 records nothing.
func (s *Samples) Add(d time.Duration, n int) {
	if n <= 0 {
		return
	}
	s.s = append(s.s, sample{d, uint64(n)})
	s.total += uint64(n)
	s.sorted = false
}

// Merge adds every sample of o to s.
func (s *Samples) Merge(o *Samples) {
	s.s = append(s.s, o.s...)
	s.total += o.total
	s.sorted = false
}

// Count returns the number of operations recorded.
func (s *Samples) Count() uint64 { return s.total }

// Quantile returns the nearest-rank quantile: the smallest latency d such
// that at least ceil(q*Count()) operations took d or less. q is clamped to
// [0, 1]; Quantile(0) is the fastest operation. An empty set returns 0.
func (s *Samples) Quantile(q float64) time.Duration {
	if s.total == 0 {
		return 0
	}
	if !s.sorted {
		slices.SortFunc(s.s, func(a, b sample) int { return cmp.Compare(a.d, b.d) })
		s.sorted = true
	}
	q = min(max(q, 0), 1)
	rank := max(uint64(math.Ceil(q*float64(s.total))), 1)
	var seen uint64
	for _, x := range s.s {
		seen += x.n
		if seen >= rank {
			return x.d
		}
	}
	return s.s[len(s.s)-1].d // unreachable: the weights sum to total
}

// Median returns the middle value of xs (the mean of the two middle values
// when there is an even number), or NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	c := slices.Clone(xs)
	slices.Sort(c)
	m := len(c) / 2
	if len(c)%2 == 1 {
		return c[m]
	}
	return (c[m-1] + c[m]) / 2
}
