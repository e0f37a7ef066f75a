package main

import (
	"fmt"
	"io"
	"math"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/raftlock/raftlock/tests/bench/internal/stats"
)

// results holds every run of every row.
type results map[rowKey][]cellResult

type rowKey struct{ setting, row string }

func (r results) add(s setting, row string, c cellResult) {
	k := rowKey{s.name, row}
	r[k] = append(r[k], c)
}

// summary is one row: the median of each figure over the runs that
// measured something (each figure on its own).
type summary struct {
	runs                int
	rate                float64
	p50, p99, p999      float64 // milliseconds
	cpuUS               float64 // servers' CPU per pair, µs; 0 if unknown
	load1               float64
	spread              float64 // (max-min)/median of rate
	errs                int64
	firstErr            error
	measured, attempted int
}

func (r results) summary(s setting, row string) (summary, bool) {
	cs, ok := r[rowKey{s.name, row}]
	if !ok {
		return summary{}, false
	}
	var (
		sum                         summary
		rate, p50, p99, p999, load1 []float64
		cpu                         []float64
	)
	for _, c := range cs {
		sum.errs += c.errs
		if sum.firstErr == nil {
			sum.firstErr = c.firstErr
		}
		if !c.measured {
			continue // failed: it only adds its errors
		}
		rate = append(rate, c.rate)
		if c.p50 > 0 { // a hand-off cell may have measured no wait
			p50 = append(p50, msf(c.p50))
			p99 = append(p99, msf(c.p99))
			p999 = append(p999, msf(c.p999))
		}
		load1 = append(load1, c.load1)
		if c.cpuUS > 0 {
			cpu = append(cpu, c.cpuUS)
		}
	}
	sum.runs, sum.attempted = len(rate), len(cs)
	if len(rate) == 0 {
		return sum, true
	}
	sum.rate, sum.p50, sum.p99, sum.p999, sum.load1 = stats.Median(rate), stats.Median(p50), stats.Median(p99), stats.Median(p999), stats.Median(load1)
	if len(cpu) > 0 {
		sum.cpuUS = stats.Median(cpu)
	}
	lo, hi := rate[0], rate[0]
	for _, x := range rate {
		lo, hi = min(lo, x), max(hi, x)
	}
	if sum.rate > 0 {
		sum.spread = (hi - lo) / sum.rate
	}
	return sum, true
}

