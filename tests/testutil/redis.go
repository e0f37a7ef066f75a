package testutil

import (
	"net"
	"strconv"
	"testing"
	"time"
)

// StartRedis starts the redis-server binary bin on a free port of 127.0.0.1, persisting
// nothing (its working directory a fresh tb.TempDir()), with extra flags; it returns once the
// server answers PING. The caller finds bin (exec.LookPath) and decides whether its absence
// skips or fails the test.
func StartRedis(tb testing.TB, bin string, extra ...string) (p *Proc, addr string) {
	tb.Helper()
	dir := tb.TempDir()
	var last error
	for range 3 { // a port picked free may be taken by someone else before redis binds it
		port, err := FreePort("127.0.0.1")
		if err != nil {
			tb.Fatal(err)
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no"}, extra...)
		p, err := Launch(tb, "redis-server", bin, args...)
		if err != nil {
			tb.Fatal(err)
		}
		if last = p.WaitServing(addr, 10*time.Second, nil); last == nil {
			return p, addr
		}
		p.ExpectExit() // it failed to start (a port taken): not this test's failure
	}
	tb.Fatalf("redis-server did not start: %v", last)
	return nil, ""
}
