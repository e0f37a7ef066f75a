package fsm_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
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
// entries could hold several commands (TestWriteGoldenV1, removed once that code was gone; see
// the commit that added the files): a log of single-command entries (format version 1), the
// result each entry had, the table it left, and two snapshots (format version 1) of it. Every
// later version must read them to the same results and table.
const (
	goldenLog      = "testdata/v1-log.txt"
	goldenTable    = "testdata/v1-table.txt"
	goldenSnapMid  = "testdata/v1-snapshot-12.bin" // taken after index 12
	goldenSnapLast = "testdata/v1-snapshot-27.bin" // taken after index 27, the last
	goldenMidIndex = 12
)

// goldenEntry is one line of the golden log: an entry raft used for itself (advance), or one
// command's encoded bytes and the result it had.
type goldenEntry struct {
	index   uint64
	advance bool
	data    []byte
	result  fsm.Result
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
