package clients

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"
)

// bsm/redislock: every operation is a script (obtain is SET NX PX, or a GETRANGE token match
// for a re-obtain).
type redislockLock struct{ c *redislock.Client }

func (l redislockLock) acquire(ctx context.Context, key string, ttl time.Duration) (lockHandle, error) {
	lk, err := l.c.Obtain(ctx, key, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return nil, errRefused
	}
	if err != nil {
		return nil, err
	}
	return redislockHandle{lk}, nil
}

func (l redislockLock) acquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lockHandle, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	lk, err := l.c.Obtain(ctx, key, ttl, &redislock.Options{
		RetryStrategy: redislock.LinearBackoff(50 * time.Millisecond)})
	if errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		return nil, errRefused
	}
	if err != nil {
		return nil, err
	}
	return redislockHandle{lk}, nil
}

type redislockHandle struct{ l *redislock.Lock }

func (h redislockHandle) value() string { return h.l.Token() + h.l.Metadata() }

func (h redislockHandle) extend(ctx context.Context, ttl time.Duration) error {
	err := h.l.Refresh(ctx, ttl, nil)
	if errors.Is(err, redislock.ErrNotObtained) {
		return errNotHeld
	}
	return err
}

func (h redislockHandle) release(ctx context.Context) error {
	err := h.l.Release(ctx)
	if errors.Is(err, redislock.ErrLockNotHeld) {
		return errNotHeld
	}
	return err
}

func TestRedislock(t *testing.T) {
	t.Parallel() // each library on its own keys
	tg := plainTarget(t)
	client := func(addr string) *redislock.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, Dialer: dial(t, ""), DB: testDB()})
		t.Cleanup(func() { c.Close() })
		return redislock.New(c)
	}
	a := client(tg.first)
	in := newInspector(t, tg.first)
	runLockFlow(t, "redislock", redislockLock{a}, redislockLock{client(tg.second)}, in, nil)

	// redislock's own extras: TTL through its script, and a re-obtain with the same token (the
	// GETRANGE branch of its obtain script) that keeps the lock and renews it.
	s := newSuite(t, "redislock")
	s.run("reobtain", nil, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		key := uniqueKey("redislock", "reobtain")
		opts := &redislock.Options{Token: randomValue("tok-"), Metadata: "meta"}
		lk, err := a.Obtain(ctx, key, 2*time.Second, opts)
		if err != nil {
			fail(t, "obtain: %v", err)
		}
		defer lk.Release(ctx)
		if d, err := lk.TTL(ctx); err != nil || d <= 0 || d > 2*time.Second {
			fail(t, "TTL: %v, %v; want in (0, 2s]", d, err)
		}
		lk2, err := a.Obtain(ctx, key, 10*time.Second, opts)
		if err != nil {
			fail(t, "re-obtain with the same token: %v", err)
		}
		in.expectHeld(t, ctx, key, lk2.Token()+lk2.Metadata(), 5*time.Second, 10*time.Second)
		if _, err := a.Obtain(ctx, key, 10*time.Second, &redislock.Options{Token: randomValue("other-")}); !errors.Is(err, redislock.ErrNotObtained) {
			fail(t, "obtain with another token: %v; want ErrNotObtained", err)
		}
	})
}
