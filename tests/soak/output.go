package soak

import (
	"bufio"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// csvRow is one node's row of one interval: its process, and the requests its clients sent
// through it, rendered when sampled (so that no interval's latencies are kept to the end).
type csvRow struct {
	at   time.Duration
	node NodeSample
	load []string // the columns from "requests" on
}

// loadColumns renders one node's windows of one interval as soak.csv's load columns.
func loadColumns(load map[string]*window) []string {
	requests, errs := 0, 0
	kinds := map[string]int{}
	var perFamily []string
	for _, f := range families {
		w := load[f]
		if w == nil {
			perFamily = append(perFamily, "0", "", "", "")
			continue
		}
		requests += w.ops
		errs += w.errorCount()
		for k, n := range w.errors {
			kinds[k] += n
		}
		p50, p99, p999 := quantiles(w.latency)
		perFamily = append(perFamily, strconv.Itoa(w.ops), ms(p50), ms(p99), ms(p999))
	}
	return append([]string{strconv.Itoa(requests), strconv.Itoa(errs), kindList(kinds)}, perFamily...)
}

// writeFiles writes the run's figures into dir: soak.csv (a row per node per interval),
// latency.csv (a row per family per interval, every node's clients together: what the p99
// checks judge), restarts.csv, and the plot soak.svg drawn from them.
func writeFiles(dir string, rep *Report, rows []csvRow, interval time.Duration, warmup int) error {
	head := []string{"sample", "at_s", "node", "pid", "up", "fresh", "restarted", "leader", "rss_bytes", "goroutines", "open_fds",
		"requests", "errors", "error_kinds"}
	for _, f := range families {
		head = append(head, f+"_requests", f+"_p50_ms", f+"_p99_ms", f+"_p999_ms")
	}
	nodes := [][]string{head}
	for _, r := range rows {
		s := r.node
		row := []string{strconv.Itoa(s.Sample), secs(r.at), s.Node, strconv.Itoa(s.PID), strconv.FormatBool(s.Up),
			strconv.FormatBool(s.Fresh), strconv.FormatBool(s.Restarted), strconv.FormatBool(s.Leader)}
		if s.Up {
			g := ""
			if s.Goroutines >= 0 {
				g = strconv.Itoa(s.Goroutines)
			}
			row = append(row, strconv.FormatUint(s.RSS, 10), g, strconv.Itoa(s.OpenFDs))
		} else {
			row = append(row, "", "", "")
		}
		nodes = append(nodes, append(row, r.load...))
	}
	latency := [][]string{{"sample", "at_s", "family", "requests", "errors", "p50_ms", "p99_ms", "p999_ms"}}
	for _, f := range rep.Figures.Families {
		latency = append(latency, []string{strconv.Itoa(f.Sample), secs(interval * time.Duration(f.Sample)), f.Family,
			strconv.Itoa(f.Ops), strconv.Itoa(f.Errors), ms(f.P50), ms(f.P99), ms(f.P999)})
	}
	restarts := [][]string{{"at_s", "node", "signal", "out_s", "error"}}
	for _, r := range rep.Restarts {
		restarts = append(restarts, []string{secs(r.At), r.Node, how(r.Kill), strconv.FormatFloat(r.Out.Seconds(), 'f', 3, 64), r.Err})
	}
	for name, records := range map[string][][]string{"soak.csv": nodes, "latency.csv": latency, "restarts.csv": restarts} {
		if err := writeCSV(filepath.Join(dir, name), records); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(dir, "soak.svg"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	writePlot(w, plotInput{figures: rep.Figures, restarts: rep.Restarts, interval: interval, warmup: warmup,
		title: fmt.Sprintf("raftlock soak: 3 nodes, %.0f requests/s (%.0f%% of %.0f measured)", rep.Pace, 100*rep.Pace/max(rep.Capacity, 1), rep.Capacity)})
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeCSV(path string, records [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(records); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) }

// kindList renders error counts by kind as "TRYAGAIN=3 conn=12", sorted by kind.
func kindList(kinds map[string]int) string {
	var out []string
	for k, n := range kinds {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// progressLine is the line printed after each interval.
func progressLine(sample int, at time.Duration, nodes []NodeSample, fams []FamilySample, interval time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%3d %6v ", sample, at.Round(time.Second))
	for _, s := range nodes {
		if !s.Up {
			fmt.Fprintf(&b, "| %s down ", s.Node)
			continue
		}
		lead := ""
		if s.Leader {
			lead = " leader"
		}
		fmt.Fprintf(&b, "| %s%s %.0fMiB %dg %dfd ", s.Node, lead, float64(s.RSS)/(1<<20), s.Goroutines, s.OpenFDs)
	}
	for _, f := range fams {
		if f.Family == famAll {
			fmt.Fprintf(&b, "| %.0f req/s (lock_wait aside), %d errors, p50 %v p99 %v p999 %v", float64(f.Ops)/interval.Seconds(),
				f.Errors, f.P50.Round(10*time.Microsecond), f.P99.Round(10*time.Microsecond), f.P999.Round(10*time.Microsecond))
		}
	}
	return b.String()
}
