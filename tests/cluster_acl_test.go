package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestClusterACL checks that ACL users are replicated state: an ACL SETUSER sent to a follower
// (forwarded to the leader like a write) is enforced on every node, a follower forwards a
// user's requests to the leader logged in as that user, and an ACL DELUSER ends the user
// everywhere.
func TestClusterACL(t *testing.T) {
	c := newCluster(t, 3)
	f := c.followers()
	ctx := context.Background()
	if v, err := call(f[0].addr, "ACL", "SETUSER", "alice", "on", ">pw", "~locks:a:*", "+@read", "+@write", "-@admin"); err != nil || v != "OK" {
		t.Fatalf("ACL SETUSER on a follower: %v %v", v, err)
	}
	for _, n := range c.live() {
		testutil.WaitFor(t, convergeTimeout, func() error {
			v, err := call(n.addr, "ACL", "GETUSER", "alice")
			if err == nil && v == nil {
				return errors.New("alice is not there yet")
			}
			return err
		})
		alice := userClient(t, n.addr, "alice", "pw")
		key := "locks:a:" + n.id
		if tok, err := alice.Do(ctx, "LOCK", key, "10000").Int64(); err != nil || tok <= 0 {
			t.Errorf("%s: alice's LOCK %s: %v %v", n.id, key, tok, err)
		}
		if err := alice.Do(ctx, "LOCK", "locks:b:1", "10000").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM this user has no permissions to access one of the keys") {
			t.Errorf("%s: alice's LOCK of another team's key: %v", n.id, err)
		}
		if err := alice.Do(ctx, "RAFT", "REMOVE", "n1").Err(); err == nil || err.Error() != "NOPERM this user has no permissions to run the 'raft|remove' command" {
			t.Errorf("%s: alice's RAFT REMOVE: %v", n.id, err)
		}
		if err := userClient(t, n.addr, "alice", "bad").Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Errorf("%s: a wrong password: %v", n.id, err)
		}
	}
	if v, err := callInt(c.leader().addr, "ACL", "DELUSER", "alice"); err != nil || v != 1 {
		t.Fatalf("ACL DELUSER: %v %v", v, err)
	}
	for _, n := range c.live() {
		testutil.WaitFor(t, convergeTimeout, func() error {
			cl := userClient(t, n.addr, "alice", "pw")
			defer cl.Close()
			err := cl.Ping(ctx).Err()
			if err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
				return err
			}
			return nil
		})
	}
}

