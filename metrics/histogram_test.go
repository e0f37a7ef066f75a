package metrics

import (
	"sync"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	s := Scale{Base: 10, Buckets: 4, PerUnit: 1} // bounds 10, 20, 40, 80, +Inf
	for _, tc := range []struct {
		v    uint64
		want int
	}{
		{0, 0}, {1, 0}, {10, 0}, {11, 1}, {20, 1}, {21, 2}, {40, 2}, {41, 3}, {80, 3}, {81, 4}, {1 << 62, 4},
	} {
		if got := s.bucket(tc.v); got != tc.want {
			t.Errorf("bucket(%d) = %d, want %d", tc.v, got, tc.want)
		}
	}
}

func TestSnapshot(t *testing.T) {
	h := NewHistogram(Latency)
	h.ObserveDuration(5 * time.Microsecond)  // bucket 0 (<= 10 µs)
	h.ObserveDuration(15 * time.Microsecond) // bucket 1 (<= 20 µs)
	h.ObserveDuration(15 * time.Microsecond) // bucket 1
	h.ObserveDuration(time.Hour)             // +Inf
	h.ObserveDuration(-time.Second)          // counts as 0
	s := h.Snapshot()
	if got := s.Count(); got != 5 {
		t.Errorf("Count = %d, want 5", got)
	}
	if s.Counts[0] != 2 || s.Counts[1] != 2 || s.Counts[Latency.Buckets] != 1 {
		t.Errorf("Counts = %v, want 2 in bucket 0, 2 in 1, 1 in +Inf", s.Counts[:Latency.Buckets+1])
	}
	if got, want := s.SumValue(), (time.Hour + 35*time.Microsecond).Seconds(); got != want {
		t.Errorf("SumValue = %g, want %g", got, want)
	}
	if got := s.UpperBound(0); got != 1e-5 {
		t.Errorf("UpperBound(0) = %g, want 1e-05", got)
	}
	if got, want := s.UpperBound(Latency.Buckets-1), (10 * time.Microsecond << 21).Seconds(); got != want {
		t.Errorf("last bound = %g, want %g", got, want)
	}
	// The median (rank 2.5 of 5) lies in bucket 1, (10 µs, 20 µs], a quarter of the way in.
	if got, want := s.Quantile(0.5), 12.5e-6; got < want*0.999 || got > want*1.001 {
		t.Errorf("Quantile(0.5) = %g, want %g", got, want)
	}
	if got := (Snapshot{Scale: Latency}).Quantile(0.99); got != 0 {
		t.Errorf("empty Quantile = %g, want 0", got)
	}
	d := h.Snapshot()
	h.Observe(1)
	if got := h.Snapshot().Sub(d).Count(); got != 1 {
		t.Errorf("Sub count = %d, want 1", got)
	}
}

func TestConcurrentObserve(t *testing.T) {
	h := NewHistogram(Sizes)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				h.Observe(uint64(g*1000 + i))
			}
		})
	}
	wg.Wait()
	if got := h.Snapshot().Count(); got != 8000 {
		t.Errorf("Count = %d, want 8000", got)
	}
}

func TestObserveAllocatesNothing(t *testing.T) {
	h := NewHistogram(Latency)
	start := time.Now()
	if n := testing.AllocsPerRun(100, func() { h.Since(start) }); n != 0 {
		t.Errorf("Since allocates %v times, want 0", n)
	}
}

func BenchmarkObserve(b *testing.B) {
	h := NewHistogram(Latency)
	b.RunParallel(func(pb *testing.PB) {
		var v uint64
		for pb.Next() {
			v += 7919
			h.Observe(v % uint64(time.Second))
		}
	})
}

func TestNilHistogram(t *testing.T) {
	var h *Histogram
	h.Observe(3)
	h.Since(time.Now())
	if got := h.Snapshot().Count(); got != 0 {
		t.Errorf("nil histogram counts %d", got)
	}
}
