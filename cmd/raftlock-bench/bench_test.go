package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/raftlock/raftlock/tests/testutil"
)

func TestMain(m *testing.M) {
	// A go-redis client whose dial failed (a certificate refused, in
	// TestAgainstSecureNode) redials in the background, sleeping 1 s between
	// tries, and notices its Close only after that sleep: longer than goleak
	// looks again. It ends on its own.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// shortConfig is a run of about one second against addr.
func shortConfig(addr string, mode Mode, wl Workload) Config {
	c := DefaultConfig()
	c.Addr, c.Mode, c.Workload = addr, mode, wl
	c.Conns = 4
	c.Warmup = 200 * time.Millisecond
	c.Duration = 800 * time.Millisecond
	c.KeysPrefix = "raftlock-bench-test:"
	return c
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// checkClean asserts a run that measured something and failed nothing, with
// counts that agree with each other.
func checkClean(t *testing.T, cfg Config, res Result) {
	t.Helper()
	if res.Errors != 0 {
		t.Errorf("Errors = %d (server %d, io %d, unexpected %d; first %q), want 0",
			res.Errors, res.ServerErrors, res.IOErrors, res.UnexpectedReplies, res.FirstErrors)
	}
	if res.Cycles <= 0 {
		t.Fatalf("Cycles = %d, want > 0", res.Cycles)
	}
	if res.Elapsed <= 0 || res.Elapsed > cfg.Duration+2*time.Second {
		t.Errorf("Elapsed = %v, want in (0, %v]", res.Elapsed, cfg.Duration+2*time.Second)
	}
	counts := make(map[string]uint64)
	for _, op := range res.Ops {
		counts[op.Name] = op.Count
		if op.Count > 0 && !(op.Min <= op.P50 && op.P50 <= op.P99 && op.P99 <= op.P999 && op.P999 <= op.Max && op.Min > 0) {
			t.Errorf("%s: percentiles out of order: min %v p50 %v p99 %v p999 %v max %v", op.Name, op.Min, op.P50, op.P99, op.P999, op.Max)
		}
	}
	cycles := uint64(res.Cycles)
	if cfg.Workload == WorkloadHotWait {
		if res.Handoffs <= 0 {
			t.Errorf("Handoffs = %d, want > 0", res.Handoffs)
		}
		if got, want := res.Handoffs+res.Refusals, res.Cycles; got != want {
			t.Errorf("Handoffs+Refusals = %d, want Cycles %d", got, want)
		}
		h := uint64(res.Handoffs)
		want := map[string]uint64{"wait": h, "release": h, "handoff": h}
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Errorf("op counts = %v, want %v", counts, want)
		}
		return
	}
	if cfg.Workload == WorkloadContended {
		if res.Handoffs <= 0 {
			t.Errorf("Handoffs = %d, want > 0", res.Handoffs)
		}
		if got, want := res.Handoffs+res.Refusals, res.Cycles; got != want {
			t.Errorf("Handoffs+Refusals = %d, want Cycles %d", got, want)
		}
		want := map[string]uint64{"attempt": cycles, "acquire": uint64(res.Handoffs), "release": uint64(res.Handoffs), "handoff": uint64(res.Handoffs)}
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Errorf("op counts = %v, want %v", counts, want)
		}
		return
	}
	if res.Handoffs != 0 || res.Refusals != 0 {
		t.Errorf("distinct: Handoffs = %d, Refusals = %d, want 0, 0", res.Handoffs, res.Refusals)
	}
	want := map[string]uint64{"acquire": cycles, "release": cycles, "cycle": cycles}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("op counts = %v, want %v", counts, want)
	}
}

// TestNativeAgainstFake runs the native mode against an in-process server
// that implements LOCK and UNLOCK, since raftlock itself is not runnable yet.
func TestNativeAgainstFake(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	tests := []struct {
		name     string
		workload Workload
		pipeline int
		ops      int64
	}{
		{"distinct", WorkloadDistinct, 1, 0},
		{"distinct pipelined", WorkloadDistinct, 16, 0},
		{"contended", WorkloadContended, 1, 0},
		{"distinct ops budget", WorkloadDistinct, 1, 300},
		{"distinct pipelined ops budget", WorkloadDistinct, 7, 300},
		{"contended ops budget", WorkloadContended, 1, 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := shortConfig(addr, ModeNative, tt.workload)
			cfg.Pipeline, cfg.Ops = tt.pipeline, tt.ops
			if tt.ops > 0 {
				cfg.Duration = 30 * time.Second // the budget must end the run
			}
			start := time.Now()
			res, err := runBench(t.Context(), cfg, testLogger(t))
			if err != nil {
				t.Fatalf("runBench: %v", err)
			}
			checkClean(t, cfg, res)
			if tt.ops > 0 {
				if res.Cycles != tt.ops {
					t.Errorf("Cycles = %d, want the -ops budget %d", res.Cycles, tt.ops)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("run took %v: the ops budget did not stop it", d)
				}
			}
		})
	}
}

