package ops

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// processStats are the process's own figures: what a leak shows in first, whichever part of the
// node leaks.
type processStats struct {
	goroutines int
	// rssBytes and openFDs are read from /proc; each ok flag is false where that read failed
	// (no /proc: not Linux), so that one figure missing does not drop the other.
	rssBytes uint64
	rssOK    bool
	openFDs  int
	fdsOK    bool
}

// readProcess reads the figures of the process whose /proc directory is dir ("/proc/self"). RSS
// is statm's resident pages times the page size, as the kernel counts them for VmRSS; the open
// files are the entries of fd/ (the one this read holds open included, as Prometheus's own
// collector counts them).
func readProcess(dir string) processStats {
	s := processStats{goroutines: runtime.NumGoroutine()}
	s.rssBytes, s.rssOK = readRSS(dir)
	s.openFDs, s.fdsOK = countFDs(dir)
	return s
}

// readRSS reads statm's resident pages, in bytes.
func readRSS(dir string) (uint64, bool) {
	statm, err := os.ReadFile(filepath.Join(dir, "statm"))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(statm))
	if len(fields) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
}

// countFDs counts fd/'s entries by name, a chunk at a time: no sorting, no stat of each.
func countFDs(dir string) (int, bool) {
	f, err := os.Open(filepath.Join(dir, "fd"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(256)
		n += len(names)
		if errors.Is(err, io.EOF) {
			return n, true
		}
		if err != nil {
			return 0, false
		}
	}
}

// writeProcessMetrics writes the process's figures under the names every Prometheus client
// library gives them (go_goroutines, process_resident_memory_bytes, process_open_fds), not under
// raftlock_: dashboards and alerts written for any Go service read them unchanged. A figure that
// could not be read (without /proc, only the goroutines are left) is not written.
func writeProcessMetrics(w io.Writer, s processStats) {
	// Whole numbers, written whole: a scraper that is not Prometheus (a script, the soak) reads
	// 41943040 more surely than 4.194304e+07.
	metric := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	metric("go_goroutines", "Number of goroutines that currently exist.", uint64(s.goroutines))
	if s.rssOK {
		metric("process_resident_memory_bytes", "Resident memory size in bytes.", s.rssBytes)
	}
	if s.fdsOK {
		metric("process_open_fds", "Number of open file descriptors.", uint64(s.openFDs))
	}
}
