package fsm_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// The golden files under testdata/ were written by the code of main at 71c8363, before log
// entries could hold several commands: a log of single-command entries (format version 1),
// the result each entry had, the table it left, and two snapshots (format version 1) of it.
// Every later version must read them to the same table.
const (
	goldenLog      = "testdata/v1-log.txt"
	goldenTable    = "testdata/v1-table.txt"
	goldenSnapMid  = "testdata/v1-snapshot-12.bin" // taken after index 12
	goldenSnapLast = "testdata/v1-snapshot-27.bin" // taken after index 27, the last
	goldenMidIndex = 12
)

var writeGolden = flag.Bool("golden.write", false, "write the v1 golden files (only with the code that wrote them)")

// goldenEntry is one line of the golden log: an entry raft used for itself (advance), or one
// command's encoded bytes and the result it had.
type goldenEntry struct {
	index   uint64
	advance bool
	data    []byte
	result  fsm.Result
}

// legacyLog is the log the golden files record: every kind and match kind, gaps in the indexes
// (raft's own entries) and releases between grants, so a token is an index, not a count.
func legacyLog() []goldenEntry {
	cmds := map[uint64]fsm.Command{
		1:  grant("a", "o1", 30000, matchAbsent),
		2:  grant("b", "o2", 0, matchAbsent),
		3:  {Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("127.0.0.1:6379")},
		4:  renew("a", byToken(1), 60000),
		5:  release("b", byToken(2)),
		7:  grant("c", "o3", 1000, matchAny),
		8:  {Kind: fsm.KindStoreScript, Key: []byte("sha-one"), Owner: []byte("return(1)")},
		9:  grant("a", "o1", 5000, byToken(1)),
		10: expire("c", 7, 7),
		11: grant("c", "o4", 100, matchAbsent),
		12: grant("d", "", 0, matchAny),
		13: grantKeep("d", "o5", 0, byToken(12)),
		14: release("d", byOwner("o5")),
		15: grant("\x00bin\r\n", "\xff", 42, matchAbsent),
		16: expire("a", 1, 4),
		17: {Kind: fsm.KindStoreScript, Key: []byte("sha-two"), Owner: []byte("return(2)")},
		18: {Kind: fsm.KindFlushScripts, Key: []byte("scripts")},
		19: {Kind: fsm.KindStoreScript, Key: []byte("sha-three"), Owner: []byte("return(3)")},
		20: {Kind: fsm.KindSetMember, Key: []byte("n2"), Owner: []byte("127.0.0.1:6380")},
		21: {Kind: fsm.KindRemoveMember, Key: []byte("n1")},
		22: renew("c", byOwner("o4"), 200),
		23: grant("e", "o6", 0, matchAny),
		24: {Kind: fsm.KindRelease, Key: []byte("e"), LeaseRev: 23, Match: fsm.Match{Kind: fsm.MatchLease, Token: 23}},
		25: grant("f", "o7", 30000, matchAbsent),
		26: noop(),
	}
	var log []goldenEntry
	for i := uint64(1); i <= 27; i++ {
		c, ok := cmds[i]
		if !ok {
			log = append(log, goldenEntry{index: i, advance: true})
			continue
		}
		log = append(log, goldenEntry{index: i, data: c.Encode(nil)})
	}
	return log
}

// TestWriteGoldenV1 writes the golden files with -golden.write. It ran once, on main at
// 71c8363; it is kept so the history shows how the files were made.
func TestWriteGoldenV1(t *testing.T) {
	if !*writeGolden {
		t.Skip("run with -golden.write to write the v1 golden files")
	}
	m := fsm.New()
	log := legacyLog()
	var out strings.Builder
	for i, e := range log {
		if e.advance {
			m.Advance(e.index)
			fmt.Fprintf(&out, "advance %d\n", e.index)
		} else {
			c, err := fsm.Decode(e.data)
			if err != nil {
				t.Fatal(err)
			}
			r := m.Apply(e.index, c)
			log[i].result = r
			fmt.Fprintf(&out, "entry %d %x %s %d %d %d %t %s\n", e.index, e.data, r.Status, r.Token, r.LeaseRev,
				r.LeaseMs, r.Existed, strconv.QuoteToASCII(string(r.PrevOwner)))
		}
		if e.index == goldenMidIndex {
			writeFile(t, goldenSnapMid, snapshotBytes(t, m))
		}
	}
	writeFile(t, goldenLog, []byte(out.String()))
	writeFile(t, goldenSnapLast, snapshotBytes(t, m))
	writeFile(t, goldenTable, []byte(dumpTable(m)))
}

func writeFile(t *testing.T, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dumpTable is the golden text form of a machine: its locks, members and scripts in order,
// then its applied index. Strings are quoted in ASCII and hold no spaces.
func dumpTable(m *fsm.Machine) string {
	var b strings.Builder
	q := strconv.QuoteToASCII
	m.Scan(func(key string, l fsm.Lock) bool {
		fmt.Fprintf(&b, "lock %s %s %d %d %d\n", q(key), q(string(l.Owner)), l.Token, l.LeaseRev, l.LeaseMs)
		return true
	})
	members := m.Members()
	for _, id := range slices.Sorted(maps.Keys(members)) {
		fmt.Fprintf(&b, "member %s %s\n", q(id), q(members[id]))
	}
	for _, sha := range []string{"sha-one", "sha-two", "sha-three"} {
		if src, ok := m.Script(sha); ok {
			fmt.Fprintf(&b, "script %s %s\n", q(sha), q(src))
		}
	}
	fmt.Fprintf(&b, "applied %d\n", m.Applied())
	return b.String()
}

// readGoldenLog parses testdata/v1-log.txt.
func readGoldenLog(t *testing.T) []goldenEntry {
	t.Helper()
	b, err := os.ReadFile(goldenLog)
	if err != nil {
		t.Fatal(err)
	}
	var log []goldenEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var e goldenEntry
		var err error
		if e.index, err = strconv.ParseUint(f[1], 10, 64); err != nil {
			t.Fatalf("golden log line %q: %v", sc.Text(), err)
		}
		if f[0] == "advance" {
			e.advance = true
			log = append(log, e)
			continue
		}
		if len(f) != 9 {
			t.Fatalf("golden log line %q: %d fields", sc.Text(), len(f))
		}
		e.data = mustHex(t, f[2])
		e.result.Status = statusNamed(t, f[3])
		e.result.Token = fsm.Token(mustUint(t, f[4]))
		e.result.LeaseRev = mustUint(t, f[5])
		e.result.LeaseMs = mustUint(t, f[6])
		e.result.Existed = f[7] == "true"
		prev, err := strconv.Unquote(f[8])
		if err != nil {
			t.Fatalf("golden log line %q: %v", sc.Text(), err)
		}
		if prev != "" {
			e.result.PrevOwner = []byte(prev)
		}
		log = append(log, e)
	}
	return log
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func statusNamed(t *testing.T, name string) fsm.Status {
	t.Helper()
	for s := fsm.Status(1); s < 32; s++ {
		if s.String() == name {
			return s
		}
	}
	t.Fatalf("no status named %q", name)
	return 0
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
