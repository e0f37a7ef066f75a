package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/raftlock/raftlock/fsm"
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
// cluster runs (absent: one). cmd/raftlock writes it when a cluster is created, when the node
// applies a groups plan (RAFT GROUPS), and reads it at every start; a restore of several groups
// writes it.
const GroupsFile = "groups"

// GroupsRecord is what GroupsFile records: the groups the node runs, the groups the cluster
// was created with (Layout), and, for a cluster grown by a plan, the voters the groups the plan
// added start with (fsm.GroupsPlan), and for a node that joined its cluster (--join) the
// number of groups the cluster ran then (Joined): it starts none of those itself, each group's
// leader adds it (a later plan's groups it starts as every node does). The file is the number
// of groups on its first line, then "layout L" when L differs, then a "voter ID ADDR" line for
// each voter, and "joined J" for a node that joined.
type GroupsRecord struct {
	Groups, Layout int
	Voters         []fsm.PlanVoter
	Joined         int
}

// ReadGroupsRecord reads what dir records; found is false when it records nothing (a node of
// one group, or a new one).
func ReadGroupsRecord(dir string) (rec GroupsRecord, found bool, err error) {
	path := filepath.Join(dir, GroupsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return GroupsRecord{}, false, nil
	}
	if err != nil {
		return GroupsRecord{}, false, err
	}
	bad := func(what string) (GroupsRecord, bool, error) {
		return GroupsRecord{}, true, fmt.Errorf("%s: want %s, found %q", path, what, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	g, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || g < 1 {
		return bad("a number of raft groups")
	}
	rec = GroupsRecord{Groups: g, Layout: g}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "layout":
			if rec.Layout, err = strconv.Atoi(f[1]); err != nil || rec.Layout < 1 || rec.Layout > g {
				return bad("a layout from 1 to the number of groups")
			}
		case len(f) == 3 && f[0] == "voter":
			rec.Voters = append(rec.Voters, fsm.PlanVoter{ID: f[1], Addr: f[2]})
		case len(f) == 2 && f[0] == "joined":
			if rec.Joined, err = strconv.Atoi(f[1]); err != nil || rec.Joined < 1 || rec.Joined > g {
				return bad("a number of groups joined from 1 to the number of groups")
			}
		default:
			return bad("\"layout L\", \"voter ID ADDR\" or \"joined J\" lines after the number of groups")
		}
	}
	if rec.Layout < g && len(rec.Voters) == 0 && rec.Joined < g {
		return bad("the voters of the groups a plan added")
	}
	return rec, true, nil
}

// WriteGroupsRecord records rec in dir, synced as the raft state it describes will be.
func WriteGroupsRecord(dir string, rec GroupsRecord) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", rec.Groups)
	if rec.Layout > 0 && rec.Layout != rec.Groups {
		fmt.Fprintf(&b, "layout %d\n", rec.Layout)
	}
	for _, v := range rec.Voters {
		fmt.Fprintf(&b, "voter %s %s\n", v.ID, v.Addr)
	}
	if rec.Joined > 0 {
		fmt.Fprintf(&b, "joined %d\n", rec.Joined)
	}
	return WriteFileAtomic(filepath.Join(dir, GroupsFile), []byte(b.String()))
}
