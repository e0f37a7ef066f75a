package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
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

// RunWithRaftlock is a test package's TestMain body: it builds the raftlock binary once (with
// the race detector if race, which Launch's log check then looks for), hands its path to use,
// runs the tests, and, when they passed, fails the run on goroutines left behind. It returns
// the exit code. name prefixes its messages.
func RunWithRaftlock(m *testing.M, name string, race bool, use func(bin string)) int {
	dir, err := os.MkdirTemp("", "raftlock-"+name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "raftlock")
	if err := GoBuild(bin, "github.com/raftlock/raftlock/cmd/raftlock", race); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	use(bin)
	code := m.Run()
	if code == 0 {
		// Every client and process a test starts is closed by its cleanup. A closed go-redis
		// client's background redial (ConnPool.tryDial, after a node was stopped) ends only
		// after its dial timeout and a 1 s pause: look again for up to 5 s, not only
		// goleak's own second or so, which made this check fail now and then.
		err := goleak.Find()
		for deadline := time.Now().Add(5 * time.Second); err != nil && time.Now().Before(deadline); {
			time.Sleep(200 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, name+": leaked goroutines:", err)
			return 1
		}
	}
	return code
}
