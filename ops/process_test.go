package ops

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// A /proc directory made up for the test: RSS is statm's second field in pages, the open files
// are fd/'s entries.
func TestReadProcess(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "statm"), []byte("5000 300 120 1 0 900 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "fd"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // more than one chunk of names
		if err := os.WriteFile(filepath.Join(dir, "fd", strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readProcess(dir)
	want := processStats{goroutines: got.goroutines, rssBytes: 300 * uint64(os.Getpagesize()), rssOK: true, openFDs: 300, fdsOK: true}
	if got != want {
		t.Errorf("readProcess = %+v, want %+v", got, want)
	}
	if got.goroutines < 1 {
		t.Errorf("goroutines = %d, want at least this one", got.goroutines)
	}

	// Without /proc: the goroutines only, and no figure made up for the rest.
	if got := readProcess(filepath.Join(dir, "missing")); got.rssOK || got.fdsOK || got.rssBytes != 0 || got.openFDs != 0 {
		t.Errorf("readProcess of a missing dir = %+v, want only goroutines", got)
	}
	var b strings.Builder
	writeProcessMetrics(&b, processStats{goroutines: 12})
	if out := b.String(); out != "# HELP go_goroutines Number of goroutines that currently exist.\n# TYPE go_goroutines gauge\ngo_goroutines 12\n" {
		t.Errorf("without /proc wrote:\n%s", out)
	}
}

// An fd/ that cannot be read drops the open files only: RSS is still read and written.
func TestReadProcessWithoutFDs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "statm"), []byte("5000 300 120 1 0 900 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readProcess(dir)
	want := processStats{goroutines: got.goroutines, rssBytes: 300 * uint64(os.Getpagesize()), rssOK: true}
	if got != want {
		t.Errorf("readProcess = %+v, want %+v", got, want)
	}
	var b strings.Builder
	writeProcessMetrics(&b, got)
	if out := b.String(); !strings.Contains(out, "process_resident_memory_bytes ") || strings.Contains(out, "process_open_fds") {
		t.Errorf("without fd/ wrote:\n%s\nwant RSS and no open files", out)
	}
}

func TestWriteProcessMetrics(t *testing.T) {
	var b strings.Builder
	writeProcessMetrics(&b, processStats{goroutines: 57, rssBytes: 41943040, rssOK: true, openFDs: 23, fdsOK: true})
	out := b.String()
	for _, want := range []string{
		"# TYPE go_goroutines gauge\ngo_goroutines 57\n",
		"# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 41943040\n",
		"# TYPE process_open_fds gauge\nprocess_open_fds 23\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("process metrics lack %q:\n%s", want, out)
		}
	}
}

// /metrics serves the live process's figures; on Linux the RSS and open files too.
func TestMetricsServeProcess(t *testing.T) {
	s, err := Start(Config{Addr: "127.0.0.1:0"}, fixedStats{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	res, err := http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, v, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		values[name] = f
	}
	names := []string{"go_goroutines"}
	if runtime.GOOS == "linux" {
		names = append(names, "process_resident_memory_bytes", "process_open_fds")
	}
	for _, name := range names {
		if v, ok := values[name]; !ok || v <= 0 {
			t.Errorf("/metrics %s = %v (present %v), want a positive figure", name, v, ok)
		}
	}
	if rss := values["process_resident_memory_bytes"]; runtime.GOOS == "linux" && rss < 1<<20 {
		t.Errorf("process_resident_memory_bytes = %s, want at least a MiB for a Go process", fmt.Sprint(rss))
	}
}
