package testutil

import (
	"fmt"
	"os/exec"
	"strings"
)

// TestClockTag is the build tag that gives the raftlock binary its --test-clock (DEBUG
// CLOCK-SHIFT): test builds carry it, production builds refuse the flag.
const TestClockTag = "raftlock_testclock"

// GoBuild builds the main package pkg into the binary out, with the race detector if race. It
// is a test build: it carries TestClockTag.
func GoBuild(out, pkg string, race bool) error {
	args := []string{"build", "-tags", TestClockTag, "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}
