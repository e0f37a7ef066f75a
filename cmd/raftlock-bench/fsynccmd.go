package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/cmd/raftlock-bench/internal/latency"
)

// The fsync subcommand measures the floor every durable lock server on this disk stands on:
// how long one small synced append takes, alone and with other writers syncing their own files
// at the same time (three raft nodes, or three redis-servers, on one disk). A raftlock commit
// on 3 nodes is at least two of them one after the other (the leader's, then a follower's);
// Redlock's is one on each server, in parallel.

// FsyncConfig describes an fsync measurement.
type FsyncConfig struct {
	Dir      string        // where the writers' files go (removed afterwards)
	Writers  []int         // writer counts, each measured in turn
	Bytes    int           // bytes written before each fdatasync
	Duration time.Duration // per writer count
	MaxOps   int           // per writer, a bound on the loop
}

// FsyncResult is one writer count's figures.
type FsyncResult struct {
	Writers     int     `json:"writers"`
	Syncs       int     `json:"syncs"`
	SyncsPerSec float64 `json:"syncs_per_sec"`
	P50us       float64 `json:"p50_us"`
	P99us       float64 `json:"p99_us"`
	// UserUS and SysUS are the CPU time this process used per sync (getrusage, on Linux;
	// absent elsewhere): an fdatasync costs system time as well as waiting, which a server
	// pays once per commit on every node.
	UserUS *float64 `json:"user_us_per_sync,omitempty"`
	SysUS  *float64 `json:"sys_us_per_sync,omitempty"`
}

func runFsync(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("raftlock-bench fsync", flag.ContinueOnError)
	fs.Usage = usage(fs, stderr, "usage: raftlock-bench fsync [flags]\n\n"+
		"Measure one small append + fdatasync on -dir's disk, with 1, then 3 (-writers)\n"+
		"writers each syncing a file of its own at once: the floor of a durable commit.")
	dir := fs.String("dir", ".", "directory on the disk to measure (each writer appends to a file of its own there, removed after)")
	writers := fs.String("writers", "1,3", "comma-separated writer counts, measured one after the other")
	size := fs.Int("bytes", 200, "bytes appended before each fdatasync (a small raft entry)")
	duration := fs.Duration("duration", 3*time.Second, "measured time per writer count")
	asJSON := fs.Bool("json", false, "print one JSON array on stdout")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	cfg := FsyncConfig{Dir: *dir, Bytes: *size, Duration: *duration, MaxOps: 100_000}
	for _, w := range strings.Split(*writers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 64 {
			return invalid(fmt.Errorf("-writers %q: want counts from 1 to 64", *writers), stderr)
		}
		cfg.Writers = append(cfg.Writers, n)
	}
	if cfg.Bytes < 1 || cfg.Bytes > 1<<20 || cfg.Duration <= 0 || cfg.Duration > 10*time.Minute {
		return invalid(errors.New("want -bytes from 1 to 1048576 and -duration from 1ns to 10m"), stderr)
	}
	var results []FsyncResult
	for _, n := range cfg.Writers {
		r, err := measureFsync(ctx, cfg, n)
		if err != nil {
			return err
		}
		results = append(results, r)
		if !*asJSON {
			cpu := ""
			if r.SysUS != nil {
				cpu = fmt.Sprintf(" user(us/sync)=%.1f sys(us/sync)=%.1f", *r.UserUS, *r.SysUS)
			}
			fmt.Fprintf(stdout, "writers=%d syncs=%d syncs/s=%.0f p50(us)=%.0f p99(us)=%.0f%s bytes=%d dir=%s loadavg=%q\n",
				r.Writers, r.Syncs, r.SyncsPerSec, r.P50us, r.P99us, cpu, cfg.Bytes, cfg.Dir, loadAvg())
		}
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(results)
	}
	return nil
}

// measureFsync runs n writers at once for cfg.Duration, each appending cfg.Bytes to its own
// file and syncing it, and returns their syncs' figures together.
func measureFsync(ctx context.Context, cfg FsyncConfig, n int) (FsyncResult, error) {
	tmp, err := os.MkdirTemp(cfg.Dir, "raftlock-fsync-")
	if err != nil {
		return FsyncResult{}, err
	}
	defer os.RemoveAll(tmp)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		all   latency.Histogram
		first error
	)
	block := make([]byte, cfg.Bytes)
	user0, sys0, cpuOK := processCPU()
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var own latency.Histogram
			err := syncLoop(ctx, filepath.Join(tmp, "w"+strconv.Itoa(i)), block, deadline, cfg.MaxOps, &own)
			mu.Lock()
			defer mu.Unlock()
			all.Merge(&own)
			if err != nil && first == nil {
				first = err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return FsyncResult{}, first
	}
	user1, sys1, cpuOK1 := processCPU()
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	r := FsyncResult{Writers: n, Syncs: int(all.Count()), SyncsPerSec: float64(all.Count()) / elapsed.Seconds(),
		P50us: us(all.Quantile(0.50)), P99us: us(all.Quantile(0.99))}
	if cpuOK && cpuOK1 && r.Syncs > 0 {
		perSync := func(d time.Duration) *float64 { v := float64(d.Nanoseconds()) / 1e3 / float64(r.Syncs); return &v }
		r.UserUS, r.SysUS = perSync(user1-user0), perSync(sys1-sys0)
	}
	return r, nil
}

// syncLoop appends block to path and fdatasyncs it until deadline (or maxOps), recording each
// append+sync's time in h.
func syncLoop(ctx context.Context, path string, block []byte, deadline time.Time, maxOps int, h *latency.Histogram) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	for ops := 0; ops < maxOps && ctx.Err() == nil; ops++ {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		if _, err := f.Write(block); err != nil {
			return err
		}
		if err := fdatasync(f); err != nil {
			return err
		}
		h.Record(time.Since(t0))
	}
	return nil
}
