package clients

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// The scenarios every library runs, in this order, each a subtest named as in the matrix.
const (
	scConnect    = "connect"     // library-specific set-up checks (the protocol it negotiated)
	scAcquire    = "acquire"     // a free lock is granted; the key holds the owner's value and lease
	scContend    = "contend"     // a second owner (another client, on the second node) is refused
	scExtend     = "extend"      // the holder extends its lease; PTTL shows the new lease
	scWrongOwner = "wrong-owner" // another owner's release/extend fails and changes nothing
	scRelease    = "release"     // the holder releases; the key is free; a second owner gets it
	scWait       = "wait"        // a second owner waiting (retries or notifications) gets it once released
	scExpiry     = "expiry"      // a short lease ends by itself, never early; the next owner gets it
)

var (
	errRefused = errors.New("refused: held by another owner")
	errNotHeld = errors.New("not held by this owner")
)

// lockClient is one library's lock API through one client, reduced to what the scenarios need.
type lockClient interface {
	// acquire tries once without waiting: errRefused when another owner holds the lock.
	acquire(ctx context.Context, key string, ttl time.Duration) (lockHandle, error)
}

type lockHandle interface {
	value() string                                       // what the library stored in the key
	extend(ctx context.Context, ttl time.Duration) error // errNotHeld when it is not the holder
	release(ctx context.Context) error                   // errNotHeld when it is not the holder
}

// forger: a library that can make a handle for a key with a value of its choice (a second owner
// that believes it holds the lock). Without one, wrong-owner uses a stale holder instead.
type forger interface {
	forge(key, value string) lockHandle
}

// waiter: a library that can wait for a held lock (retries or notifications).
type waiter interface {
	acquireWait(ctx context.Context, key string, ttl, wait time.Duration) (lockHandle, error)
}

func randomValue(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// runLockFlow runs the scenarios for a library whose first owner uses a and second owner b;
// in reads keys on a's node.
// connect, when not nil, runs first as scenario "connect" (e.g. the protocol check).
func runLockFlow(t *testing.T, lib string, a, b lockClient, in inspector, connect func(t *testing.T)) {
	s := newSuite(t, lib)
	key := uniqueKey(lib)
	var h lockHandle
	var first []string
	if connect != nil {
		s.run(scConnect, nil, connect)
		first = []string{scConnect}
	}

	s.run(scAcquire, first, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		var err error
		if h, err = a.acquire(ctx, key, 10*time.Second); err != nil {
			fail(t, "acquire a free lock: %v", err)
		}
		in.expectHeld(t, ctx, key, h.value(), 5*time.Second, 10*time.Second)
	})

	s.run(scContend, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		start := time.Now()
		h2, err := b.acquire(ctx, key, 10*time.Second)
		switch {
		case err == nil:
			_ = h2.release(ctx)
			fail(t, "a second owner acquired a held lock (value %q)", h2.value())
		case !errors.Is(err, errRefused):
			fail(t, "a second owner's try: %v; want a refusal", err)
		case time.Since(start) > 5*time.Second:
			fail(t, "the refusal took %v", time.Since(start))
		}
		in.expectHeld(t, ctx, key, h.value(), 0, 10*time.Second)
	})

	s.run(scExtend, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		time.Sleep(1500 * time.Millisecond) // the lease runs down below 8.5 s ...
		in.expectHeld(t, ctx, key, h.value(), 0, 8500*time.Millisecond)
		if err := h.extend(ctx, 10*time.Second); err != nil {
			fail(t, "extend by the holder: %v", err)
		}
		// ... and is back near 10 s: renewed from now.
		in.expectHeld(t, ctx, key, h.value(), 9*time.Second, 10*time.Second)
	})

	s.run(scWrongOwner, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		if f, ok := b.(forger); ok {
			intruder := f.forge(key, randomValue("intruder-"))
			if err := intruder.extend(ctx, 60*time.Second); !errors.Is(err, errNotHeld) {
				fail(t, "extend by a wrong owner: %v; want a refusal", err)
			}
			if err := intruder.release(ctx); !errors.Is(err, errNotHeld) {
				fail(t, "release by a wrong owner: %v; want a refusal", err)
			}
			in.expectHeld(t, ctx, key, h.value(), 0, 10*time.Second)
			return
		}
		staleHolder(t, ctx, a, b, in, uniqueKey(lib, "stale"))
	})

	s.run(scRelease, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		if err := h.release(ctx); err != nil {
			fail(t, "release by the holder: %v", err)
		}
		in.expectFree(t, ctx, key)
		if err := h.release(ctx); !errors.Is(err, errNotHeld) {
			fail(t, "a second release: %v; want a refusal", err)
		}
		h2, err := b.acquire(ctx, key, 10*time.Second)
		if err != nil {
			fail(t, "a second owner after the release: %v", err)
		}
		if err := h2.release(ctx); err != nil {
			fail(t, "the second owner's release: %v", err)
		}
	})

	if w, ok := b.(waiter); ok {
		s.run(scWait, nil, func(t *testing.T) {
			ctx := ctxFor(t, 20*time.Second)
			key := uniqueKey(lib, "wait")
			h, err := a.acquire(ctx, key, 10*time.Second)
			if err != nil {
				fail(t, "acquire: %v", err)
			}
			released := make(chan time.Time, 1)
			go func() {
				time.Sleep(300 * time.Millisecond)
				at := time.Now()
				if err := h.release(ctx); err != nil {
					t.Errorf("release by the holder: %v", err)
				}
				released <- at
			}()
			h2, err := w.acquireWait(ctx, key, 10*time.Second, 5*time.Second)
			got := time.Now()
			at := <-released
			if err != nil {
				fail(t, "a waiting second owner: %v; want the lock once released", err)
			}
			defer h2.release(ctx)
			if got.Before(at) {
				fail(t, "the waiter got the lock at %v, before the holder released it at %v", got, at)
			}
			if d := got.Sub(at); d > 3*time.Second {
				fail(t, "the waiter got the lock %v after the release", d)
			}
			in.expectHeld(t, ctx, key, h2.value(), 5*time.Second, 10*time.Second)
		})
	}

	s.run(scExpiry, nil, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		expiry(t, ctx, a, b, in, uniqueKey(lib, "expiry"), time.Second)
	})
}