// printReport prints the Markdown report: how it was measured, the table,
// and the figures the project's targets are judged by.
func printReport(w io.Writer, cfg config, systems []*system, res results, load1 float64, took time.Duration) {
	fmt.Fprintf(w, "### raftlock vs Redis, Redlock and etcd (make bench-compare)\n\n")
	fmt.Fprintf(w, "%s · %d cores, load1 %.2f at the start · %s · %s · %s · median of %d runs of %v (+%v warmup) per cell, systems interleaved round by round · took %v\n\n",
		time.Now().Format("2006-01-02 15:04"), runtime.NumCPU(), load1, runtime.Version(),
		version(cfg.redisServer, "--version"), version(cfg.etcd, "--version"),
		cfg.runs, cfg.duration, cfg.warmup, took.Round(time.Second))
	fmt.Fprintln(w, "| setting | system, client | ops/s | acquire p50 ms | acquire p99 ms | acquire p999 ms | server CPU µs/pair | ops/s spread | errors | load1 | raftlock row compared | ops/s ratio | p50 ratio | p99 ratio | p999 ratio | CPU ratio |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|")
	for _, s := range cfg.settings() {
		for _, sys := range systems {
			for i := range sys.clients {
				cl := &sys.clients[i]
				row := rowLabel(sys, cl)
				sum, ok := res.summary(s, row)
				if !ok {
					continue
				}
				fmt.Fprintf(w, "| %s | %s | %s |\n", s.name, row, strings.Join(rowCells(sum, sys.ref(s), res, s), " | "))
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "ops/s: acquire+release cycles per second on distinct keys; on the hot key, handoffs per second (grants, each released at once).")
	fmt.Fprintln(w, "acquire p50/p99/p999: latency of the acquire, from asking to the grant (not of the whole cycle); a pipelined batch charges its round trip to each")
	fmt.Fprintln(w, "of its operations; on the hot key, from the first try to the grant: Redis-protocol clients retry at once when refused, etcd's Mutex waits in its queue.")
	fmt.Fprintln(w, "hand-off, N waiters: N clients queue on one key and release each grant at once, so the server hands the lock to the next waiter: raftlock with")
	fmt.Fprintf(w, "LOCK key ttl OWNER o WAIT %d (one connection per waiter; the leader's FIFO), etcd with Mutex.Lock (a session per waiter over up to %d gRPC connections;\n", handoffWait.Milliseconds(), etcdHandoffConns)
	fmt.Fprintln(w, "FIFO by revision). ops/s is hand-offs per second (acquire→release→next acquire) and p50/p99/p999 the wait, from asking to the grant; the warmup")
	fmt.Fprintf(w, "lasts until every waiter has been granted once, so that each wait measured began at the tail of the full queue, but at most %v more: a queue that\n", handoffRampLimit)
	fmt.Fprintln(w, "did not come round by then shows its hand-offs/s (0 if none in the window), no waits, and an error that says so. Redis and Redlock have no queue.")
	fmt.Fprintln(w, "16 conns × 16 deep: Redis protocol pipelines 16 cycles per connection; etcd multiplexes 16 mutexes (a session each) per gRPC connection; Redlock cannot pipeline.")
	fmt.Fprintln(w, "raftlock rows use LOCK key ttl / UNLOCK key token, or SET key value NX PX ttl / EVALSHA of the compare-and-delete script (loaded once). Everything durable fsyncs before replying,")
	fmt.Fprintln(w, "except the rows that say \"no persistence\". raftlock 3 nodes and etcd 3 members are driven through their leader.")
	fmt.Fprintln(w, "server CPU µs/pair: user+system time of every server process of the system (all nodes or members; all 3 redis-servers for Redlock), from /proc/PID/stat")
	fmt.Fprintln(w, "over the measured window, per acquire+release pair (on the hot key, per handoff); the load generator's own CPU is not in it. Clock ticks of 1/CLK_TCK s.")
	fmt.Fprintln(w, "ops/s spread: (max-min)/median over the runs. load1: median 1-minute load average when the cell started.")
	fmt.Fprintln(w, "ratios: the raftlock row named (same node count; LOCK/UNLOCK, SET NX PX on the SET NX PX row, LOCK WAIT on the hand-off rows) ÷ this row:")
	fmt.Fprintln(w, "ops/s above 1, latency and CPU below 1 favour raftlock.")
	fmt.Fprintln(w)
	printTargets(w, cfg, res)
}

// rowCells renders one row after its first two columns.
func rowCells(sum summary, ref string, res results, s setting) []string {
	errs := fmt.Sprint(sum.errs)
	if sum.firstErr != nil {
		errs += " (" + oneLine(sum.firstErr.Error(), 60) + ")"
	}
	if sum.runs == 0 {
		return []string{"failed", "", "", "", "", "", errs, "", "", "", "", "", "", ""}
	}
	out := []string{
		fmt.Sprintf("%.0f", sum.rate), num(sum.p50), num(sum.p99), num(sum.p999), num(sum.cpuUS),
		fmt.Sprintf("%.0f%%", 100*sum.spread), errs, fmt.Sprintf("%.2f", sum.load1),
	}
	if sum.runs < sum.attempted {
		out[0] += fmt.Sprintf(" (%d of %d runs)", sum.runs, sum.attempted)
	}
	refSum, ok := res.summary(s, ref)
	if ref == "" || !ok || refSum.runs == 0 {
		return append(out, "—", "", "", "", "", "")
	}
	return append(out, strings.TrimPrefix(ref, "raftlock "),
		ratio(refSum.rate, sum.rate), ratio(refSum.p50, sum.p50), ratio(refSum.p99, sum.p99), ratio(refSum.p999, sum.p999), ratio(refSum.cpuUS, sum.cpuUS))
}

// printTargets prints the comparisons the project's targets name.
func printTargets(w io.Writer, cfg config, res results) {
	const (
		rl1SetNX  = "raftlock 1 node, " + setNXLabel
		rl3       = "raftlock 3 nodes, " + nativeLabel
		rl3Wait   = "raftlock 3 nodes, " + waitLabel
		etcd3     = "etcd 3 members, concurrency.Mutex"
		redsync3  = "Redlock, 3× redis appendfsync always, redsync"
		redsyncNo = "Redlock, 3× redis no persistence, redsync"
		redisSync = "redis appendfsync always, " + setNXLabel
	)
	get := func(s setting, row string) summary {
		sum, _ := res.summary(s, row)
		return sum
	}
	fmt.Fprintln(w, "Targets (medians from the table):")
	a, e, r, rn := get(conns64, rl3), get(conns64, etcd3), get(conns64, redsync3), get(conns64, redsyncNo)
	fmt.Fprintf(w, "- 3-node raftlock at 64 conns: %s ops/s = %s etcd 3 members (%s), %s redsync over 3 fsync-always Redis (%s), %s redsync over 3 Redis without persistence (%s)\n",
		opsOrNA(a), ratio(a.rate, e.rate), opsOrNA(e), ratio(a.rate, r.rate), opsOrNA(r), ratio(a.rate, rn.rate), opsOrNA(rn))
	a, r = get(setNX50, rl1SetNX), get(setNX50, redisSync)
	fmt.Fprintf(w, "- 1-node raftlock, SET NX PX at 50 conns: %s ops/s = %s fsync-always Redis (%s); p99 %s ms vs %s ms\n",
		opsOrNA(a), ratio(a.rate, r.rate), opsOrNA(r), num(a.p99), num(r.p99))
	a, e, r = get(oneConn, rl3), get(oneConn, etcd3), get(oneConn, redsync3)
	fmt.Fprintf(w, "- 3-node raftlock, 1 conn, acquire p50: %s ms (etcd 3 members %s ms, redsync %s ms)\n", num(a.p50), num(e.p50), num(r.p50))
	a, e, r = get(conns16, rl3), get(conns16, etcd3), get(conns16, redsync3)
	fmt.Fprintf(w, "- 3-node raftlock, 16 conns, acquire p99: %s ms (etcd 3 members %s ms, redsync %s ms)\n", num(a.p99), num(e.p99), num(r.p99))
	for _, n := range cfg.waiters {
		s := handoffSetting(n)
		a, e = get(s, rl3Wait), get(s, etcd3)
		fmt.Fprintf(w, "- 3-node raftlock, hot key with %d waiters: %s hand-offs/s = %s etcd 3 members (%s); wait p50 %s ms vs %s ms, p99 %s ms vs %s ms; CPU %s µs vs %s µs per hand-off\n",
			n, opsOrNA(a), ratio(a.rate, e.rate), opsOrNA(e), num(a.p50), num(e.p50), num(a.p99), num(e.p99), num(a.cpuUS), num(e.cpuUS))
	}
}

// ratio returns a/b as "1.23×" (one significant digit below 0.01:
// "0.002×"), or "n/a" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	if r := a / b; r < 0.01 {
		return fmt.Sprintf("%.1g×", r)
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func opsOrNA(s summary) string {
	if s.runs == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", s.rate)
}

// num prints milliseconds with three significant digits and no exponent.
func num(x float64) string {
	switch {
	case x <= 0 || math.IsNaN(x):
		return "n/a"
	case x < 1:
		return fmt.Sprintf("%.3f", x)
	case x < 10:
		return fmt.Sprintf("%.2f", x)
	case x < 100:
		return fmt.Sprintf("%.1f", x)
	default:
		return fmt.Sprintf("%.0f", x)
	}
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ms(d time.Duration) string { return num(msf(d)) + "ms" }

// oneLine shortens s to n bytes on one line, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// version returns the first line bin prints for args ("Redis server
// v=7.0.15 ...", "etcd Version: 3.7.3"), shortened.
func version(bin string, args ...string) string {
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		return bin + " (version unknown)"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if f := strings.Fields(line); len(f) >= 3 && f[0] == "Redis" {
		return "redis " + strings.TrimPrefix(f[2], "v=")
	}
	return strings.Replace(line, " Version:", "", 1)
}
