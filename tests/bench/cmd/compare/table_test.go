package main

import (
	"math"
	"testing"
)

func TestRatio(t *testing.T) {
	tests := []struct {
		a, b float64
		want string
	}{
		{2, 1, "2.00×"},
		{1, 3, "0.33×"},
		{346, 206022, "0.002×"},
		{0, 1, "n/a"},
		{1, 0, "n/a"},
		{math.NaN(), 1, "n/a"},
	}
	for _, tt := range tests {
		if got := ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}
