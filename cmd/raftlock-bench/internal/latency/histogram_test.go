package latency

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBucketsTileTheRange(t *testing.T) {
	var next uint64
	for i := range numBuckets {
		lo, hi := bounds(i)
		if lo != next {
			t.Fatalf("bucket %d starts at %d, want %d (gap or overlap)", i, lo, next)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if got := index(lo); got != i {
			t.Fatalf("index(%d) = %d, want %d", lo, got, i)
		}
		if got := index(hi); got != i {
			t.Fatalf("index(%d) = %d, want %d", hi, got, i)
		}
		if lo >= subCount {
			if width := hi - lo + 1; float64(width) > float64(lo)/halfCount {
				t.Fatalf("bucket %d [%d, %d] is wider than 1/%d of its lower bound", i, lo, hi, halfCount)
			}
		}
		next = hi + 1
	}
	if got, want := next, uint64(MaxTrackable); got != want {
		t.Fatalf("buckets end at %d, want MaxTrackable %d", got, want)
	}
	for _, v := range []uint64{uint64(MaxTrackable), uint64(MaxTrackable) * 3, math.MaxUint64} {
		if got := index(v); got != numBuckets-1 {
			t.Errorf("index(%d) = %d, want last bucket %d", v, got, numBuckets-1)
		}
	}
}

func TestQuantile(t *testing.T) {
	us := time.Microsecond
	uniform := func(h *Histogram) { // 1 µs .. 1000 µs, one sample each
		for i := 1; i <= 1000; i++ {
			h.Record(time.Duration(i) * us)
		}
	}
	tests := []struct {
		name  string
		fill  func(*Histogram)
		q     float64
		want  time.Duration
		slack time.Duration // accepted overestimate
	}{
		{"empty", func(*Histogram) {}, 0.5, 0, 0},
		{"single value p50", func(h *Histogram) { h.Record(1234567) }, 0.5, 1234567, 0},
		{"single value p999", func(h *Histogram) { h.Record(1234567) }, 0.999, 1234567, 0},
		{"small values exact", func(h *Histogram) {
			for i := range 100 {
				h.Record(time.Duration(i + 1))
			}
		}, 0.5, 50, 0},
		{"uniform p50", uniform, 0.50, 500 * us, 500 * us / 64},
		{"uniform p99", uniform, 0.99, 990 * us, 990 * us / 64},
		{"uniform p999", uniform, 0.999, 999 * us, 999 * us / 64},
		{"uniform q=1 is max", uniform, 1, 1000 * us, 0},
		{"uniform q=0 is min", uniform, 0, 1 * us, 0},
		{"q above 1 clamps", uniform, 7, 1000 * us, 0},
		{"q below 0 clamps", uniform, -1, 1 * us, 0},
		{"tail outlier", func(h *Histogram) {
			h.RecordN(100*us, 999)
			h.Record(5 * time.Second)
		}, 0.999, 100 * us, 100 * us / 64},
		{"tail outlier max", func(h *Histogram) {
			h.RecordN(100*us, 999)
			h.Record(5 * time.Second)
		}, 1, 5 * time.Second, 0},
		{"beyond MaxTrackable keeps max exact", func(h *Histogram) {
			h.Record(10 * time.Minute)
		}, 1, 10 * time.Minute, 0},
		{"negative counts as zero", func(h *Histogram) { h.Record(-5) }, 0.5, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			tt.fill(&h)
			got := h.Quantile(tt.q)
			if got < tt.want || got > tt.want+tt.slack {
				t.Errorf("Quantile(%v) = %v, want %v (+%v)", tt.q, got, tt.want, tt.slack)
			}
		})
	}
}

// TestQuantileMatchesSortedSamples compares every quantile with the exact
// answer from sorted samples: never below it, at most 1/64 above.
func TestQuantileMatchesSortedSamples(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		n := 1 + r.IntN(5000)
		samples := make([]time.Duration, n)
		var h Histogram
		for i := range samples {
			// Log-uniform between 1 ns and ~17 s, like real latencies.
			d := time.Duration(math.Exp(r.Float64() * math.Log(17e9)))
			samples[i] = d
			h.Record(d)
		}
		slices.Sort(samples)
		for _, q := range []float64{0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
			rank := max(int(math.Ceil(q*float64(n))), 1)
			exact := samples[rank-1]
			got := h.Quantile(q)
			if got < exact || float64(got-exact) > float64(exact)/halfCount {
				t.Fatalf("trial %d n=%d: Quantile(%v) = %v, want %v (+1/%d)", trial, n, q, got, exact, halfCount)
			}
		}
		if got, want := h.Min(), samples[0]; got != want {
			t.Fatalf("Min() = %v, want %v", got, want)
		}
		if got, want := h.Max(), samples[n-1]; got != want {
			t.Fatalf("Max() = %v, want %v", got, want)
		}
		if got, want := h.Count(), uint64(n); got != want {
			t.Fatalf("Count() = %d, want %d", got, want)
		}
	}
}

func TestMergeEqualsRecordingIntoOne(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var a, b, all Histogram
	for range 10000 {
		d := time.Duration(r.Int64N(int64(50 * time.Millisecond)))
		all.Record(d)
		if r.IntN(2) == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	var merged Histogram
	merged.Merge(&a)
	merged.Merge(&b)
	merged.Merge(&Histogram{}) // merging an empty histogram changes nothing
	if merged != all {
		t.Errorf("merged histogram differs: count %d min %v max %v mean %v, want count %d min %v max %v mean %v",
			merged.Count(), merged.Min(), merged.Max(), merged.Mean(),
			all.Count(), all.Min(), all.Max(), all.Mean())
	}
}

func TestMean(t *testing.T) {
	var h Histogram
	if got := h.Mean(); got != 0 {
		t.Errorf("empty Mean() = %v, want 0", got)
	}
	h.Record(10 * time.Microsecond)
	h.RecordN(20*time.Microsecond, 3)
	h.RecordN(time.Hour, 0) // no samples: ignored
	if got, want := h.Mean(), 17500*time.Nanosecond; got != want {
		t.Errorf("Mean() = %v, want %v", got, want)
	}
	if got, want := h.Max(), 20*time.Microsecond; got != want {
		t.Errorf("Max() = %v, want %v", got, want)
	}
}
