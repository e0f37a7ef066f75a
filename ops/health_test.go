package ops

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/node"
)

// TestReadiness: a ready leader and a follower in touch with it are ready; every reason a node
// cannot serve is named.
func TestReadiness(t *testing.T) {
	follower := node.Stats{State: "Follower", LeaderID: "n1", CommitIndex: 5000, AppliedIndex: 4990, LastContact: 80 * time.Millisecond}
	for _, tc := range []struct {
		name  string
		s     node.Stats
		probe error
		want  string // "" = ready, else a reason's text
	}{
		{"leader", node.Stats{State: "Leader", Ready: true, LeaderID: "n1"}, nil, ""},
		{"follower", follower, nil, ""},
		{"leader catching up", node.Stats{State: "Leader", LeaderID: "n1"}, nil, "catching up"},
		{"no leader", node.Stats{State: "Candidate", LastContact: 3 * time.Second}, nil, "no leader known"},
		{"never heard", func() node.Stats { s := follower; s.LastContact = -1; return s }(), nil, "no contact"},
		{"silent leader", func() node.Stats { s := follower; s.LastContact = 6 * time.Second; return s }(), nil, "no contact"},
		{"behind", func() node.Stats { s := follower; s.AppliedIndex = 3000; return s }(), nil, "behind the commit index"},
		{"store", follower, errors.New("disk full"), "store not writable: disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probe := func() error { return tc.probe }
			h := readiness(tc.s, probe)
			switch {
			case tc.want == "" && !h.Ready:
				t.Errorf("readiness(%+v) = %+v; want ready", tc.s, h)
			case tc.want != "" && (h.Ready || !strings.Contains(strings.Join(h.Reasons, "; "), tc.want)):
				t.Errorf("readiness(%+v) = %+v; want not ready: %q", tc.s, h, tc.want)
			}
		})
	}
}

// /livez is always 200; /readyz is 200 or 503 with the JSON that says why.
func TestHealthEndpoints(t *testing.T) {
	var probeErr atomic.Pointer[error]
	probe := func() error {
		if e := probeErr.Load(); e != nil {
			return *e
		}
		return nil
	}
	s, err := Start(Config{Addr: "127.0.0.1:0", Probe: probe},
		fixedStats{State: "Leader", Ready: true, LeaderID: "n1", Term: 4}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	get := func(path string) (int, map[string]any) {
		t.Helper()
		res, err := http.Get("http://" + s.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body map[string]any
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: body %v, content type %q: want JSON", path, err, res.Header.Get("Content-Type"))
		}
		return res.StatusCode, body
	}
	if code, body := get("/livez"); code != http.StatusOK || body["live"] != true {
		t.Errorf("/livez = %d %v", code, body)
	}
	if code, body := get("/readyz"); code != http.StatusOK || body["ready"] != true || body["term"] != float64(4) {
		t.Errorf("/readyz = %d %v; want 200, ready, term 4", code, body)
	}
	fail := errors.New("read-only file system")
	probeErr.Store(&fail)
	code, body := get("/readyz")
	if reasons, _ := body["reasons"].([]any); code != http.StatusServiceUnavailable || body["ready"] != false || len(reasons) != 1 ||
		!strings.Contains(reasons[0].(string), "read-only file system") {
		t.Errorf("/readyz with a failing store = %d %v; want 503 naming the store", code, body)
	}
}

// TestGroupsReadiness: a node of several raft groups is ready when every group is; a group that
// is not names itself in /readyz's reasons, and /metrics has a series per group.
func TestGroupsReadiness(t *testing.T) {
	leader := fixedStats{State: "Leader", Ready: true, LeaderID: "n1", Term: 4, Locks: 3}
	follower := fixedStats{State: "Follower", LeaderID: "n2", CommitIndex: 10, AppliedIndex: 10, LastContact: 50 * time.Millisecond}
	lost := fixedStats{State: "Candidate", LastContact: 3 * time.Second}
	groups := []Group{{Stats: leader}, {Stats: follower}, {Stats: follower}}
	if ready, reasons := ReadyGroups(groups); !ready {
		t.Errorf("three healthy groups: not ready: %v", reasons)
	}
	groups[2] = Group{Stats: lost}
	ready, reasons := ReadyGroups(groups)
	if ready || len(reasons) != 1 || !strings.HasPrefix(reasons[0], "raft group 2: no leader known") {
		t.Errorf("group 2 without a leader: ready %v, %v; want not ready, naming group 2", ready, reasons)
	}
	s, err := Start(Config{Addr: "127.0.0.1:0", Groups: groups}, leader, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	res, err := http.Get("http://" + s.Addr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if gs, _ := body["groups"].([]any); res.StatusCode != http.StatusServiceUnavailable || len(gs) != 3 {
		t.Errorf("/readyz with group 2 leaderless = %d %v; want 503 and each group's judgement", res.StatusCode, body)
	}
	res, err = http.Get("http://" + s.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	_, _ = io.Copy(&b, res.Body)
	res.Body.Close()
	for _, want := range []string{`raftlock_group_is_leader{group="0"} 1`, `raftlock_group_is_leader{group="1"} 0`, `raftlock_group_locks_held{group="0"} 3`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
