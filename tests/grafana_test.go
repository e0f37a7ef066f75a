package tests

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard the docs tell operators to import.
const dashboardFile = "../docs/grafana/raftlock-dashboard.json"

// promQLNames returns the metric names a PromQL expression reads: identifiers that are not
// functions, keywords, label names in matchers or groupings, durations or dashboard variables.
func promQLNames(expr string) []string {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), // string literals
		regexp.MustCompile(`\{[^}]*\}`),         // label matchers
		regexp.MustCompile(`\[[^\]]*\]`),        // range selectors
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`), // groupings
		regexp.MustCompile(`\$\{?\w+\}?`), // variables
	} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var names []string
	for _, m := range regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`).FindAllString(expr, -1) {
		if strings.HasSuffix(m, "(") { // a function or an aggregation
			continue
		}
		switch m {
		case "and", "or", "unless", "bool", "offset", "inf", "nan", "Inf", "NaN":
			continue
		}
		names = append(names, m)
	}
	return names
}

func TestPromQLNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`histogram_quantile(0.99, sum by (family, le) (rate(raftlock_request_duration_seconds_bucket{instance=~"$instance"}[$__rate_interval])))`: {"raftlock_request_duration_seconds_bucket"},
		`raftlock_commit_index{instance=~"a"} - raftlock_applied_index`:                                                                           {"raftlock_commit_index", "raftlock_applied_index"},
		`increase(raftlock_nope_total[5m]) > 0 and on (instance) up`:                                                                              {"raftlock_nope_total", "up"},
	} {
		if got := promQLNames(expr); !slices.Equal(got, want) {
			t.Errorf("promQLNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// exported returns the metric names a /metrics body declares, each histogram with its
// _bucket, _sum and _count series.
func exported(body string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(body, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[f[2]+s] = true
			}
		}
	}
	return out
}

// TestGrafanaDashboard checks that every query of the dashboard reads only metrics a live node
// exports (and that it has the panels the docs promise).
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s is not a dashboard: %v", dashboardFile, err)
	}
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	n := startNodeWith(t, nil, "--metrics-addr", web)
	if _, err := call(n.addr, "LOCK", "dash", "10000"); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	have := exported(string(body))
	if len(have) < 40 {
		t.Fatalf("/metrics declares only %d metrics:\n%s", len(have), body)
	}

	check := func(where, expr string, names []string) {
		if len(names) == 0 {
			t.Errorf("%s: %q reads no metric", where, expr)
		}
		for _, name := range names {
			if !have[name] {
				t.Errorf("%s: %q reads %s, which /metrics does not export", where, expr, name)
			}
		}
	}
	queries := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			check("panel "+p.Title, tg.Expr, promQLNames(tg.Expr))
		}
	}
	for _, v := range dash.Templating.List {
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		if m := regexp.MustCompile(`^label_values\((\w+),`).FindStringSubmatch(s); m != nil {
			check("variable "+v.Name, s, []string{m[1]})
		}
	}
	// The metrics issue #14 asks the dashboard to show.
	for _, want := range []string{"raftlock_request_duration_seconds_bucket", "raftlock_commit_duration_seconds_bucket",
		"raftlock_apply_batch_entries_sum", "raftlock_log_sync_duration_seconds_bucket", "raftlock_apply_lag_entries",
		"raftlock_leader_changes_total", "raftlock_leases_expired_total", "raftlock_ghost_locks_released_total",
		"raftlock_refused_commands_total", "raftlock_auth_failures_total"} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("the dashboard has no query of %s", want)
		}
	}
	t.Logf("%d panels, %d queries, all on exported metrics", len(dash.Panels), queries)
}
