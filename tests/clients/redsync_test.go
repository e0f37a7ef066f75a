package clients

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	goredispool "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	rueidispool "github.com/go-redsync/redsync/v4/redis/rueidis"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
)

// redsync as a Redlock user migrates it: one pool (quorum 1) for the one logical endpoint.
type redsyncLock struct{ rs *redsync.Redsync }

func (l redsyncLock) acquire(ctx context.Context, key string, ttl time.Duration) (lockHandle, error) {
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return nil, redsyncRefusal(err)
	}
	return redsyncHandle{m}, nil
}

func (l redsyncLock) acquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lockHandle, error) {
	delay := 50 * time.Millisecond
	m := l.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(int(wait/delay)),
		redsync.WithRetryDelay(delay))
	if err := m.LockContext(ctx); err != nil {
		return nil, redsyncRefusal(err)
	}
	return redsyncHandle{m}, nil
}

func (l redsyncLock) forge(key, value string) lockHandle {
	return redsyncHandle{l.rs.NewMutex(key, redsync.WithValue(value))}
}

// redsyncRefusal maps redsync's "someone else holds it" errors to errRefused; anything else
// (a server error) stays as it is.
func redsyncRefusal(err error) error {
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	var redisErr *redsync.RedisError
	switch {
	case errors.As(err, &redisErr):
		return err
	case errors.As(err, &taken), errors.As(err, &nodeTaken), errors.Is(err, redsync.ErrFailed):
		return errRefused
	}
	return err
}

type redsyncHandle struct{ m *redsync.Mutex }

func (h redsyncHandle) value() string { return h.m.Value() }

// extend renews the lease to the mutex's own expiry (redsync has no other): the scenarios ask
// for the lease they acquired with; a forged mutex has the default 8 s.
func (h redsyncHandle) extend(ctx context.Context, _ time.Duration) error {
	return redsyncResult(h.m.ExtendContext(ctx))
}

func (h redsyncHandle) release(ctx context.Context) error {
	return redsyncResult(h.m.UnlockContext(ctx))
}

func redsyncResult(ok bool, err error) error {
	if ok {
		return nil
	}
	var redisErr *redsync.RedisError
	if errors.As(err, &redisErr) || err == nil {
		if err == nil {
			return errors.New("redsync: failed without an error")
		}
		return err
	}
	return errNotHeld // ErrTaken, ErrNodeTaken, ErrLockAlreadyExpired, ErrExtendFailed
}

func TestRedsync(t *testing.T) {
	t.Parallel() // each library on its own keys
	tg := plainTarget(t)
	t.Run("goredis", func(t *testing.T) {
		t.Parallel()
		pool := func(addr string) redsyncredis.Pool {
			c := redis.NewClient(&redis.Options{Addr: addr, Dialer: dial(t, ""), DB: testDB()})
			t.Cleanup(func() { c.Close() })
			return goredispool.NewPool(c)
		}
		runLockFlow(t, "redsync/goredis",
			redsyncLock{redsync.New(pool(tg.first))}, redsyncLock{redsync.New(pool(tg.second))},
			newInspector(t, tg.first), nil)
	})
	t.Run("rueidis", func(t *testing.T) {
		t.Parallel()
		pool := func(addr string) redsyncredis.Pool {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial(t, "", nil), SelectDB: testDB()})
			if err != nil {
				t.Fatalf("rueidis.NewClient(%s): %v", addr, err)
			}
			t.Cleanup(c.Close)
			return rueidispool.NewPool(rueidiscompat.NewAdapter(c))
		}
		runLockFlow(t, "redsync/rueidis",
			redsyncLock{redsync.New(pool(tg.first))}, redsyncLock{redsync.New(pool(tg.second))},
			newInspector(t, tg.first), nil)
	})
}
