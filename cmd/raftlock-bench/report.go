package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// reportSchema names the layout of the JSON report; bump it when a field
// changes meaning.
const reportSchema = "raftlock-bench/1"

// host describes the machine the benchmark ran on.
type host struct {
	GOMAXPROCS   int
	NumCPU       int
	LoadAvgStart string
	LoadAvgEnd   string
}

// loadAvg returns the three load averages from /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// printSettings writes the one-line description of the run.
func printSettings(w io.Writer, cfg Config, h host) {
	wait := ""
	if cfg.Workload == WorkloadHotWait {
		wait = fmt.Sprintf(" wait=%v", cfg.Wait)
	}
	fmt.Fprintf(w, "raftlock-bench addr=%s conns=%d pipeline=%d mode=%s workload=%s%s duration=%v warmup=%v ops=%d ttl=%v keys-prefix=%q tls=%t auth=%t gomaxprocs=%d cpus=%d loadavg=%q\n",
		cfg.Addr, cfg.Conns, cfg.Pipeline, cfg.Mode, cfg.Workload, wait, cfg.Duration, cfg.Warmup, cfg.Ops, cfg.TTL, cfg.KeysPrefix,
		cfg.Auth.TLS, cfg.Auth.Pass != "", h.GOMAXPROCS, h.NumCPU, h.LoadAvgStart)
}

// printTable writes one line per measured operation, then a summary line.
// Latencies are in microseconds; in a pipeline every operation is charged
// its batch's round trip.
func printTable(w io.Writer, cfg Config, res Result, h host) {
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	fmt.Fprintf(w, "%-8s %10s %11s %9s %9s %9s %9s %9s\n",
		"op", "count", "ops/s", "mean(us)", "p50(us)", "p99(us)", "p999(us)", "max(us)")
	for _, op := range res.Ops {
		fmt.Fprintf(w, "%-8s %10d %11.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
			op.Name, op.Count, op.PerSec, us(op.Mean), us(op.P50), us(op.P99), us(op.P999), us(op.Max))
	}
	if cfg.Workload != WorkloadDistinct {
		fmt.Fprintf(w, "attempts=%d handoffs=%d handoffs/s=%.1f refusals=%d", res.Cycles, res.Handoffs, res.Rate(res.Handoffs), res.Refusals)
	} else {
		fmt.Fprintf(w, "cycles=%d cycles/s=%.1f", res.Cycles, res.Rate(res.Cycles))
	}
	fmt.Fprintf(w, " errors=%d (server=%d io=%d unexpected=%d) elapsed=%v loadavg_end=%q\n",
		res.Errors, res.ServerErrors, res.IOErrors, res.UnexpectedReplies, res.Elapsed.Round(time.Millisecond), h.LoadAvgEnd)
}

// jsonReport is the machine-readable form of a run. Durations are integer
// nanoseconds, rates are per second.
type jsonReport struct {
	Schema            string       `json:"schema"`
	Settings          jsonSettings `json:"settings"`
	ElapsedNS         int64        `json:"elapsed_ns"`
	Cycles            int64        `json:"cycles"`
	CyclesPerSec      float64      `json:"cycles_per_sec"`
	Handoffs          int64        `json:"handoffs"`
	HandoffsPerSec    float64      `json:"handoffs_per_sec"`
	Refusals          int64        `json:"refusals"`
	Errors            int64        `json:"errors"`
	ServerErrors      int64        `json:"server_errors"`
	IOErrors          int64        `json:"io_errors"`
	UnexpectedReplies int64        `json:"unexpected_replies"`
	FirstErrors       []string     `json:"first_errors"`
	Aborted           string       `json:"aborted,omitempty"`
	Latency           []jsonOp     `json:"latency"`
}

type jsonSettings struct {
	Addr         string `json:"addr"`
	Conns        int    `json:"conns"`
	Pipeline     int    `json:"pipeline"`
	Mode         string `json:"mode"`
	Workload     string `json:"workload"`
	DurationNS   int64  `json:"duration_ns"`
	WarmupNS     int64  `json:"warmup_ns"`
	Ops          int64  `json:"ops"`
	TTLMS        int64  `json:"ttl_ms"`
	KeysPrefix   string `json:"keys_prefix"`
	TLS          bool   `json:"tls"`
	Auth         bool   `json:"auth"` // whether AUTH was sent (never the password)
	GOMAXPROCS   int    `json:"gomaxprocs"`
	NumCPU       int    `json:"num_cpu"`
	GoVersion    string `json:"go_version"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

type jsonOp struct {
	Op     string  `json:"op"`
	Count  uint64  `json:"count"`
	PerSec float64 `json:"per_sec"`
	MinNS  int64   `json:"min_ns"`
	MeanNS int64   `json:"mean_ns"`
	P50NS  int64   `json:"p50_ns"`
	P99NS  int64   `json:"p99_ns"`
	P999NS int64   `json:"p999_ns"`
	MaxNS  int64   `json:"max_ns"`
}

// printJSON writes the run as one JSON object on one line (so that runs can
// be appended to a JSON Lines file). runErr,
// if not nil, is why the run was cut short.
func printJSON(w io.Writer, cfg Config, res Result, h host, runErr error) error {
	r := jsonReport{
		Schema: reportSchema,
		Settings: jsonSettings{
			Addr:         cfg.Addr,
			Conns:        cfg.Conns,
			Pipeline:     cfg.Pipeline,
			Mode:         string(cfg.Mode),
			Workload:     string(cfg.Workload),
			DurationNS:   int64(cfg.Duration),
			WarmupNS:     int64(cfg.Warmup),
			Ops:          cfg.Ops,
			TTLMS:        cfg.TTL.Milliseconds(),
			KeysPrefix:   cfg.KeysPrefix,
			TLS:          cfg.Auth.TLS,
			Auth:         cfg.Auth.Pass != "",
			GOMAXPROCS:   h.GOMAXPROCS,
			NumCPU:       h.NumCPU,
			GoVersion:    runtime.Version(),
			LoadAvgStart: h.LoadAvgStart,
			LoadAvgEnd:   h.LoadAvgEnd,
		},
		ElapsedNS:         int64(res.Elapsed),
		Cycles:            res.Cycles,
		CyclesPerSec:      res.Rate(res.Cycles),
		Handoffs:          res.Handoffs,
		HandoffsPerSec:    res.Rate(res.Handoffs),
		Refusals:          res.Refusals,
		Errors:            res.Errors,
		ServerErrors:      res.ServerErrors,
		IOErrors:          res.IOErrors,
		UnexpectedReplies: res.UnexpectedReplies,
		FirstErrors:       res.FirstErrors,
		Latency:           []jsonOp{},
	}
	if r.FirstErrors == nil {
		r.FirstErrors = []string{}
	}
	if runErr != nil {
		r.Aborted = runErr.Error()
	}
	for _, op := range res.Ops {
		r.Latency = append(r.Latency, jsonOp{
			Op:     op.Name,
			Count:  op.Count,
			PerSec: op.PerSec,
			MinNS:  int64(op.Min),
			MeanNS: int64(op.Mean),
			P50NS:  int64(op.P50),
			P99NS:  int64(op.P99),
			P999NS: int64(op.P999),
			MaxNS:  int64(op.Max),
		})
	}
	if err := json.NewEncoder(w).Encode(r); err != nil {
		return fmt.Errorf("write json report: %w", err)
	}
	return nil
}
