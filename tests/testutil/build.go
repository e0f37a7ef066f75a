package testutil

import (
	"fmt"
	"os/exec"
	"strings"
)

// GoBuild builds the main package pkg into the binary out, with the race detector if race.
func GoBuild(out, pkg string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkg)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}
