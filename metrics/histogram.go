// Package metrics holds raftlock's instruments: fixed-bucket histograms that the store, raftnode
// and server feed on their hot paths, and the point-in-time snapshots of them that the node's
// typed Stats carry to INFO, /metrics and the status page. An observation costs two atomic adds
// and no allocation or lock. It imports nothing of ours, so every layer may use it.
package metrics

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// MaxBuckets bounds a Scale's bounded buckets (a Snapshot is a fixed array: copying one
// allocates nothing).
const MaxBuckets = 24

// Scale is a histogram's bucket layout: bucket i holds the values up to Base<<i (in raw units),
// for i below Buckets; one more bucket holds the rest (+Inf). A raw value divided by PerUnit is
// in the unit the histogram is exported in (1e9: nanoseconds observed, seconds exported).
type Scale struct {
	Base    uint64
	Buckets int
	PerUnit float64
}

var (
	// Latency is the layout of every latency histogram: 10 µs to about 21 s, doubling.
	Latency = Scale{Base: uint64(10 * time.Microsecond), Buckets: 22, PerUnit: 1e9}
	// Sizes is the layout of count histograms (entries per batch): 1 to 2048, doubling.
	Sizes = Scale{Base: 1, Buckets: 12, PerUnit: 1}
)

// Histogram counts observations into a Scale's buckets. Make one with NewHistogram; a nil
// *Histogram observes nothing and snapshots empty (a Node built by hand in a test has none). It
// is safe for concurrent use.
type Histogram struct {
	scale  Scale
	counts [MaxBuckets + 1]atomic.Uint64 // per bucket; counts[scale.Buckets] is +Inf
	sum    atomic.Uint64                 // raw units
}

// NewHistogram returns an empty histogram of scale s. It panics if s has no buckets or more
// than MaxBuckets, or a zero Base: a programming error in a package-level layout.
func NewHistogram(s Scale) *Histogram {
	if s.Buckets <= 0 || s.Buckets > MaxBuckets || s.Base == 0 || s.PerUnit <= 0 {
		panic("metrics: invalid histogram scale")
	}
	return &Histogram{scale: s}
}

// Observe records v (raw units).
func (h *Histogram) Observe(v uint64) {
	if h == nil {
		return
	}
	h.counts[h.scale.bucket(v)].Add(1)
	h.sum.Add(v)
}

// ObserveDuration records d (a Latency histogram: nanoseconds); a negative d counts as 0.
func (h *Histogram) ObserveDuration(d time.Duration) { h.Observe(uint64(max(d, 0))) }

// Since records the time since start.
func (h *Histogram) Since(start time.Time) { h.ObserveDuration(time.Since(start)) }

// bucket is the index of the bucket v falls in: the smallest i with v <= Base<<i, or Buckets.
func (s Scale) bucket(v uint64) int {
	if v <= s.Base {
		return 0
	}
	// v in (Base<<(i-1), Base<<i] <=> (v-1)/Base in [2^(i-1), 2^i): its bit length is i.
	i := bits.Len64((v - 1) / s.Base)
	return min(i, s.Buckets)
}

// Snapshot is a histogram's counts at one moment. Counts are per bucket, not cumulative.
type Snapshot struct {
	Scale  Scale
	Counts [MaxBuckets + 1]uint64 // Counts[Scale.Buckets] is the +Inf bucket
	Sum    uint64                 // raw units
}

// Snapshot copies the counts. Observations racing it may be in a bucket and not yet in the
// sum; Count is the buckets' total, so the exported _count always equals the +Inf bucket.
func (h *Histogram) Snapshot() Snapshot {
	if h == nil {
		return Snapshot{}
	}
	s := Snapshot{Scale: h.scale}
	for i := 0; i <= h.scale.Buckets; i++ {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = h.sum.Load()
	return s
}

// Count is the number of observations.
func (s Snapshot) Count() uint64 {
	var n uint64
	for i := 0; i <= s.Scale.Buckets; i++ {
		n += s.Counts[i]
	}
	return n
}

// UpperBound is bucket i's upper bound in the exported unit (i < Scale.Buckets).
func (s Snapshot) UpperBound(i int) float64 { return float64(s.Scale.Base<<i) / s.Scale.PerUnit }

// SumValue is the sum in the exported unit (0 for the zero Snapshot).
func (s Snapshot) SumValue() float64 {
	if s.Scale.PerUnit == 0 {
		return 0
	}
	return float64(s.Sum) / s.Scale.PerUnit
}

// Quantile estimates the q-quantile (0 < q <= 1) in the exported unit, as Prometheus's
// histogram_quantile does: linearly within the bucket that holds it. It returns 0 with no
// observations, and the largest bound when the quantile is past it.
func (s Snapshot) Quantile(q float64) float64 {
	total := s.Count()
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen float64
	for i := 0; i < s.Scale.Buckets; i++ {
		c := float64(s.Counts[i])
		if seen+c >= rank && c > 0 {
			lo := 0.0
			if i > 0 {
				lo = s.UpperBound(i - 1)
			}
			return lo + (s.UpperBound(i)-lo)*(rank-seen)/c
		}
		seen += c
	}
	return s.UpperBound(s.Scale.Buckets - 1)
}

// Sub is the observations made between earlier and s (both of one histogram): a rate over a
// window.
func (s Snapshot) Sub(earlier Snapshot) Snapshot {
	d := s
	for i := range d.Counts {
		d.Counts[i] -= min(earlier.Counts[i], d.Counts[i])
	}
	d.Sum -= min(earlier.Sum, d.Sum)
	return d
}
