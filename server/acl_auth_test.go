package server

import (
	"testing"
	"time"
)

// After three failed AUTHs on a connection, each further AUTH (or HELLO AUTH) waits first, twice
// as long each time; other connections are served meanwhile, and a success starts the count
// over. On a node without a password (an ACL user's password guessed) and with --requirepass.
func TestAuthFailuresSlowedPerConnection(t *testing.T) {
	defer func(d time.Duration) { authDelayBase = d }(authDelayBase)
	authDelayBase = 50 * time.Millisecond
	for _, secured := range []bool{false, true} {
		name, user, pass := "default-config", "alice", "alicepw"
		if secured {
			name, user, pass = "requirepass", "default", "adminpw"
		}
		t.Run(name, func(t *testing.T) {
			addr, _ := serveNode(t, newFakeNode(), func(c *Config) {
				if secured {
					c.RequirePass = "adminpw"
				}
			})
			if !secured {
				if got := dialRaw(t, addr).do("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "+@all"); got != "+OK\r\n" {
					t.Fatalf("SETUSER: %q", got)
				}
			}
			c := dialRaw(t, addr)
			timed := func(args ...string) (string, time.Duration) {
				start := time.Now()
				got := c.do(args...)
				return got, time.Since(start)
			}
			const wrong = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
			for i := 0; i < 3; i++ {
				if got, _ := timed("AUTH", user, "guess"); got != wrong {
					t.Fatalf("AUTH %d: %q", i, got)
				}
			}
			for i, want := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond} {
				args := []string{"AUTH", user, "guess"}
				if i == 1 {
					args = []string{"HELLO", "2", "AUTH", user, "guess"}
				}
				if got, took := timed(args...); got != wrong || took < want {
					t.Errorf("%q after %d failures: %q in %v, want WRONGPASS after at least %v", args, 3+i, got, took, want)
				}
			}
			// The next waits 200 ms: another connection is served meanwhile.
			done := make(chan string, 1)
			go func() {
				got, _ := timed("AUTH", user, "guess")
				done <- got
			}()
			other := dialRaw(t, addr)
			other.do("AUTH", user, pass)
			if got := other.do("PING"); got != "+PONG\r\n" {
				t.Errorf("another connection's PING: %q", got)
			}
			select {
			case got := <-done:
				t.Errorf("the slowed AUTH (%q) answered before another connection's PING", got)
			default:
				if got := <-done; got != wrong {
					t.Errorf("the slowed AUTH: %q", got)
				}
			}
			// The right password still works (after its wait), and starts the count over.
			if got, took := timed("AUTH", user, pass); got != "+OK\r\n" || took < 400*time.Millisecond {
				t.Errorf("the right password after 6 failures: %q in %v", got, took)
			}
			if got, took := timed("AUTH", user, "guess"); got != wrong || took >= 50*time.Millisecond {
				t.Errorf("a failure after a success: %q in %v, want no wait", got, took)
			}
			// RESET does not start the count over.
			c.do("AUTH", user, "guess")
			c.do("AUTH", user, "guess")
			c.do("RESET")
			if got, took := timed("AUTH", user, "guess"); got != wrong || took < 50*time.Millisecond {
				t.Errorf("after RESET: %q in %v, want a wait of 50 ms", got, took)
			}
		})
	}
}

func TestAuthDelay(t *testing.T) {
	for failures, want := range []time.Duration{0, 0, 0, authDelayBase, 2 * authDelayBase, 4 * authDelayBase} {
		if got := authDelay(failures); got != want {
			t.Errorf("authDelay(%d) = %v, want %v", failures, got, want)
		}
	}
	for _, failures := range []int{10, 20, 64, 1 << 30} {
		if got := authDelay(failures); got != authDelayMax {
			t.Errorf("authDelay(%d) = %v, want the cap %v", failures, got, authDelayMax)
		}
	}
}
