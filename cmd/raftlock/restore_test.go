package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A restore names the node it seeds: without --id it writes nothing and says which ID a node
// started without one would have, since a dir written for a guessed ID is refused by the node
// started under the ID its operator meant.
func TestRestoreNeedsID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	for _, args := range [][]string{
		{"--in", "backup.rlbackup", "--dir", dir},
		{"--in", "backup.rlbackup", "--dir", dir, "--raft-addr", "127.0.0.1:7400"},
		{"--in", "backup.rlbackup", "--dir", dir, "--peers", "n1=127.0.0.1:7400,n2=127.0.0.1:7401"},
	} {
		err := runRestore(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--id is required") {
			t.Errorf("restore %v = %v; want --id is required", args, err)
		}
		if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
			t.Fatalf("restore %v without --id created %s", args, dir)
		}
	}
	err := runRestore([]string{"--in", "backup.rlbackup", "--dir", dir, "--raft-addr", "127.0.0.1:7400"}, io.Discard)
	if want := defaultNodeID("127.0.0.1:7400"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("restore without --id = %v; want it to name %s, the ID a node started without one has", err, want)
	}
}
