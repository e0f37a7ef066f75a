package main

import (
	"os"
	"strings"
	"testing"
)

func TestStatTicks(t *testing.T) {
	// Fields 3..15 after the name; utime (14) is 7, stime (15) is 5.
	rest := " S 1 2 3 4 5 6 7 8 9 10 7 5 0 0 20 0 1 0 100"
	tests := []struct {
		name, stat string
		want       uint64
		wantErr    bool
	}{
		{"plain", "42 (redis-server)" + rest, 12, false},
		{"name with spaces and parentheses", "42 (a) b (c)" + rest, 12, false},
		{"no name", "42 redis-server" + rest, 0, true},
		{"cut short", "42 (x) S 1 2 3", 0, true},
		{"not numbers", "42 (x)" + strings.Replace(rest, " 7 5 ", " x 5 ", 1), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := statTicks([]byte(tt.stat))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("statTicks(%q) = %d, %v; want %d, error %v", tt.stat, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestProcCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := procCPU(os.Getpid()); err != nil {
		t.Errorf("procCPU(self): %v", err)
	}
}