func TestUnexpectedRepliesAreCounted(t *testing.T) {
	zero := 0
	addr := startFake(t, &fakeLockServer{unlockReply: &zero})
	cfg := shortConfig(addr, ModeNative, WorkloadDistinct)
	res, err := runBench(t.Context(), cfg, testLogger(t))
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	if res.UnexpectedReplies == 0 || res.Errors != res.UnexpectedReplies {
		t.Errorf("UnexpectedReplies = %d, Errors = %d, want equal and > 0", res.UnexpectedReplies, res.Errors)
	}
	if res.Cycles != 0 {
		t.Errorf("Cycles = %d, want 0: no release succeeded", res.Cycles)
	}
	if len(res.FirstErrors) != maxLoggedErrors {
		t.Errorf("FirstErrors has %d entries, want %d", len(res.FirstErrors), maxLoggedErrors)
	}
	if len(res.FirstErrors) > 0 && !strings.Contains(res.FirstErrors[0], "unexpected reply to UNLOCK") {
		t.Errorf("FirstErrors[0] = %q, want an unexpected reply to UNLOCK", res.FirstErrors[0])
	}
}

// TestStalledServerIsBounded checks that a server that never answers cannot
// hold the run past its context's deadline.
func TestStalledServerIsBounded(t *testing.T) {
	addr := startFake(t, &fakeLockServer{stall: true})
	cfg := shortConfig(addr, ModeNative, WorkloadDistinct)
	cfg.Duration = time.Minute
	cause := errors.New("test deadline")
	ctx, cancel := context.WithTimeoutCause(t.Context(), 500*time.Millisecond, cause)
	defer cancel()
	start := time.Now()
	res, err := runBench(ctx, cfg, testLogger(t))
	if !errors.Is(err, cause) {
		t.Errorf("runBench = %v, want an error wrapping %v", err, cause)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("runBench returned after %v, want soon after the 500ms deadline", d)
	}
	if res.Cycles != 0 || res.Errors != 0 {
		t.Errorf("Cycles = %d, Errors = %d, want 0, 0 (an abort is not an operation failure)", res.Cycles, res.Errors)
	}
}

func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = runBench(t.Context(), shortConfig(addr, ModeSetNX, WorkloadDistinct), testLogger(t))
	if !errors.Is(err, errNoConnection) {
		t.Errorf("runBench = %v, want errNoConnection", err)
	}
}

// startRedis runs redis-server on a free port for the test (testutil.StartRedis) and returns
// its address; it skips the test if redis-server is not installed.
func startRedis(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server not on PATH")
	}
	_, addr := testutil.StartRedis(t, path)
	return addr
}

// TestAgainstRedis is the integration test: about a second of each SET NX
// mode and workload against a real redis-server.
func TestAgainstRedis(t *testing.T) {
	addr := startRedis(t)
	for _, mode := range []Mode{ModeSetNX, ModeSetNXEval} {
		for _, tc := range []struct {
			workload Workload
			pipeline int
		}{
			{WorkloadDistinct, 1},
			{WorkloadDistinct, 8},
			{WorkloadContended, 1},
		} {
			t.Run(fmt.Sprintf("%s/%s/pipeline=%d", mode, tc.workload, tc.pipeline), func(t *testing.T) {
				cfg := shortConfig(addr, mode, tc.workload)
				cfg.Pipeline = tc.pipeline
				res, err := runBench(t.Context(), cfg, testLogger(t))
				if err != nil {
					t.Fatalf("runBench: %v", err)
				}
				checkClean(t, cfg, res)
			})
		}
	}
}

// TestRunJSON drives the command end to end: flags in, JSON out, and a
// non-nil error exactly when operations failed (redis knows no LOCK).
func TestRunJSON(t *testing.T) {
	addr := startRedis(t)
	tests := []struct {
		mode       Mode
		wantFailed bool
	}{
		{ModeSetNX, false},
		{ModeNative, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			var stdout, stderr strings.Builder
			args := []string{"-addr", addr, "-conns", "2", "-duration", "500ms", "-warmup", "100ms", "-mode", string(tt.mode), "-json"}
			err := run(t.Context(), args, &stdout, &stderr)
			if gotFailed := errors.Is(err, errFailures); gotFailed != tt.wantFailed {
				t.Fatalf("run = %v, want failed %v\nstderr:\n%s", err, tt.wantFailed, stderr.String())
			}
			if tt.wantFailed && exitCode(err, &stderr) != 1 {
				t.Errorf("exitCode = %d, want 1", exitCode(err, &stderr))
			}
			var rep jsonReport
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
			}
			if rep.Schema != reportSchema || rep.Settings.Addr != addr || rep.Settings.Mode != string(tt.mode) || rep.Settings.Conns != 2 {
				t.Errorf("report settings = %+v (schema %q), want addr %s mode %s conns 2", rep.Settings, rep.Schema, addr, tt.mode)
			}
			if tt.wantFailed {
				if rep.ServerErrors == 0 || len(rep.FirstErrors) == 0 {
					t.Errorf("server_errors = %d, first_errors = %q, want both non-empty", rep.ServerErrors, rep.FirstErrors)
				}
				return
			}
			if rep.Errors != 0 || rep.Cycles == 0 || rep.CyclesPerSec <= 0 || len(rep.Latency) != 3 {
				t.Errorf("report = %+v, want errors 0, cycles > 0 and 3 latency rows", rep)
			}
			for _, want := range []string{"raftlock-bench addr=" + addr, "gomaxprocs=", "loadavg=", "p999(us)", "cycles/s="} {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
		})
	}
}
