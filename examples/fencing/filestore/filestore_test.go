package filestore

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
)

func TestWriteRefusesStaleTokens(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		token   uint64
		data    string
		stale   bool
		content string // the file's content after the step
	}{
		{token: 5, data: "from 5", content: "from 5"},
		{token: 3, data: "from 3", stale: true, content: "from 5"},
		{token: 5, data: "from 5 again", content: "from 5 again"}, // the holder writes again
		{token: 9, data: "from 9", content: "from 9"},
		{token: 5, data: "from 5, late", stale: true, content: "from 9"},
	}
	for i, st := range steps {
		err := s.Write("report", st.token, []byte(st.data))
		if got := errors.Is(err, ErrStale); got != st.stale || (err != nil && !got) {
			t.Fatalf("step %d: Write(%d): %v; want stale=%v", i, st.token, err, st.stale)
		}
		data, _, err := s.Read("report")
		if err != nil || string(data) != st.content {
			t.Fatalf("step %d: Read: %q, %v; want %q", i, data, err, st.content)
		}
	}
	if _, token, _ := s.Read("report"); token != 9 {
		t.Errorf("largest token: %d; want 9", token)
	}
	names := dirNames(t, s.dir)
	if want := []string{"report", "report.lock", "report.token"}; !slices.Equal(names, want) {
		t.Errorf("files left: %q; want %q (no temporary file)", names, want)
	}
}

func TestWriteBadName(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "a/b", ".hidden"} {
		if err := s.Write(name, 1, nil); err == nil || errors.Is(err, ErrStale) {
			t.Errorf("Write(%q): %v; want a bad-name error", name, err)
		}
	}
}

// TestConcurrentWriters: writers with tokens 1..n race; whatever the order, each is accepted or
// refused as stale, the largest is accepted, and the file ends with its content.
func TestConcurrentWriters(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for tok := uint64(1); tok <= n; tok++ {
		wg.Go(func() { errs[tok] = s.Write("f", tok, fmt.Appendf(nil, "from %d", tok)) })
	}
	wg.Wait()
	for tok, err := range errs[1:] {
		if err != nil && !errors.Is(err, ErrStale) {
			t.Errorf("Write(%d): %v", tok+1, err)
		}
	}
	if errs[n] != nil {
		t.Errorf("Write(%d), the largest: %v; want accepted", n, errs[n])
	}
	data, token, err := s.Read("f")
	if err != nil || string(data) != fmt.Sprintf("from %d", n) || token != n {
		t.Errorf("Read: %q, token %d, %v; want %q, token %d", data, token, err, fmt.Sprintf("from %d", n), n)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
