package ops

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/metrics"
	"github.com/raftlock/raftlock/node"
)

type fixedServer node.ServerStats

func (s fixedServer) ServerStats() node.ServerStats { return node.ServerStats(s) }

type fixedMembers []node.MemberStatus

func (m fixedMembers) MemberStatus(context.Context) ([]node.MemberStatus, error) { return m, nil }

func hist(scale metrics.Scale, vs ...uint64) metrics.Snapshot {
	h := metrics.NewHistogram(scale)
	for _, v := range vs {
		h.Observe(v)
	}
	return h.Snapshot()
}

func TestWriteServerMetrics(t *testing.T) {
	var b strings.Builder
	WriteServerMetrics(&b, node.ServerStats{
		Families: []node.FamilyStats{{Name: "lock", Latency: hist(metrics.Latency, uint64(15*time.Microsecond), uint64(time.Minute))}},
		Refused:  []node.ReasonCount{{Reason: "noperm", Count: 4}},
	})
	out := b.String()
	for _, want := range []string{
		"# TYPE raftlock_request_duration_seconds histogram\n",
		`raftlock_request_duration_seconds_bucket{family="lock",le="1e-05"} 0` + "\n",
		`raftlock_request_duration_seconds_bucket{family="lock",le="2e-05"} 1` + "\n",
		`raftlock_request_duration_seconds_bucket{family="lock",le="20.97152"} 1` + "\n",
		`raftlock_request_duration_seconds_bucket{family="lock",le="+Inf"} 2` + "\n",
		`raftlock_request_duration_seconds_sum{family="lock"} 60.000015` + "\n",
		`raftlock_request_duration_seconds_count{family="lock"} 2` + "\n",
		`raftlock_refused_commands_total{reason="noperm"} 4` + "\n",
		`raftlock_waiters{db="0"} 0` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

func TestStatusDocument(t *testing.T) {
	ns := fixedStats{ID: "n1", State: "Leader", Ready: true, LeaderID: "n1", Term: 4, CommitIndex: 120, AppliedIndex: 118,
		LeaderChanges: 2, RecentLeaders: []node.LeaderChange{{LeaderID: "n2", Term: 3}, {LeaderID: "n1", Term: 4}}}
	ns.DBKeys[0], ns.DBKeys[5], ns.DBLeases[5] = 3, 7, 2
	ss := fixedServer{Commands: 10, Contended: []node.KeyCount{{DB: 5, Key: "<b>hot</b>", Count: 9}}}
	ss.DBWaiters[5] = 1
	members := fixedMembers{
		{Member: node.Member{ID: "n1", Leader: true, Voter: true}, State: "Leader", Term: 4, CommitIndex: 120, AppliedIndex: 118},
		{Member: node.Member{ID: "n2", Voter: true}, State: "Follower", Term: 4, CommitIndex: 119, AppliedIndex: 100},
		{Member: node.Member{ID: "n3", Voter: true}, Err: "dial tcp: connection refused"},
	}
	s, err := Start(Config{Addr: "127.0.0.1:0", Server: ss, Members: members}, ns, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got := statusOf(t, s.Addr().String())
	if got.Node.State != "Leader" || got.Node.Term != 4 || got.Node.ApplyLag != 2 {
		t.Errorf("node = %+v, want Leader, term 4, apply lag 2", got.Node)
	}
	lags := map[string]uint64{}
	for _, m := range got.Members {
		lags[m.ID] = m.Lag
	}
	if lags["n1"] != 2 || lags["n2"] != 20 || got.Members[2].Error == "" {
		t.Errorf("members = %+v, want lags n1 2, n2 20 and n3's error", got.Members)
	}
	if got.Totals.Keys != 10 || got.Totals.Leases != 2 || got.Totals.Waiters != 1 || len(got.Databases) != 2 {
		t.Errorf("databases %+v totals %+v, want db 0 and 5, 10 keys, 2 leases, 1 waiter", got.Databases, got.Totals)
	}
	if len(got.Contended) != 1 || got.Contended[0].Key != "<b>hot</b>" || got.LeaderChanges != 2 || len(got.RecentLeaders) != 2 {
		t.Errorf("contended %+v, leader changes %d %+v", got.Contended, got.LeaderChanges, got.RecentLeaders)
	}
	for _, path := range []string{"/", "/status.js", "/status.css"} {
		res, err := http.Get("http://" + s.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || len(body) == 0 || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s = %d (%d bytes), CSP %q; want 200, a body, and only 'self'", path, res.StatusCode, len(body), res.Header.Get("Content-Security-Policy"))
		}
		if strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
			t.Errorf("%s names an address elsewhere: the page must need nothing but the binary", path)
		}
	}
	if res, err := http.Get("http://" + s.Addr().String() + "/nothing-here"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing-here = %v %v, want 404", res.StatusCode, err)
	}
}

func TestStatusRates(t *testing.T) {
	now := time.Unix(100, 0)
	ss := &countingServer{}
	src := newStatusSource(fixedStats{}, ss, nil)
	src.now = func() time.Time { return now }
	var st status
	json.Unmarshal(src.document(t.Context()), &st)
	if st.Rates.Seconds != 0 {
		t.Errorf("first document: rates over %g s, want 0 (one sample)", st.Rates.Seconds)
	}
	ss.commands = 50
	now = now.Add(500 * time.Millisecond)
	if doc := src.document(t.Context()); !strings.Contains(string(doc), `"commands":0`) {
		t.Errorf("within statusEvery the document is the cached one; got %s", doc)
	}
	now = now.Add(4500 * time.Millisecond)
	json.Unmarshal(src.document(t.Context()), &st)
	if st.Rates.Seconds != 5 || st.Rates.Commands != 10 {
		t.Errorf("rates = %+v, want 50 commands over 5 s = 10/s", st.Rates)
	}
}

type countingServer struct{ commands uint64 }

func (c *countingServer) ServerStats() node.ServerStats {
	return node.ServerStats{Commands: c.commands}
}

// lockCounters is a node and a server whose lock counters the test moves.
type lockCounters struct{ grants, refusals, expired, handoffs uint64 }

func (c *lockCounters) Stats() node.Stats {
	return node.Stats{Expired: c.expired, Handoffs: c.handoffs}
}

func (c *lockCounters) ServerStats() node.ServerStats {
	return node.ServerStats{Grants: c.grants, Refusals: c.refusals}
}

// The lock chart gains one point per build, the rates between it and the build before, and
// keeps the last five minutes of them.
func TestStatusLockRates(t *testing.T) {
	now := time.Unix(100, 0)
	c := &lockCounters{}
	src := newStatusSource(c, c, nil)
	src.now = func() time.Time { return now }
	build := func() statusLockRates {
		t.Helper()
		var st status
		if err := json.Unmarshal(src.document(t.Context()), &st); err != nil {
			t.Fatal(err)
		}
		return st.LockRates
	}
	if got := build(); len(got.Grants) != 0 || got.WindowSeconds != 300 {
		t.Fatalf("first build: %+v, want no point (nothing to take a rate from) over a 300 s window", got)
	}
	builds := lockRatesPoints + 20
	for i := 1; i <= builds; i++ {
		now = now.Add(time.Second)
		c.grants, c.refusals, c.expired, c.handoffs = c.grants+4, c.refusals+3, c.expired+2, c.handoffs+1
		got := build()
		want := min(i, lockRatesPoints)
		for name, series := range map[string][]float64{"ago": got.AgoSeconds, "grants": got.Grants, "refusals": got.Refusals,
			"expiries": got.Expiries, "handoffs": got.Handoffs} {
			if len(series) != want {
				t.Fatalf("build %d: %s has %d points, want %d", i, name, len(series), want)
			}
		}
		last := want - 1
		if got.Grants[last] != 4 || got.Refusals[last] != 3 || got.Expiries[last] != 2 || got.Handoffs[last] != 1 || got.AgoSeconds[last] != 0 {
			t.Fatalf("build %d: newest point %g %g %g %g at -%g s, want 4 3 2 1 per s at 0",
				i, got.Grants[last], got.Refusals[last], got.Expiries[last], got.Handoffs[last], got.AgoSeconds[last])
		}
		if got.AgoSeconds[0] != float64(want-1) {
			t.Fatalf("build %d: oldest point %g s ago, want %d", i, got.AgoSeconds[0], want-1)
		}
	}
	// Within statusEvery the document is the one built: no point.
	now = now.Add(statusEvery / 2)
	if got := build(); len(got.Grants) != lockRatesPoints {
		t.Errorf("a request within statusEvery: %d points, want %d", len(got.Grants), lockRatesPoints)
	}
	// A spell nobody asked in is one point, its average; the points it pushed out of the
	// window are gone.
	now = now.Add(time.Minute - statusEvery/2)
	c.grants += 120
	got := build()
	if n := len(got.Grants); n != lockRatesPoints-59 || got.Grants[n-1] != 2 || got.Refusals[n-1] != 0 {
		t.Errorf("after a minute unasked: %d points, newest %g grants %g refusals per s; want %d, 2 and 0",
			n, got.Grants[n-1], got.Refusals[n-1], lockRatesPoints-59)
	}
	if n := len(got.AgoSeconds); got.AgoSeconds[0] != 299 || got.AgoSeconds[n-2] != 60 {
		t.Errorf("after a minute unasked the oldest point is %g s old and the one before the newest %g, want 299 and 60",
			got.AgoSeconds[0], got.AgoSeconds[n-2])
	}
}

// On a node of several raft groups the document lists each group (its slots, role, leader,
// indexes and keys), and its databases and totals count every group's keys.
func TestStatusDocumentGroups(t *testing.T) {
	g0 := fixedStats{ID: "n1", State: "Leader", Ready: true, LeaderID: "n1", Term: 4, CommitIndex: 120, AppliedIndex: 118, Locks: 3}
	g0.DBKeys[0] = 3
	g1 := fixedStats{ID: "n1", State: "Follower", LeaderID: "n2", Term: 6, CommitIndex: 90, AppliedIndex: 90, Locks: 5}
	g1.DBKeys[0], g1.DBKeys[2], g1.DBLeases[2] = 4, 1, 1
	groups := []Group{{Stats: g0, Slots: func() string { return "0-8191" }}, {Stats: g1, Slots: func() string { return "8192-16383" }}}
	s, err := Start(Config{Addr: "127.0.0.1:0", Groups: groups}, g0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	got := statusOf(t, s.Addr().String())
	want := []statusGroup{
		{Group: 0, Slots: "0-8191", raftFigures: raftFigures{State: "Leader", Ready: true, LeaderID: "n1", Term: 4, CommitIndex: 120, AppliedIndex: 118, ApplyLag: 2}, Keys: 3},
		{Group: 1, Slots: "8192-16383", raftFigures: raftFigures{State: "Follower", LeaderID: "n2", Term: 6, CommitIndex: 90, AppliedIndex: 90}, Keys: 5},
	}
	if !slices.Equal(got.Groups, want) {
		t.Errorf("groups = %+v\nwant %+v", got.Groups, want)
	}
	if got.Totals.Keys != 8 || got.Totals.Leases != 1 || len(got.Databases) != 2 || got.Databases[0].Keys != 7 {
		t.Errorf("databases %+v totals %+v, want db 0 with 7 keys and db 2 with 1, 8 keys and 1 lease in all", got.Databases, got.Totals)
	}
	if got.Node.Term != 4 || got.Node.State != "Leader" {
		t.Errorf("node = %+v, want group 0's", got.Node)
	}
}

// statusOf fetches and decodes /status.json from the surface at addr.
func statusOf(t *testing.T, addr string) status {
	t.Helper()
	res, err := http.Get("http://" + addr + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got status
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return got
}
