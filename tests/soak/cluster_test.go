package soak

import (
	"path/filepath"
	"strings"
	"testing"
)

// A node process that exits on its own is reported once, with its status, and is no error of
// stop.
func TestClusterExits(t *testing.T) {
	dir := t.TempDir()
	c := &cluster{bin: "/bin/sh"}
	n := &node{id: "n2", logPath: filepath.Join(dir, "n2.log"), args: []string{"-c", "exit 3"}}
	c.nodes = []*node{n}
	if err := c.start(n); err != nil {
		t.Fatal(err)
	}
	<-n.proc.Exited()
	exits := c.exits()
	if len(exits) != 1 || !strings.HasPrefix(exits[0], "n2 exited on its own at ") || !strings.HasSuffix(exits[0], "(status exit status 3)") {
		t.Errorf("exits = %q, want one of n2 with status 3", exits)
	}
	if err := c.stop(); err != nil {
		t.Errorf("stop = %v, want nil", err)
	}
	if got := c.exits(); len(got) != 1 {
		t.Errorf("exits after stop = %q, want the one", got)
	}
}