// staleHolder: a's lease ends, b acquires; a's release and extend must fail and leave b's lock.
func staleHolder(t *testing.T, ctx context.Context, a, b lockClient, in inspector, key string) {
	t.Helper()
	old, err := a.acquire(ctx, key, 500*time.Millisecond)
	if err != nil {
		fail(t, "acquire with a short lease: %v", err)
	}
	in.waitFree(t, ctx, key, 5*time.Second)
	cur, err := b.acquire(ctx, key, 10*time.Second)
	if err != nil {
		fail(t, "the next owner after the lease ended: %v", err)
	}
	defer cur.release(ctx)
	if err := old.extend(ctx, 60*time.Second); !errors.Is(err, errNotHeld) {
		fail(t, "extend by the stale holder: %v; want a refusal", err)
	}
	if err := old.release(ctx); !errors.Is(err, errNotHeld) {
		fail(t, "release by the stale holder: %v; want a refusal", err)
	}
	in.expectHeld(t, ctx, key, cur.value(), 5*time.Second, 10*time.Second)
}

// expiry: a holds key for ttl and never releases; b is refused until the lease ends, never
// before, and gets it soon after; a's late release must not free b's lock.
func expiry(t *testing.T, ctx context.Context, a, b lockClient, in inspector, key string, ttl time.Duration) {
	t.Helper()
	start := time.Now()
	old, err := a.acquire(ctx, key, ttl)
	if err != nil {
		fail(t, "acquire with a %v lease: %v", ttl, err)
	}
	var cur lockHandle
	for cur == nil {
		h, err := b.acquire(ctx, key, 10*time.Second)
		now := time.Since(start)
		switch {
		case err == nil:
			if now < ttl {
				_ = h.release(ctx)
				fail(t, "a second owner got the lock %v after a %v lease began: early", now, ttl)
			}
			t.Logf("the next owner got the lock %v after the %v lease began", now, ttl)
			cur = h
		case !errors.Is(err, errRefused):
			fail(t, "the next owner's try: %v", err)
		case now > ttl+5*time.Second:
			fail(t, "the lease has not ended %v after it began (lease %v)", now, ttl)
		default:
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer cur.release(ctx)
	if err := old.release(ctx); !errors.Is(err, errNotHeld) {
		fail(t, "the expired holder's release: %v; want a refusal", err)
	}
	in.expectHeld(t, ctx, key, cur.value(), 5*time.Second, 10*time.Second)
}
