package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFillAgainstFake(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	args := []string{"-addr", addr, "-locks", "1000", "-conns", "4", "-pipeline", "16", "-keys-prefix", "f:", "-json"}
	for _, mode := range []Mode{ModeNative, ModeSetNX} {
		t.Run(string(mode), func(t *testing.T) {
			var stdout, stderr strings.Builder
			prefix := "f:" + string(mode) + ":"
			a := append(append([]string{"fill"}, args...), "-mode", string(mode), "-keys-prefix", prefix)
			if err := run(t.Context(), a, &stdout, &stderr); err != nil {
				t.Fatalf("run(%q) = %v\nstderr:\n%s", a, err, stderr.String())
			}
			var rep fillReport
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil {
				t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
			}
			if rep.Granted != 1000 || rep.Errors != 0 || rep.Refused != 0 || rep.LocksPerSec <= 0 {
				t.Errorf("report = %+v, want 1000 granted, no errors or refusals", rep)
			}

			// The same keys again: every one is held already.
			stdout.Reset()
			err := run(t.Context(), a, &stdout, io.Discard)
			if !errors.Is(err, errFailures) {
				t.Fatalf("second fill = %v, want errFailures", err)
			}
			if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || rep.Refused != 1000 || rep.Granted != 0 {
				t.Errorf("second fill report = %+v (%v), want 1000 refused", rep, err)
			}
		})
	}
}

func TestFillStopsAtStopAt(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	f := &filler{
		addr: addr, conns: 2, pipeline: 8, n: 1000, mode: ModeSetNX, log: testLogger(t),
		stopAt:  time.Now().Add(-time.Second),
		key:     func(i int64) string { return strconv.FormatInt(i, 10) },
		acquire: func(_ int, key string) []any { return []any{"SET", key, "v", "NX", "PX", 1000} },
	}
	res, err := f.run(t.Context())
	if err != nil || !res.Stopped || res.Granted != 0 {
		t.Errorf("run = %+v, %v; want stopped before the first batch", res, err)
	}
}

func TestFillUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = run(t.Context(), []string{"fill", "-addr", addr, "-locks", "10", "-conns", "2"}, io.Discard, io.Discard)
	if !errors.Is(err, errNoConnection) {
		t.Errorf("fill against a closed port = %v, want errNoConnection", err)
	}
}

// TestExpiryAgainstFake runs a short expiry scenario: the fake drops every
// lease exactly at its deadline, so the wave is over at the first poll.
func TestExpiryAgainstFake(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	c := DefaultExpiryConfig()
	c.Addr, c.Leases, c.LeaseTTL, c.Conns = addr, 500, 600*time.Millisecond, 2
	c.Baseline, c.After, c.Window, c.DrainTimeout = 200*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond, 5*time.Second
	res, err := runExpiryScenario(t.Context(), c, testLogger(t))
	if err != nil {
		t.Fatalf("runExpiryScenario: %v", err)
	}
	if res.Fill.Granted != 500 || res.Fill.Stopped || res.HeldAfterFill < 500 || res.HeldAfterFill > 502 {
		t.Errorf("fill = %+v, held after %d; want 500 granted and held (plus up to 2 probe locks)", res.Fill, res.HeldAfterFill)
	}
	if !res.Drained || res.DrainLag < 0 || res.DrainLag > time.Second || res.Errors() != 0 {
		t.Errorf("drained %v after %v with %d probe errors (%q), want drained at once and no errors",
			res.Drained, res.DrainLag, res.Errors(), res.FirstErrors)
	}
	var names []string
	for i, p := range res.Phases {
		names = append(names, p.Name)
		if i > 0 && p.Start != res.Phases[i-1].End {
			t.Errorf("phase %s starts at %v, want the end of %s, %v", p.Name, p.Start, res.Phases[i-1].Name, res.Phases[i-1].End)
		}
	}
	if got, want := strings.Join(names, ","), "before,fill,hold,wave,after"; got != want {
		t.Errorf("phases = %s, want %s", got, want)
	}
	for _, i := range []int{0, 2, 4} { // before, hold, after: long enough to see grants
		if p := res.Phases[i]; p.Grants == 0 || p.MinWindowPerSec < 0 {
			t.Errorf("phase %s = %+v, want grants and a slowest window", p.Name, p)
		}
	}
}

