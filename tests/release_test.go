package tests

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// previousVersion is the last release (docs/upgrades.md, *Versions*) and previousCommit its
// commit: TestRollingUpgrade starts its cluster on the binary built from it and replaces its
// nodes one by one with this tree's. A commit rather than the tag, so that a checkout without
// tags runs the test. Bump both at every release, so the test always upgrades from the one
// before.
const (
	previousVersion = "v0.2.0"
	previousCommit  = "1c0631b684efefc5b82ed622641574b32dd7a62b"
)

// binaryAt returns the path of raftlock built from commit, taken from git history. It is
// built once per commit and kept under the user's cache directory (raftlock-test/), so a second
// run starts at once. It is a test build (testutil.TestClockTag) without the race detector: the
// old version's code is not what the test examines, and a plain build takes a third of the time.
// A repository without the commit (a shallow clone) fails the test, saying how to fetch it.
func binaryAt(t *testing.T, commit string) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("the upgrade test builds the previous version (%s) from git history, but git rev-parse --show-toplevel failed: %v; run it in a git checkout of raftlock", commit, err)
	}
	root := strings.TrimSpace(string(out))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Fatalf("commit %s (the previous version, tests/release_test.go) is not in this repository: a shallow clone? Fetch the history first: git fetch --unshallow (or git fetch origin %s)", commit, commit)
	}
	dir := t.TempDir()
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "raftlock-test")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "raftlock-"+commit)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o100 != 0 {
		return bin
	}

	src := t.TempDir()
	if err := extractCommit(root, commit, src); err != nil {
		t.Fatalf("extract %s: %v", commit, err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	build := exec.Command("go", "build", "-buildvcs=false", "-tags", "raftlock_testclock", "-o", tmp, "./cmd/raftlock")
	build.Dir = src
	if b, err := build.CombinedOutput(); err != nil {
		os.Remove(tmp)
		t.Fatalf("build raftlock at %s: %v\n%s", commit, err, b)
	}
	// A rename is atomic: a concurrent run sees no binary or a whole one.
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// extractCommit writes the tree of commit into dir (git archive | tar -x), leaving the
// repository's work trees and refs as they are.
func extractCommit(root, commit, dir string) error {
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var archiveErr, untarErr strings.Builder
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := archive.Start(); err != nil {
		return err
	}
	if err := untar.Run(); err != nil {
		io.Copy(io.Discard, pipe)
		archive.Wait()
		return fmt.Errorf("tar: %w: %s", err, untarErr.String())
	}
	if err := archive.Wait(); err != nil {
		return fmt.Errorf("git archive: %w: %s", err, archiveErr.String())
	}
	return nil
}
