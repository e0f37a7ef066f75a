package server

import (
	"math"
	"testing"
)

func TestParseScore(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ok   bool
	}{
		{"1", 1, true},
		{"-2.5", -2.5, true},
		{"+.5", 0.5, true},
		{"5.", 5, true},
		{"1e3", 1000, true},
		{"0x10", 16, true},
		{"-0X1.8P1", -3, true},
		{"inf", math.Inf(1), true},
		{"+Infinity", math.Inf(1), true},
		{"-INF", math.Inf(-1), true},
		{"4e-324", math.SmallestNonzeroFloat64, true},
		{"0", 0, true},
		{"0e10", 0, true},
		{"0x0p5", 0, true},
		{"", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"nan", 0, false},
		{"-nan", 0, false},
		{"1e400", 0, false},
		{"-1e400", 0, false},
		{"1e-400", 0, false},
		{"0x1p-1100", 0, false},
		{"1_0", 0, false},
		{"0x", 0, false},
		{"1e", 0, false},
		{"inf1", 0, false},
		{"1,5", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseScore([]byte(tt.in))
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("parseScore(%q) = %v, %v, want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseRangeBound(t *testing.T) {
	tests := []struct {
		in   string
		want float64
		ex   bool
		ok   bool
	}{
		{"1", 1, false, true},
		{"(1", 1, true, true},
		{"", 0, false, true},
		{"(", 0, true, true},
		{" 1", 1, false, true},
		{"( 1", 1, true, true},
		{"1e400", math.Inf(1), false, true},
		{"(-inf", math.Inf(-1), true, true},
		{"  ", 0, false, false},
		{" (1", 0, false, false},
		{"((1", 0, false, false},
		{"1 ", 0, false, false},
		{"nan", 0, false, false},
		{"x", 0, false, false},
	}
	for _, tt := range tests {
		got, ex, ok := parseRangeBound([]byte(tt.in))
		if ok != tt.ok || ok && (got != tt.want || ex != tt.ex) {
			t.Errorf("parseRangeBound(%q) = %v, %v, %v, want %v, %v, %v", tt.in, got, ex, ok, tt.want, tt.ex, tt.ok)
		}
	}
}
