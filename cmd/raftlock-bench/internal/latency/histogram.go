// Package latency records durations in a fixed-size, log-linear histogram
// (the HdrHistogram bucket layout) and answers percentile queries on it.
//
// Values below 128 ns are kept exactly. Above that, every power-of-two range
// is split into 64 equal buckets, so a bucket is at most 1/64 (1.6%) of its
// lower bound wide. Values at or above MaxTrackable are counted in the last
// bucket; Max still reports them exactly.
package latency

import (
	"math"
	"math/bits"
	"time"
)

const (
	subBits    = 7
	subCount   = 1 << subBits // values below subCount have a bucket each
	halfCount  = subCount / 2 // buckets per power of two above subCount
	maxShift   = 30
	numBuckets = subCount + maxShift*halfCount
)

// MaxTrackable is the smallest duration that no longer has a bucket of its
// own: larger values all fall into the last bucket (about 137 s).
const MaxTrackable = time.Duration(uint64(1) << (subBits + maxShift))

// Histogram counts durations. The zero value is empty and ready to use. A
// Histogram is not safe for concurrent use: give each goroutine its own and
// Merge them at the end. It occupies 16 KiB and never grows.
type Histogram struct {
	counts [numBuckets]uint64
	total  uint64
	sum    uint64 // nanoseconds; overflows only after ~584 years of samples
	min    time.Duration
	max    time.Duration
}

// Record adds one sample. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) { h.RecordN(d, 1) }

// RecordN adds n samples of the same duration.
func (h *Histogram) RecordN(d time.Duration, n uint64) {
	if n == 0 {
		return
	}
	if d < 0 {
		d = 0
	}
	h.counts[index(uint64(d))] += n
	if h.total == 0 || d < h.min {
		h.min = d
	}
	if d > h.max {
		h.max = d
	}
	h.total += n
	h.sum += uint64(d) * n
}

// Merge adds all samples of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.total += o.total
	h.sum += o.sum
}

// Count returns the number of samples.
func (h *Histogram) Count() uint64 { return h.total }

// Min returns the smallest sample, exactly; 0 if empty.
func (h *Histogram) Min() time.Duration { return h.min }

// Max returns the largest sample, exactly; 0 if empty.
func (h *Histogram) Max() time.Duration { return h.max }

// Mean returns the arithmetic mean of the samples; 0 if empty.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / h.total)
}

// Quantile returns the value at quantile q (0.5 for the median, 0.999 for
// p99.9): the upper bound of the bucket holding the sample of rank
// ceil(q*Count()), clamped to [Min, Max]. The result is never below the true
// sample and at most 1/64 above it. Quantile(0) is Min and Quantile(1) is
// Max, exactly; q outside [0, 1] is clamped. An empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	switch {
	case h.total == 0:
		return 0
	case q <= 0 || math.IsNaN(q):
		return h.min
	case q >= 1:
		return h.max
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bounds(i)
			d := time.Duration(hi)
			return min(max(d, h.min), h.max)
		}
	}
	return h.max // unreachable: the counts sum to total
}

// index returns the bucket of value v.
func index(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits // >= 1; v>>shift is in [halfCount, subCount)
	if shift > maxShift {
		return numBuckets - 1
	}
	return subCount + (shift-1)*halfCount + int(v>>shift) - halfCount
}

// bounds returns the smallest and largest value of bucket i.
func bounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := (i-subCount)/halfCount + 1
	top := uint64((i-subCount)%halfCount + halfCount)
	lo = top << shift
	return lo, lo + (uint64(1) << shift) - 1
}