// userClient is a go-redis client logging in as user, closed with the test.
func userClient(t *testing.T, addr, user, pass string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass, MaxRetries: -1, DialTimeout: time.Second, PoolSize: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClusterACLPeers checks peers' ACL rules on a real cluster, in the default
// configuration and in a secured one (an --aclfile whose peer user alone may run RAFT
// FORWARDED, given to the nodes as --masteruser/--masterauth): a follower forwards a user's
// requests acting for that user; a user that is not a peer gets NOPERM for RAFT FORWARDED; a
// RAFT FORWARDED connection is closed by --timeout like any other; and a follower whose link
// the leader closed for idleness dials again instead of failing the next request.
func TestClusterACLPeers(t *testing.T) {
	for _, secured := range []bool{false, true} {
		name := "default-config"
		if secured {
			name = "peer-user"
		}
		t.Run(name, func(t *testing.T) {
			extra := []string{"--timeout", "1"}
			if secured {
				file := filepath.Join(t.TempDir(), "users.acl")
				acl := "user default on nopass ~* &* +@all -raft|forwarded\nuser peer on >peerpw ~* &* +@all\n"
				if err := os.WriteFile(file, []byte(acl), 0o600); err != nil {
					t.Fatal(err)
				}
				extra = append(extra, "--aclfile", file, "--masteruser", "peer", "--masterauth", "peerpw")
			}
			c := newCluster(t, 3, extra...)
			ctx := context.Background()
			if v, err := call(c.leader().addr, "ACL", "SETUSER", "alice", "on", ">pw", "~locks:a:*", "+@all", "-@admin"); err != nil || v != "OK" {
				t.Fatalf("ACL SETUSER: %v %v", v, err)
			}
			f := c.followers()[0]
			testutil.WaitFor(t, convergeTimeout, func() error {
				if v, err := call(f.addr, "ACL", "GETUSER", "alice"); err != nil || v == nil {
					return fmt.Errorf("alice is not on the follower yet: %v %v", v, err)
				}
				return nil
			})
			alice := userClient(t, f.addr, "alice", "pw")
			if tok, err := alice.Do(ctx, "LOCK", "locks:a:1", "10000").Int64(); err != nil || tok <= 0 {
				t.Fatalf("alice's LOCK through a follower: %v %v", tok, err)
			}
			if err := alice.Do(ctx, "LOCK", "locks:b:1", "10000").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
				t.Errorf("alice's LOCK of another team's key through a follower: %v", err)
			}
			const noperm = "NOPERM this user has no permissions to run the 'raft|forwarded' command"
			if err := alice.Do(ctx, "RAFT", "FORWARDED", "default").Err(); err == nil || err.Error() != noperm {
				t.Errorf("alice's RAFT FORWARDED: %v", err)
			}
			if secured {
				if _, err := call(c.leader().addr, "RAFT", "FORWARDED", "alice"); err == nil || err.Error() != noperm {
					t.Errorf("the default user's RAFT FORWARDED on a secured cluster: %v", err)
				}
			}
			// A connection that says RAFT FORWARDED is still closed by --timeout 1.
			nc, err := net.Dial("tcp", c.leader().addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			hello := "*2\r\n$4\r\nRAFT\r\n$9\r\nFORWARDED\r\n"
			if secured {
				hello = "*3\r\n$4\r\nAUTH\r\n$4\r\npeer\r\n$6\r\npeerpw\r\n" + hello
			}
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := nc.Write([]byte(hello)); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(nc)
			for range strings.Count(hello, "*") {
				if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
					t.Fatalf("RAFT FORWARDED link: %q %v", line, err)
				}
			}
			start := time.Now()
			if _, err := br.ReadByte(); err == nil || time.Since(start) > 5*time.Second {
				t.Errorf("an idle RAFT FORWARDED connection after %v: %v, want it closed by --timeout 1", time.Since(start), err)
			}
			// The leader closed alice's idle link too; her next LOCK goes through.
			for end := time.Now().Add(1600 * time.Millisecond); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
				if err := alice.Ping(ctx).Err(); err != nil {
					t.Fatalf("PING: %v", err)
				}
			}
			if tok, err := alice.Do(ctx, "LOCK", "locks:a:2", "10000").Int64(); err != nil || tok <= 0 {
				t.Errorf("alice's LOCK after the leader closed her idle link: %v %v", tok, err)
			}
		})
	}
}

// TestClusterACLClientCertificate: with --tls-auth-clients-user CN, a client whose certificate
// names alice (CN=alice) is alice on every node without AUTH, and a follower forwards its
// requests acting for alice (the leader checks alice's key patterns); a certificate that names
// no user is the default user's, as in Redis 7.2.
func TestClusterACLClientCertificate(t *testing.T) {
	// Each node with its own node certificate (the nodes verify each other's on the client
	// port); the harness's own client certificate names user "tester", which does not exist:
	// it is the default user.
	ca := newClusterCA(t)
	aliceCert := ca.client(t, "alice")
	c := newSecureCluster(t, 3, ca, true, "--tls-auth-clients-user", "CN")
	if v, err := call(c.leader().addr, "ACL", "SETUSER", "alice", "on", "~locks:a:*", "+@all", "-@admin"); err != nil || v != "OK" {
		t.Fatalf("ACL SETUSER alice (no password: only her certificate logs her in): %v %v", v, err)
	}
	ctx := context.Background()
	for _, n := range c.live() {
		testutil.WaitFor(t, convergeTimeout, func() error {
			if v, err := call(n.addr, "ACL", "GETUSER", "alice"); err != nil || v == nil {
				return fmt.Errorf("alice is not on %s yet: %v %v", n.id, v, err)
			}
			return nil
		})
		alice := redis.NewClient(&redis.Options{Addr: n.addr, TLSConfig: ca.clientTLS(&aliceCert), MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second})
		t.Cleanup(func() { alice.Close() })
		if who, err := alice.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "alice" {
			t.Errorf("%s: ACL WHOAMI with alice's certificate: %q %v", n.id, who, err)
		}
		if tok, err := alice.Do(ctx, "LOCK", "locks:a:"+n.id, "10000").Int64(); err != nil || tok <= 0 {
			t.Errorf("%s: alice's LOCK: %v %v", n.id, tok, err)
		}
		if err := alice.Do(ctx, "LOCK", "locks:b:1", "10000").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("%s: alice's LOCK of another team's key: %v", n.id, err)
		}
		if who, err := call(n.addr, "ACL", "WHOAMI"); err != nil || who != "default" {
			t.Errorf("%s: ACL WHOAMI with a certificate that names no user: %v %v", n.id, who, err)
		}
	}
}
