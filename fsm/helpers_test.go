package fsm_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/raftlock/raftlock/fsm"
)

// equateEmpty treats nil and empty byte slices as equal: a decoded or restored command carries
// empty, non-nil slices where the original had nil, and the machine stores an empty owner as
// []byte{}. Neither difference has a meaning anywhere in raftlock.
var equateEmpty = cmpopts.EquateEmpty()

// Matches, short enough for table rows.
var matchAny = fsm.Match{Kind: fsm.MatchAny}
var matchAbsent = fsm.Match{Kind: fsm.MatchAbsent}
var matchFree = fsm.Match{Kind: fsm.MatchFree}

func byToken(t fsm.Token) fsm.Match { return fsm.Match{Kind: fsm.MatchToken, Token: t} }
func byOwner(o string) fsm.Match    { return fsm.Match{Kind: fsm.MatchOwner, Owner: []byte(o)} }

func noop() fsm.Command { return fsm.Command{Kind: fsm.KindNoop} }

func grant(key, owner string, leaseMs uint64, mt fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindGrant, Key: []byte(key), Owner: []byte(owner), LeaseMs: leaseMs, Match: mt}
}

// grantKeep is a Grant with KeepLease (SET ... KEEPTTL).
func grantKeep(key, owner string, leaseMs uint64, mt fsm.Match) fsm.Command {
	c := grant(key, owner, leaseMs, mt)
	c.KeepLease = true
	return c
}

func release(key string, mt fsm.Match) fsm.Command {
	return fsm.Command{Kind: fsm.KindRelease, Key: []byte(key), Match: mt}
}

func renew(key string, mt fsm.Match, leaseMs uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindRenew, Key: []byte(key), Match: mt, LeaseMs: leaseMs}
}

func expire(key string, tok fsm.Token, leaseRev uint64) fsm.Command {
	return fsm.Command{Kind: fsm.KindExpire, Key: []byte(key), Token: tok, LeaseRev: leaseRev}
}

// lock builds a table entry for a want table. Its Deadline is what a machine whose lease clock
// reads 0 (no SetLeaseClock; Restore) gives a lease of leaseMs (at most 100 years).
func lock(owner string, tok fsm.Token, leaseRev, leaseMs uint64) fsm.Lock {
	return fsm.Lock{Owner: []byte(owner), Token: tok, LeaseRev: leaseRev, LeaseMs: leaseMs, Deadline: int64(min(leaseMs, 100*365*24*3600*1000)) * 1e6}
}

// table returns the machine's lock table, read through Scan.
func table(m *fsm.Machine) map[string]fsm.Lock {
	t := map[string]fsm.Lock{}
	m.Scan(func(key string, l fsm.Lock) bool {
		t[key] = l
		return true
	})
	return t
}

// applyAll applies cmds at indexes first, first+1, ... and returns the next free index.
func applyAll(t *testing.T, m *fsm.Machine, first uint64, cmds []fsm.Command) uint64 {
	t.Helper()
	idx := first
	for _, c := range cmds {
		if err := c.Validate(); err != nil {
			t.Fatalf("setup command %d (%+v) is invalid: %v", idx, c, err)
		}
		m.Apply(idx, c)
		idx++
	}
	return idx
}

// snapshotBytes serializes a snapshot of m.
func snapshotBytes(t *testing.T, m *fsm.Machine) []byte {
	t.Helper()
	return writeSnapshot(t, m.Snapshot())
}

func writeSnapshot(t *testing.T, s *fsm.Snapshot) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := s.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned n = %d, but wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// restore restores b and fails the test on an error.
func restore(t *testing.T, b []byte) *fsm.Machine {
	t.Helper()
	m, err := fsm.Restore(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return m
}

// diffTables returns a cmp.Diff of two tables, empty when they are equal.
func diffTables(got, want map[string]fsm.Lock) string {
	return cmp.Diff(got, want, equateEmpty)
}

// cmpResults returns a cmp.Diff of two results' replicated fields, empty when they are equal:
// Stored and Deadline are the applying node's own (its table's bytes, its lease clock).
func cmpResults(got, want fsm.Result) string {
	return cmp.Diff(got, want, equateEmpty, cmpopts.IgnoreFields(fsm.Result{}, "Stored", "Deadline"))
}

// encode is the log entry of cmds, as raftnode proposes it.
func encode(cmds ...fsm.Command) []byte { return fsm.EncodeEntry(nil, cmds) }

// encodeV1 is c as an older binary wrote it into the log: an entry of format version 1, which
// holds exactly one command and no count. Both versions share the command's body.
func encodeV1(c fsm.Command) []byte {
	e := fsm.EncodeKeyedEntry(nil, []fsm.Command{c})
	return append([]byte{1}, e[2:]...) // version 3 and a count of 1 (one byte) -> version 1
}

// legacy is what a command read from an entry written before databases decodes to: its key,
// if it names a table key, is database 0's.
func legacy(c fsm.Command) fsm.Command {
	switch c.Kind {
	case fsm.KindGrant, fsm.KindRelease, fsm.KindRenew, fsm.KindExpire:
		c.Key = fsm.DBKey(0, c.Key)
	}
	return c
}

// legacyTable is a table dump (dumpTable) with every lock's key moved into database 0, as a
// table written before databases restores.
func legacyTable(dump string) string { return strings.ReplaceAll(dump, "lock \"", "lock \"\\x00") }

// decodeOne decodes an entry that must hold exactly one command.
func decodeOne(b []byte) (fsm.Command, error) {
	cmds, err := fsm.DecodeEntry(nil, b)
	if err != nil {
		return fsm.Command{}, err
	}
	if len(cmds) != 1 {
		return fsm.Command{}, fmt.Errorf("entry of %d commands, want 1", len(cmds))
	}
	return cmds[0], nil
}
