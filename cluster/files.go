package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// WriteFileAtomic writes data to path through a synced temporary file beside it, renamed into
// place: path holds the old file or the whole new one, never a part.
func WriteFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// GroupsFile is the file in a node's data directory that records how many raft groups its
// cluster runs (absent: one). cmd/raftlock writes it when a cluster is created and reads it at
// every start; a restore of several groups writes it.
const GroupsFile = "groups"

// ReadGroupsRecord reads the number of raft groups dir records; found is false when it records
// none (a node of one group, or a new one).
func ReadGroupsRecord(dir string) (groups int, found bool, err error) {
	path := filepath.Join(dir, GroupsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	g, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || g < 1 {
		return 0, true, fmt.Errorf("%s: want a number of raft groups, found %q", path, b)
	}
	return g, true, nil
}

// WriteGroupsRecord records in dir that its node's cluster runs groups raft groups, synced as
// the raft state it describes will be.
func WriteGroupsRecord(dir string, groups int) error {
	return WriteFileAtomic(filepath.Join(dir, GroupsFile), []byte(strconv.Itoa(groups)+"\n"))
}
