package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// TestClockTag is the build tag that gives the raftlock binary its --test-clock (DEBUG
// CLOCK-SHIFT): test builds carry it, production builds refuse the flag.
const TestClockTag = "raftlock_testclock"

// GoBuild builds the main package pkg into the binary out, with the race detector if race. It
// is a test build: it carries TestClockTag, and the tags GOFLAGS names (-tags=a,b): a -tags on
// the command line would override GOFLAGS's, and the chaos harness builds its deliberately
// broken nodes through GOFLAGS (-tags=chaos_nonatomic).
func GoBuild(out, pkg string, race bool) error {
	tags := append([]string{TestClockTag}, goflagsTags(os.Getenv("GOFLAGS"))...)
	args := []string{"build", "-tags", strings.Join(tags, ","), "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// goflagsTags returns the build tags a GOFLAGS value sets (-tags=a,b or --tags=a,b).
func goflagsTags(goflags string) []string {
	var tags []string
	for _, f := range strings.Fields(goflags) {
		if v, ok := strings.CutPrefix(strings.TrimLeft(f, "-"), "tags="); ok && strings.HasPrefix(f, "-") {
			tags = append(tags, strings.Split(v, ",")...)
		}
	}
	return tags
}
