package clients

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A hand-rolled lock on go-redis, the way most Go services do it: SET NX PX to acquire, and the
// compare-and-delete / compare-and-pexpire scripts (EVALSHA, EVAL on NOSCRIPT) to release and
// extend.
var (
	releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	extendScript  = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`)
)

type goRedisLock struct{ c redis.UniversalClient }

func (l goRedisLock) acquire(ctx context.Context, key string, ttl time.Duration) (lockHandle, error) {
	v := randomValue("go-redis-")
	ok, err := l.c.SetNX(ctx, key, v, ttl).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errRefused
	}
	return goRedisHandle{l.c, key, v}, nil
}

func (l goRedisLock) forge(key, value string) lockHandle { return goRedisHandle{l.c, key, value} }

type goRedisHandle struct {
	c        redis.UniversalClient
	key, val string
}

func (h goRedisHandle) value() string { return h.val }

func (h goRedisHandle) extend(ctx context.Context, ttl time.Duration) error {
	return scriptResult(extendScript.Run(ctx, h.c, []string{h.key}, h.val, ttl.Milliseconds()).Int64())
}

func (h goRedisHandle) release(ctx context.Context) error {
	return scriptResult(releaseScript.Run(ctx, h.c, []string{h.key}, h.val).Int64())
}

func scriptResult(n int64, err error) error {
	switch {
	case err != nil:
		return err
	case n == 1:
		return nil
	case n == 0:
		return errNotHeld
	}
	return fmt.Errorf("script returned %d; want 0 or 1", n)
}

func TestGoRedis(t *testing.T) {
	t.Parallel() // each library on its own keys
	tg := plainTarget(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			t.Parallel()
			client := func(addr string) redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, Dialer: dial(t, ""), DB: testDB()})
				t.Cleanup(func() { c.Close() })
				return c
			}
			lib := fmt.Sprintf("go-redis/resp%d", proto)
			a := client(tg.first)
			runLockFlow(t, lib, goRedisLock{a}, goRedisLock{client(tg.second)}, newInspector(t, tg.first),
				func(t *testing.T) { checkProtocol(t, a, proto) })
		})
	}
}

func TestGoRedisCluster(t *testing.T) {
	t.Parallel() // each library on its own keys
	tg := clusterTarget(t)
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) {
			t.Parallel()
			client := func(addr string) redis.UniversalClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, Protocol: proto, Dialer: dial(t, "")})
				t.Cleanup(func() { c.Close() })
				return c
			}
			lib := fmt.Sprintf("go-redis-cluster/resp%d", proto)
			a := client(tg.first)
			runLockFlow(t, lib, goRedisLock{a}, goRedisLock{client(tg.second)}, newInspector(t, tg.first),
				func(t *testing.T) { checkProtocol(t, a, proto) })
		})
	}
}

// checkProtocol fails the test unless the connection speaks proto (go-redis falls back to RESP2
// silently when HELLO 3 fails).
func checkProtocol(t *testing.T, c redis.UniversalClient, proto int) {
	t.Helper()
	ctx := ctxFor(t, 10*time.Second)
	info, err := c.Do(ctx, "HELLO").Result()
	if err != nil {
		fail(t, "HELLO: %v", err)
	}
	var got any
	switch m := info.(type) {
	case map[any]any:
		got = m["proto"]
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			if m[i] == "proto" {
				got = m[i+1]
			}
		}
	}
	if got != int64(proto) {
		fail(t, "HELLO says proto %v (%T); want %d", got, got, proto)
	}
}
