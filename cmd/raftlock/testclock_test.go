package main

import (
	"errors"
	"io"
	"testing"
)

// A production build given --test-clock (or RAFTLOCK_TEST_CLOCK) refuses to start.
func TestProductionBuildRefusesTestClock(t *testing.T) {
	if testClockBuilt {
		t.Skip("a test build (-tags raftlock_testclock) has the test clock")
	}
	err := run(t.Context(), []string{"--test-clock", "true", "--dir", t.TempDir()}, io.Discard)
	if !errors.Is(err, errNoTestClock) {
		t.Fatalf("run --test-clock true = %v, want %v", err, errNoTestClock)
	}
	t.Setenv("RAFTLOCK_TEST_CLOCK", "true")
	if err := run(t.Context(), []string{"--dir", t.TempDir()}, io.Discard); !errors.Is(err, errNoTestClock) {
		t.Fatalf("RAFTLOCK_TEST_CLOCK=true: run = %v, want %v", err, errNoTestClock)
	}
}

// A production build given --group-commit paced refuses to start: commit pacing is for tests
// until the chaos violation found with it is explained.
func TestProductionBuildRefusesCommitPaced(t *testing.T) {
	if testClockBuilt {
		t.Skip("a test build (-tags raftlock_testclock) may pace its group commits")
	}
	err := run(t.Context(), []string{"--group-commit", "paced", "--dir", t.TempDir()}, io.Discard)
	if !errors.Is(err, errNoCommitPaced) {
		t.Fatalf("run --group-commit paced = %v, want %v", err, errNoCommitPaced)
	}
}
