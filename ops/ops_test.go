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

// users is a fixed Users: AuthRequired as required, and one admin's credentials.
type users struct {
	required   bool
	user, pass string
}

func (u users) AuthRequired() bool { return u.required }
func (u users) AdminAuth(user, pass string) bool {
	return user == u.user && pass == u.pass
}

// Once the node's clients must authenticate, profiles and the status page need an @admin user's
// basic auth; /metrics stays open.
func TestPprofBehindAuth(t *testing.T) {
	for _, tc := range []struct {
		name             string
		users            Users
		user, pass       string
		noAuth, withAuth int // /debug/pprof/'s status without and with the credentials
	}{
		{"no users", nil, "ops", "pw", http.StatusOK, http.StatusOK},
		{"auth not required", users{false, "ops", "pw"}, "ops", "pw", http.StatusOK, http.StatusOK},
		{"admin", users{true, "ops", "pw"}, "ops", "pw", http.StatusUnauthorized, http.StatusOK},
		{"wrong password", users{true, "ops", "pw"}, "ops", "guess", http.StatusUnauthorized, http.StatusUnauthorized},
		{"default user by password alone", users{true, "", "pw"}, "", "pw", http.StatusUnauthorized, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(Config{Addr: "127.0.0.1:0", Pprof: true, Users: tc.users}, fixedStats{Locks: 3}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			get := func(path string, auth bool) *http.Response {
				t.Helper()
				req, err := http.NewRequestWithContext(t.Context(), "GET", "http://"+s.Addr().String()+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if auth {
					req.SetBasicAuth(tc.user, tc.pass)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				return res
			}
			if res := get("/metrics", false); res.StatusCode != http.StatusOK {
				t.Errorf("/metrics without credentials = %d, want 200", res.StatusCode)
			}
			// The status page shows member and key names: it is guarded as the profiles are.
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/symbol", "/", "/status.json", "/status.js", "/status.css"} {
				res := get(path, false)
				if res.StatusCode != tc.noAuth {
					t.Errorf("%s without credentials = %d, want %d", path, res.StatusCode, tc.noAuth)
				}
				if res.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("%s: 401 with WWW-Authenticate %q, want a Basic challenge", path, res.Header.Get("WWW-Authenticate"))
				}
				if got := get(path, true).StatusCode; got != tc.withAuth {
					t.Errorf("%s with %q:%q = %d, want %d", path, tc.user, tc.pass, got, tc.withAuth)
				}
			}
		})
	}
}