func TestExpiryFillOverrunFails(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	// A lease deadline too close for 100k leases: the fill must stop, and
	// the run must say so rather than report a wave that never was whole.
	args := []string{"expiry", "-addr", addr, "-leases", "100000", "-lease-ttl", "150ms", "-conns", "1",
		"-fill-pipeline", "1", "-fill-conns", "1", "-baseline", "0s", "-after", "0s", "-drain-timeout", "2s"}
	var stdout strings.Builder
	err := run(t.Context(), args, &stdout, io.Discard)
	if !errors.Is(err, errFailures) || !strings.Contains(err.Error(), "lease-ttl") {
		t.Errorf("run = %v, want errFailures naming lease-ttl", err)
	}
	if !strings.Contains(stdout.String(), "phase") {
		t.Errorf("the table was not printed:\n%s", stdout.String())
	}
}

func TestReadyAgainstFake(t *testing.T) {
	addr := startFake(t, &fakeLockServer{})
	if err := run(t.Context(), []string{"fill", "-addr", addr, "-locks", "3", "-keys-prefix", "r:"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("fill: %v", err)
	}
	since := time.Now()
	c := ReadyConfig{Addr: addr, Since: since, ReadKey: "r:2", Interval: time.Millisecond, Timeout: 5 * time.Second}
	r, err := waitReady(t.Context(), c)
	if err != nil {
		t.Fatalf("waitReady: %v", err)
	}
	if elapsed := time.Since(since); r.Connected <= 0 || r.Write < r.Connected || r.Read < r.Write || r.Read > elapsed {
		t.Errorf("times = %+v, want 0 < connected <= write <= read <= %v", r, elapsed)
	}

	// A key the node does not hold: it serves, but never counts as ready.
	c.ReadKey, c.Since, c.Timeout = "r:missing", time.Now(), 300*time.Millisecond
	start := time.Now()
	r, err = waitReady(t.Context(), c)
	if !errors.Is(err, errFailures) || r.Write <= 0 || r.Read != 0 {
		t.Errorf("waitReady for a missing key = %+v, %v; want written, not read, errFailures", r, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("waitReady took %v with a 300ms timeout", d)
	}
}

func TestReadyUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stdout strings.Builder
	err = run(t.Context(), []string{"ready", "-addr", addr, "-timeout", "200ms", "-json"}, &stdout, io.Discard)
	if !errors.Is(err, errFailures) || exitCode(err, io.Discard) != 1 {
		t.Errorf("ready against a closed port = %v, want errFailures and exit 1", err)
	}
	var rep map[string]any
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || rep["write_ms"] != 0.0 || rep["attempts"] == 0.0 {
		t.Errorf("report = %v (%v), want write_ms 0 after some attempts", rep, err)
	}
}

func TestScaleArgsRejects(t *testing.T) {
	tests := []struct {
		args    []string
		wantMsg string // the message must name the offending flag
	}{
		{[]string{"fill", "-locks", "0"}, "locks"},
		{[]string{"fill", "-mode", "setnx-eval"}, "mode"},
		{[]string{"fill", "-ttl", "0"}, "ttl"},
		{[]string{"fill", "-ttl", "9223372036854775807"}, "ttl"},
		{[]string{"fill", "-pipeline", "0"}, "pipeline"},
		{[]string{"fill", "extra"}, "extra"},
		{[]string{"expiry", "-leases", "0"}, "leases"},
		{[]string{"expiry", "-lease-ttl", "50ms"}, "lease-ttl"},
		{[]string{"expiry", "-conns", "0"}, "conns"},
		{[]string{"expiry", "-window", "0s"}, "window"},
		{[]string{"expiry", "-addr", "nohost"}, "addr"},
		{[]string{"ready", "-since", "12"}, "since"},
		{[]string{"ready", "-interval", "0s"}, "interval"},
		{[]string{"ready", "-frobnicate"}, "frobnicate"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			err := run(t.Context(), tt.args, io.Discard, &stderr)
			if !errors.Is(err, errUsage) || exitCode(err, io.Discard) != 2 {
				t.Fatalf("run(%q) = %v, want a usage error (exit 2)", tt.args, err)
			}
			if !strings.Contains(stderr.String(), tt.wantMsg) {
				t.Errorf("stderr %q does not explain %q", stderr.String(), tt.wantMsg)
			}
		})
	}
}
