package main

import (
	"errors"
	"io"
	"testing"
)

// A production build refuses the settings that exist only for tests: the test clock
// (--test-clock, RAFTLOCK_TEST_CLOCK) and the injected disk failure (--test-disk-faults,
// RAFTLOCK_TEST_DISK_FAULTS).
func TestProductionBuildRefusesTestSettings(t *testing.T) {
	if testClockBuilt {
		t.Skip("a test build (-tags raftlock_testclock) accepts them")
	}
	for _, c := range []struct {
		name       string
		args       []string
		env, value string
		want       error
	}{
		{"flag test-clock", []string{"--test-clock", "true"}, "", "", errNoTestClock},
		{"env test-clock", nil, "RAFTLOCK_TEST_CLOCK", "true", errNoTestClock},
		{"flag test-disk-faults", []string{"--test-disk-faults", "true"}, "", "", errNoTestDiskFaults},
		{"env test-disk-faults", nil, "RAFTLOCK_TEST_DISK_FAULTS", "true", errNoTestDiskFaults},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv(c.env, c.value)
			}
			if err := run(t.Context(), append(c.args, "--dir", t.TempDir()), io.Discard); !errors.Is(err, c.want) {
				t.Fatalf("run %v (env %s) = %v, want %v", c.args, c.env, err, c.want)
			}
		})
	}
}
