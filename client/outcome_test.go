package client

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestUnknownOutcome: each request whose reply is lost after the node acted on it (the
// connection closes, or the node answers UNCERTAIN) ends as if the reply had come: the lock
// the node granted is the handle's, with the node's token, and nothing is granted twice or
// left behind; a renewal or a release of unknown outcome is found to have happened.
func TestUnknownOutcome(t *testing.T) {
	for _, how := range []struct {
		name string
		how  tamper
	}{{"closed", closeConn}, {"uncertain", replyUncertain}} {
		t.Run(how.name, func(t *testing.T) {
			t.Run("lock", func(t *testing.T) { unknownAcquire(t, how.how, "$4\r\nLOCK\r\n") })
			t.Run("shared", func(t *testing.T) { unknownAcquire(t, how.how, "$4\r\nLOCK\r\n", Shared()) })
			t.Run("semaphore", func(t *testing.T) { unknownAcquire(t, how.how, "$10\r\nSEMACQUIRE\r\n", Semaphore(2)) })
			t.Run("multi", func(t *testing.T) { unknownAcquire(t, how.how, "$5\r\nMLOCK\r\n") })
			t.Run("renew", func(t *testing.T) { unknownRenew(t, how.how) })
			t.Run("unlock", func(t *testing.T) { unknownUnlock(t, how.how) })
		})
	}
}

// unknownAcquire takes a lock whose first request's reply the proxy keeps (needle names the
// request), and checks the handle against what the node holds.
func unknownAcquire(t *testing.T, how tamper, needle string, opts ...LockOption) {
	p, c := proxiedClient(t, Options{})
	ctx := t.Context()
	keys := []string{"unit/unknown-" + t.Name()}
	if needle == "$5\r\nMLOCK\r\n" {
		keys = append(keys, keys[0]+"-2")
	}
	p.arm(needle, how, 1)
	var l *Lock
	var err error
	if len(keys) > 1 {
		l, err = c.MultiLock(ctx, 5*time.Second, keys, opts...)
	} else {
		l, err = c.TryLock(ctx, keys[0], 5*time.Second, opts...)
	}
	if err != nil {
		t.Fatalf("acquire with its reply lost: %v", err)
	}
	if p.fired.Load() != 1 {
		t.Fatalf("the proxy kept %d replies, want 1", p.fired.Load())
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	for k, token := range l.Tokens() {
		holders := lockHolders(t, rdb, k)
		if len(holders) != 1 || holders[0] != token {
			t.Fatalf("%s: the node's holders have tokens %v; the handle has %d", k, holders, token)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err = %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for _, k := range keys {
		if holders := lockHolders(t, rdb, k); len(holders) != 0 {
			t.Fatalf("%s still held by tokens %v after Unlock", k, holders)
		}
	}
}

// lockHolders are the tokens LOCKINFO lists for key (every holder of a shared lock or a
// semaphore).
func lockHolders(t *testing.T, rdb *redis.Client, key string) []uint64 {
	t.Helper()
	v, err := rdb.Do(t.Context(), "LOCKINFO", key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		t.Fatalf("LOCKINFO %s: %v", key, err)
	}
	var tokens []uint64
	var walk func(v any)
	walk = func(v any) {
		s, ok := v.([]any)
		if !ok {
			return
		}
		for i := 0; i+1 < len(s); i++ {
			if name, ok := s[i].(string); ok && name == "token" {
				if n, ok := s[i+1].(int64); ok {
					tokens = append(tokens, uint64(n))
				}
			}
		}
		for _, e := range s {
			walk(e)
		}
	}
	walk(v)
	return tokens
}

// unknownRenew: renewals whose replies are lost keep the lock, for leases on end.
func unknownRenew(t *testing.T, how tamper) {
	p, c := proxiedClient(t, Options{})
	const ttl = time.Second
	l, err := c.TryLock(t.Context(), "unit/unknown-renew-"+fmt.Sprint(how), ttl)
	if err != nil {
		t.Fatal(err)
	}
	p.arm("$5\r\nRENEW\r\n", how, 3)
	time.Sleep(4 * ttl)
	if n := p.fired.Load(); n != 3 {
		t.Fatalf("the proxy kept %d renewals' replies, want 3", n)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err after renewals of unknown outcome = %v", err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// unknownUnlock: a release whose reply is lost is found done, and reported as a release, not
// as a lock lost.
func unknownUnlock(t *testing.T, how tamper) {
	p, c := proxiedClient(t, Options{})
	key := "unit/unknown-unlock-" + fmt.Sprint(how)
	l, err := c.TryLock(t.Context(), key, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.arm("$6\r\nUNLOCK\r\n", how, 1)
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock with its reply lost: %v", err)
	}
	if p.fired.Load() != 1 {
		t.Fatalf("the proxy kept %d replies, want 1", p.fired.Load())
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	if holders := lockHolders(t, rdb, key); len(holders) != 0 {
		t.Fatalf("%s still held by tokens %v after Unlock", key, holders)
	}
}
