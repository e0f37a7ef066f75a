package ops

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/node"
)

func TestWriteMetrics(t *testing.T) {
	var b strings.Builder
	WriteMetrics(&b, node.Stats{State: "Leader", Ready: true, Locks: 42, Proposals: 7, Store: node.StoreStats{LastIndex: 9}})
	out := b.String()
	for _, want := range []string{
		"# TYPE raftlock_locks_held gauge\nraftlock_locks_held 42\n",
		"raftlock_ready 1\n",
		"raftlock_is_leader 1\n",
		"# TYPE raftlock_proposals_total counter\nraftlock_proposals_total 7\n",
		"raftlock_store_last_index 9\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q:\n%s", want, out)
		}
	}
}

type fixedStats node.Stats

func (s fixedStats) Stats() node.Stats { return node.Stats(s) }

// Profiles are served only when asked for; /metrics always is.
func TestPprofOnlyWhenAsked(t *testing.T) {
	for _, tc := range []struct {
		pprof bool
		want  int // /debug/pprof/'s status
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		t.Run(fmt.Sprintf("pprof=%v", tc.pprof), func(t *testing.T) {
			s, err := Start(Config{Addr: "127.0.0.1:0", Pprof: tc.pprof}, fixedStats{Locks: 3}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			get := func(path string) (int, string) {
				t.Helper()
				res, err := http.Get("http://" + s.Addr().String() + path)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				body, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(body)
			}
			if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "raftlock_locks_held 3\n") {
				t.Errorf("/metrics = %d %q, want 200 with raftlock_locks_held 3", code, body)
			}
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol"} {
				if code, _ := get(path); code != tc.want {
					t.Errorf("%s = %d, want %d", path, code, tc.want)
				}
			}
		})
	}
}
