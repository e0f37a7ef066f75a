package ops

import (
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
	// rssBytes and openFDs are read from /proc; ok is false where there is none (not Linux).
	rssBytes uint64
	openFDs  int
	ok       bool
}

// readProcess reads the figures of the process whose /proc directory is dir ("/proc/self"). RSS
// is statm's resident pages times the page size, as the kernel counts them for VmRSS; the open
// files are the entries of fd/ (the one this read holds open included, as Prometheus's own
// collector counts them).
func readProcess(dir string) processStats {
	s := processStats{goroutines: runtime.NumGoroutine()}
	statm, err := os.ReadFile(filepath.Join(dir, "statm"))
	if err != nil {
		return s
	}
	fields := strings.Fields(string(statm))
	if len(fields) < 2 {
		return s
	}
	pages, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return s
	}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return s
	}
	s.rssBytes, s.openFDs, s.ok = pages*uint64(os.Getpagesize()), len(fds), true
	return s
}

// writeProcessMetrics writes the process's figures under the names every Prometheus client
// library gives them (go_goroutines, process_resident_memory_bytes, process_open_fds), not under
// raftlock_: dashboards and alerts written for any Go service read them unchanged. Without /proc
// only the goroutines are written.
func writeProcessMetrics(w io.Writer, s processStats) {
	// Whole numbers, written whole: a scraper that is not Prometheus (a script, the soak) reads
	// 41943040 more surely than 4.194304e+07.
	metric := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	metric("go_goroutines", "Number of goroutines that currently exist.", uint64(s.goroutines))
	if s.ok {
		metric("process_resident_memory_bytes", "Resident memory size in bytes.", s.rssBytes)
		metric("process_open_fds", "Number of open file descriptors.", uint64(s.openFDs))
	}
}
