package ops

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestProtectedMode: the status page (key names, member addresses) and the profiles must not be
// served to any address while no password is set: without credentials, an address other than loopback gets 403 on every path unless the surface is
// opened with Insecure; with credentials it is served, the status page and profiles behind
// basic auth, /livez, /readyz and /metrics open. The remote address is injected (httptest);
// loopback is also asked over a real socket.
func TestProtectedMode(t *testing.T) {
	const remote, remote6, loop, loop6, mapped = "192.0.2.7:41000", "[2001:db8::7]:41000", "127.0.0.1:41000", "[::1]:41000", "[::ffff:127.0.0.1]:41000"
	paths := []string{"/livez", "/readyz", "/metrics", "/", "/status.json", "/debug/pprof/", "/debug/pprof/cmdline"}
	open := map[string]bool{"/livez": true, "/readyz": true, "/metrics": true}
	for _, tc := range []struct {
		name     string
		users    Users
		insecure bool
		from     string
		want     func(path string) int // without credentials
	}{
		{"no users, remote", nil, false, remote, func(string) int { return http.StatusForbidden }},
		{"no credentials, remote", users{false, "ops", "pw"}, false, remote, func(string) int { return http.StatusForbidden }},
		{"no credentials, remote IPv6", users{false, "ops", "pw"}, false, remote6, func(string) int { return http.StatusForbidden }},
		{"no credentials, unreadable address", users{false, "ops", "pw"}, false, "somewhere", func(string) int { return http.StatusForbidden }},
		{"no credentials, loopback", users{false, "ops", "pw"}, false, loop, func(string) int { return http.StatusOK }},
		{"no credentials, loopback IPv6", users{false, "ops", "pw"}, false, loop6, func(string) int { return http.StatusOK }},
		{"no credentials, IPv4-mapped loopback", users{false, "ops", "pw"}, false, mapped, func(string) int { return http.StatusOK }},
		{"no credentials, remote, insecure", users{false, "ops", "pw"}, true, remote, func(string) int { return http.StatusOK }},
		{"credentials, remote", users{true, "ops", "pw"}, false, remote, func(p string) int {
			if open[p] {
				return http.StatusOK
			}
			return http.StatusUnauthorized
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Start(Config{Addr: "127.0.0.1:0", Pprof: true, Users: tc.users, Insecure: tc.insecure},
				fixedStats{State: "Leader", Ready: true, LeaderID: "n1"}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			for _, path := range paths {
				req := httptest.NewRequest("GET", path, nil)
				req.RemoteAddr = tc.from
				rec := httptest.NewRecorder()
				s.http.Handler.ServeHTTP(rec, req)
				if want := tc.want(path); rec.Code != want {
					t.Errorf("GET %s from %s = %d, want %d", path, tc.from, rec.Code, want)
				}
				if rec.Code == http.StatusForbidden && !strings.Contains(rec.Body.String(), "protected mode") {
					t.Errorf("GET %s from %s: 403 with body %q; want one that explains protected mode", path, tc.from, rec.Body.String())
				}
				if tc.users != nil && tc.users.AuthRequired() && !open[path] {
					req.SetBasicAuth("ops", "pw")
					rec := httptest.NewRecorder()
					s.http.Handler.ServeHTTP(rec, req)
					if rec.Code != http.StatusOK {
						t.Errorf("GET %s from %s with the admin's credentials = %d, want 200", path, tc.from, rec.Code)
					}
				}
			}
			// Over a real socket on loopback, without credentials, everything is served.
			if tc.users == nil || !tc.users.AuthRequired() {
				res, err := http.Get("http://" + s.Addr().String() + "/status.json")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					t.Errorf("GET /status.json over loopback = %d, want 200", res.StatusCode)
				}
			}
		})
	}
}

// TestExposureRefused: a surface on an address other than loopback does not start while no
// credentials are set, unless Insecure; loopback always does. (Tests listen on 127.0.0.1 only:
// the judgement is asked of the listener's address directly.)
func TestExposureRefused(t *testing.T) {
	none, set := users{false, "", ""}, users{true, "ops", "pw"}
	for _, tc := range []struct {
		addr     string
		users    Users
		insecure bool
		ok       bool
	}{
		{"0.0.0.0:9100", nil, false, false},
		{":9100", none, false, false},
		{"[::]:9100", none, false, false},
		{"10.0.0.5:9100", none, false, false},
		{"[2001:db8::5]:9100", none, false, false},
		{"no-port", none, false, false},
		{"10.0.0.5:9100", none, true, true},
		{"0.0.0.0:9100", set, false, true},
		{"127.0.0.1:9100", nil, false, true},
		{"127.0.0.2:9100", none, false, true},
		{"[::1]:9100", none, false, true},
		{"localhost:9100", none, false, true},
	} {
		err := checkExposure(tc.addr, tc.users, tc.insecure)
		if (err == nil) != tc.ok {
			t.Errorf("checkExposure(%s, credentials %v, insecure %v) = %v; want ok %v", tc.addr,
				tc.users != nil && tc.users.AuthRequired(), tc.insecure, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure-http") {
			t.Errorf("checkExposure(%s): %v; want it to name --insecure-http", tc.addr, err)
		}
	}
	if s, err := Start(Config{Addr: "0.0.0.0:0"}, fixedStats{}, slog.New(slog.DiscardHandler)); err == nil {
		s.Close()
		t.Fatal("Start on 0.0.0.0 without credentials: no error") // refused before it binds
	}
	s, err := Start(Config{Addr: "127.0.0.1:0"}, fixedStats{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Start on loopback without credentials: %v", err)
	}
	s.Close()
}
