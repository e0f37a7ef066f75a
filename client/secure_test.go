package client

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
	"github.com/redis/go-redis/v9"
)

// TestTLSUserAndDatabase: a Client over TLS with a client certificate the node requires, logged
// in as an ACL user allowed only the keys locks:* and the lock channels, in database 3, over
// RESP2 and RESP3. Locks, renewals, notices and releases all work there, the locks live in
// database 3 alone, and a key outside the user's reach is refused at once, not retried.
func TestTLSUserAndDatabase(t *testing.T) {
	ca := testutil.NewCA(t, "client-tests")
	node, app := ca.Issue(t, "node"), ca.Issue(t, "app")
	users := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(users, []byte("user default on >admin-secret ~* &* +@all\n"+
		"user app on >app-secret ~locks:* &__lock__* +@all -@admin -@dangerous\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stop, addr, err := startServer(serverBin, "--tls-cert-file", node.CertFile, "--tls-key-file", node.KeyFile,
		"--tls-ca-cert-file", ca.File, "--aclfile", users)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	admin := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: ca.ClientTLS(&app), Password: "admin-secret", DB: 3, Protocol: 2})
	defer admin.Close()

	// Without the certificate, or with a wrong password, nothing is granted.
	for name, opts := range map[string]Options{
		"no certificate": {TLSConfig: ca.ClientTLS(nil), Username: "app", Password: "app-secret"},
		"wrong password": {TLSConfig: ca.ClientTLS(&app), Username: "app", Password: "guess"},
	} {
		opts.Addrs, opts.RetryTimeout = []string{addr}, 300*time.Millisecond
		c, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		if l, err := c.TryLock(t.Context(), "locks:refused", time.Second); err == nil {
			t.Errorf("%s: granted token %d", name, l.Token())
		}
		c.Close()
	}

	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			c, err := New(Options{Addrs: []string{addr}, TLSConfig: ca.ClientTLS(&app), Username: "app", Password: "app-secret", DB: 3, Protocol: proto})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			key := fmt.Sprintf("locks:report-%d", proto)
			const ttl = time.Second
			l, err := c.Lock(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * ttl) // renewed over TLS, as app, in database 3
			if err := l.Err(); err != nil {
				t.Fatalf("Err after three leases = %v", err)
			}
			if holders := lockHolders(t, admin, key); len(holders) != 1 || holders[0] != l.Token() {
				t.Fatalf("LOCKINFO in database 3: tokens %v, want [%d]", holders, l.Token())
			}
			db0 := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: ca.ClientTLS(&app), Password: "admin-secret", Protocol: 2})
			defer db0.Close()
			if holders := lockHolders(t, db0, key); len(holders) != 0 {
				t.Fatalf("LOCKINFO in database 0: tokens %v, want none", holders)
			}

			if err := l.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if holders := lockHolders(t, admin, key); len(holders) != 0 {
				t.Fatalf("still held by %v after Unlock", holders)
			}

			// The notice of database 3's channel reaches the handle (whose first renewal is
			// 10 s away, so that only the notice can end it).
			if l, err = c.Lock(ctx, key, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := admin.Set(ctx, key, "someone else's", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			select {
			case <-l.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Done still open 5 s after the lock was overwritten")
			}
			var lost *LostError
			if err := l.Err(); !errors.As(err, &lost) || lost.Reason != "overwritten" {
				t.Fatalf("Err = %v, want a LostError overwritten (the notice)", err)
			}
			admin.Del(ctx, key)

			start := time.Now()
			if _, err := c.TryLock(ctx, "other:x", ttl); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Fatalf("TryLock of a key app may not touch: %v, want NOPERM", err)
			}
			if d := time.Since(start); d > 3*time.Second { // a retry would go on for RetryTimeout, 5 s
				t.Fatalf("the NOPERM took %v: it was retried", d)
			}
		})
	}
}
