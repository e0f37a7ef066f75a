package stats

import (
	"math"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var s Samples
	for i := 100; i >= 1; i-- { // added out of order on purpose
		s.Add(time.Duration(i)*time.Millisecond, 1)
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{
		{0, time.Millisecond},
		{0.5, 50 * time.Millisecond},
		{0.99, 99 * time.Millisecond},
		{0.999, 100 * time.Millisecond},
		{1, 100 * time.Millisecond},
		{-1, time.Millisecond},
		{2, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		if got := s.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
}

func TestQuantileWeighted(t *testing.T) {
	// One pipelined batch of 98 fast operations outweighs two slow singles.
	var a, b Samples
	a.Add(time.Millisecond, 98)
	b.Add(10*time.Millisecond, 1)
	b.Add(20*time.Millisecond, 1)
	b.Add(time.Second, 0) // records nothing
	a.Merge(&b)
	if got := a.Count(); got != 100 {
		t.Fatalf("Count() = %d, want 100", got)
	}
	for q, want := range map[float64]time.Duration{0.5: time.Millisecond, 0.98: time.Millisecond, 0.99: 10 * time.Millisecond, 0.999: 20 * time.Millisecond} {
		if got := a.Quantile(q); got != want {
			t.Errorf("Quantile(%v) = %v, want %v", q, got, want)
		}
	}
}

func TestQuantileEmpty(t *testing.T) {
	var s Samples
	if got := s.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile(0.5) = %v, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7, 7, 1}, 7},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.xs...)
		if got := Median(tt.xs); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.xs[i] {
				t.Errorf("Median modified its input: %v, was %v", tt.xs, in)
				break
			}
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}
