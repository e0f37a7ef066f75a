package tests

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestTestClock: a node started with --test-clock lets a test move its lease clock (how the
// fault harness injects skew and jumps); a node without it refuses DEBUG.
func TestTestClock(t *testing.T) {
	c := newCluster(t, 1, "--test-clock", "true")
	n := c.nodes[0]
	if _, err := call(n.addr, "SET", "k", "v", "PX", "60000"); err != nil {
		t.Fatal(err)
	}
	if got, err := callInt(n.addr, "DEBUG", "CLOCK-SHIFT", "59000"); err != nil || got != 59000 {
		t.Fatalf("DEBUG CLOCK-SHIFT 59000 = %d, %v", got, err)
	}
	start := time.Now()
	testutil.WaitFor(t, 5*time.Second, func() error {
		if v, err := callInt(n.addr, "EXISTS", "k"); err != nil || v != 0 {
			return errors.New("k still held")
		}
		return nil
	})
	t.Logf("a 60 s lease ended %v after the clock moved 59 s", time.Since(start).Round(time.Millisecond))

	plain := newCluster(t, 1)
	if _, err := call(plain.nodes[0].addr, "DEBUG", "CLOCK-SHIFT", "1"); err == nil || !strings.Contains(err.Error(), "--test-clock") {
		t.Errorf("DEBUG on a node without --test-clock = %v, want it refused", err)
	}
}
