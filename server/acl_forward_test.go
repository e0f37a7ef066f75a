package server

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// nodeConfigs are the two configurations the findings are checked against: the default one (no
// password: the default user is everyone's), and a secured one (--requirepass, and the peers'
// --masterauth).
var nodeConfigs = []struct {
	name    string
	secured bool
}{{"default-config", false}, {"requirepass", true}}

func secure(secured bool) func(*Config) {
	return func(c *Config) {
		if secured {
			c.RequirePass, c.PeerPassword = "adminpw", "adminpw"
		}
	}
}

// adminConn is a connection logged in as the default user (with the password when secured).
func adminConn(t *testing.T, addr string, secured bool) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	if secured {
		if got := c.do("AUTH", "adminpw"); got != "+OK\r\n" {
			t.Fatalf("AUTH: %q", got)
		}
	}
	return c
}

// RAFT FORWARDED is a peer's: a user without @admin (here one with +@all -@admin) gets NOPERM,
// for itself or for another user. A peer's link may act for a user, and is then that user: its
// permissions, not the peer's, are checked.
func TestRaftForwardedOnlyForPeers(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, _ := serveNode(t, newFakeNode(), secure(cfg.secured))
			admin := adminConn(t, addr, cfg.secured)
			for _, cmd := range [][]string{
				{"ACL", "SETUSER", "app", "on", ">apppw", "~app:*", "&*", "+@all", "-@admin"},
				{"ACL", "SETUSER", "peer", "on", ">peerpw", "-@all", "+raft|forwarded"},
			} {
				if got := admin.do(cmd...); got != "+OK\r\n" {
					t.Fatalf("%q: %q", cmd, got)
				}
			}
			app := dialRaw(t, addr)
			app.do("AUTH", "app", "apppw")
			const noperm = "-NOPERM this user has no permissions to run the 'raft|forwarded' command\r\n"
			for _, cmd := range [][]string{{"RAFT", "FORWARDED"}, {"RAFT", "FORWARDED", "default"}, {"RAFT", "FORWARDED", "peer"}} {
				if got := app.do(cmd...); got != noperm {
					t.Errorf("app's %q: got %q, want NOPERM", cmd, got)
				}
			}
			if got := app.do("ACL", "WHOAMI"); got != "$3\r\napp\r\n" {
				t.Errorf("app after its refused RAFT FORWARDED is %q", got)
			}
			peer := dialRaw(t, addr)
			for _, step := range [][]string{
				{"AUTH", "peer", "peerpw", "+OK\r\n"},
				{"RAFT", "FORWARDED", "nosuch", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
				{"RAFT", "FORWARDED", "app", "+OK\r\n"},
				{"ACL", "WHOAMI", "$3\r\napp\r\n"},
				{"SET", "app:1", "v", "+OK\r\n"},
				{"SET", "other", "v", "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
				{"RAFT", "FORWARDED", "default", noperm},
			} {
				if got := peer.do(step[:len(step)-1]...); got != step[len(step)-1] {
					t.Errorf("peer's link: %q: got %q, want %q", step[:len(step)-1], got, step[len(step)-1])
				}
			}
		})
	}
}

// --timeout closes an idle connection that sent RAFT FORWARDED like any other (it once exempted
// it for good, so such connections could fill --maxclients).
func TestRaftForwardedDoesNotEscapeTimeout(t *testing.T) {
	for _, cfg := range nodeConfigs {
		t.Run(cfg.name, func(t *testing.T) {
			addr, _ := serveNode(t, newFakeNode(), func(c *Config) {
				secure(cfg.secured)(c)
				c.IdleTimeout = time.Second
			})
			c := adminConn(t, addr, cfg.secured)
			if got := c.do("RAFT", "FORWARDED"); got != "+OK\r\n" {
				t.Fatalf("RAFT FORWARDED: %q", got)
			}
			start := time.Now()
			c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.br.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
				t.Fatalf("an idle forwarding link after %v: %v, want it closed", time.Since(start), err)
			}
			if took := time.Since(start); took < 900*time.Millisecond {
				t.Errorf("closed after %v, before the 1 s timeout", took)
			}
		})
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// A follower forwards a client's requests acting for the client's user, logged in as a peer
// (--masterauth when set), without the client's password; a link the leader closed after its
// --timeout is dialled again, whether the follower saw it close (no --timeout of its own) or
// dropped it itself (idle for half of its --timeout).
func TestFollowerForwardsAsClientUser(t *testing.T) {
	for _, cfg := range nodeConfigs {
		for _, followerTimeout := range []time.Duration{0, time.Second} {
			t.Run(cfg.name+"/follower-timeout-"+followerTimeout.String(), func(t *testing.T) {
				n := startNode(t)
				leader, ls := serveNode(t, n, func(c *Config) {
					secure(cfg.secured)(c)
					c.IdleTimeout = time.Second
				})
				admin := adminConn(t, leader, cfg.secured)
				if got := admin.do("ACL", "SETUSER", "app", "on", ">apppw", "~app:*", "+@all", "-@admin"); got != "+OK\r\n" {
					t.Fatalf("SETUSER: %q", got)
				}
				// Both servers share the node, whose users hook is the last one set: the
				// follower starts once the user exists (and reads it then).
				follower, _ := serveNode(t, followerOf{n, leader}, func(c *Config) {
					secure(cfg.secured)(c)
					c.NodeID, c.IdleTimeout = "n2", followerTimeout
				})
				app := dialRaw(t, follower)
				if got := app.do("AUTH", "app", "apppw"); got != "+OK\r\n" {
					t.Fatalf("AUTH app on the follower: %q", got)
				}
				if got := app.do("LOCK", "app:1", "10000"); !strings.HasPrefix(got, ":") {
					t.Fatalf("app's LOCK through the follower: %q", got)
				}
				// On the leader, the link is app's.
				var links []string
				for _, c := range ls.connections() {
					if c.hop.forwarded {
						links = append(links, *c.user.Load())
					}
				}
				if len(links) != 1 || links[0] != "app" {
					t.Errorf("forwarding links on the leader run as %q, want [app]", links)
				}
				// The leader closes the idle link (1 s); the client keeps its own connection
				// busy with local commands meanwhile.
				for end := time.Now().Add(1600 * time.Millisecond); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
					if got := app.do("PING"); got != "+PONG\r\n" {
						t.Fatalf("PING: %q", got)
					}
				}
				if got := app.do("LOCK", "app:2", "10000"); !strings.HasPrefix(got, ":") {
					t.Errorf("app's LOCK after the leader closed the idle link: %q", got)
				}
				if got := app.do("LOCK", "other", "10000"); got != "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n" {
					t.Errorf("app's LOCK of another key: %q", got)
				}
			})
		}
	}
}
