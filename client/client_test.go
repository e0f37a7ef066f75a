package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply as go-redis gives it (a redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want outcome
	}{
		{nil, final},
		{redis.Nil, final},
		{redis.ErrClosed, final},
		{replyError("TRYAGAIN not the leader"), notDone},
		{replyError("CLUSTERDOWN no leader"), notDone},
		{replyError("UNCERTAIN leadership changed"), unknownDone},
		{replyError("ERR wrong number of arguments"), final},
		{replyError("NOPERM no permissions"), final},
		{io.EOF, unknownDone},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, unknownDone},
	} {
		if got := classify(tc.err); got != tc.want {
			t.Errorf("classify(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestOwnerToken(t *testing.T) {
	holders := []any{
		[]any{"owner", "a", "token", int64(12), "pttl", int64(900)},
		[]any{"owner", "b", "token", int64(13), "pttl", int64(950)},
	}
	for _, tc := range []struct {
		name  string
		reply any
		owner string
		want  uint64
		ok    bool
	}{
		{"plain, ours", []any{"owner", "me", "token", int64(7), "pttl", int64(100)}, "me", 7, true},
		{"plain, another's", []any{"owner", "you", "token", int64(7), "pttl", int64(100)}, "me", 0, false},
		{"shared, second holder", []any{"kind", "shared", "holders", holders}, "b", 13, true},
		{"semaphore, not among holders", []any{"kind", "semaphore", "permits", int64(3), "holders", holders}, "c", 0, false},
		{"lock-delay", []any{"kind", "delay", "token", int64(9), "pttl", int64(4000)}, "me", 0, false},
		{"not an array", "OK", "me", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ownerToken(tc.reply, tc.owner)
			if got != tc.want || ok != tc.ok {
				t.Errorf("ownerToken = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{Addrs: []string{"127.0.0.1:6379"}}, true},
		{Options{}, false},
		{Options{Addrs: []string{"nohost"}}, false},
		{Options{Addrs: []string{"127.0.0.1:6379"}, RenewFraction: 1}, false},
		{Options{Addrs: []string{"127.0.0.1:6379"}, Protocol: 3}, true},
		{Options{Addrs: []string{"127.0.0.1:6379"}, Protocol: 4}, false},
		{Options{Addrs: []string{"127.0.0.1:6379"}, ReadTimeout: -time.Second}, false},
	} {
		if err := tc.opts.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate() = %v, want ok %v", tc.opts, err, tc.ok)
		}
	}
}

func TestLockUnlock(t *testing.T) {
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("resp%d", proto), func(t *testing.T) { lockUnlock(t, proto) })
	}
}

func lockUnlock(t *testing.T, proto int) {
	c := liveClient(t, Options{Protocol: proto})
	ctx := t.Context()
	l, err := c.Lock(ctx, "unit/basic", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Validate(ctx, "unit/basic", l.Token()); !ok || err != nil {
		t.Fatalf("Validate while held: %v, %v", ok, err)
	}
	if _, err := c.TryLock(ctx, "unit/basic", time.Second); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != ErrReleased {
		t.Fatalf("Err after Unlock: %v, want ErrReleased", err)
	}
	if ok, err := c.Validate(ctx, "unit/basic", l.Token()); ok || err != nil {
		t.Fatalf("Validate after Unlock: %v, %v", ok, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("second Unlock: %v", err)
	}
}

// TestLostNotice: a release by someone else with the handle's token reaches the handle as
// its channel's notice, long before a renewal would find it.
func TestLostNotice(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	// The notice, not the check of a lock asked for before its channel was confirmed
	// (checkMissed, which may find it gone first): the channel is subscribed and confirmed
	// before the lock is asked for.
	chans := c.channels([]string{"unit/notice"})
	c.watch.subscribe(chans)
	defer c.watch.unsubscribe(chans)
	for deadline := time.Now().Add(5 * time.Second); !c.watch.confirmed(chans); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the channel's subscription was never confirmed")
		}
	}
	l, err := c.Lock(ctx, "unit/notice", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	// The subscription is sent before the LOCK but may be applied after it: wait until the
	// node counts it.
	deadline := time.Now().Add(5 * time.Second)
	for n := int64(0); n == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the client never subscribed to __lock__:unit/notice")
		}
		v, err := rdb.PubSubNumSub(ctx, "__lock__:unit/notice").Result()
		if err != nil {
			t.Fatal(err)
		}
		n = v["__lock__:unit/notice"]
	}
	if n, err := rdb.Do(ctx, "UNLOCK", "unit/notice", l.Token()).Int64(); n != 1 || err != nil {
		t.Fatalf("UNLOCK by another connection: %d, %v", n, err)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after another connection released the lock")
	}
	var lost *LostError
	if err := l.Err(); !errors.As(err, &lost) || lost.Reason != "released" || !errors.Is(err, ErrLockLost) {
		t.Fatalf("Err = %v, want a LostError released", err)
	}
	if err := l.Unlock(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Unlock of a lost lock: %v, want its loss", err)
	}
}

func TestKinds(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	// Leases of a second, held for three below: each kind's renewal keeps it.
	const ttl = time.Second
	r1, err := c.TryLock(ctx, "unit/shared", ttl, Shared())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.TryLock(ctx, "unit/shared", ttl, Shared())
	if err != nil {
		t.Fatalf("a second share: %v", err)
	}
	if _, err := c.TryLock(ctx, "unit/shared", time.Second); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a plain lock over two shares: %v, want ErrNotAcquired", err)
	}
	p1, err := c.TryLock(ctx, "unit/sem", ttl, Semaphore(1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "unit/sem", 2*time.Second, Semaphore(1)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a second permit of one: %v, want ErrNotAcquired", err)
	}
	m, err := c.MultiLock(ctx, ttl, []string{"unit/m1", "unit/m2", "unit/m3"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Tokens(); len(got) != 3 || got["unit/m1"] == 0 || got["unit/m1"] >= got["unit/m3"] {
		t.Fatalf("MultiLock tokens %v", got)
	}
	time.Sleep(3 * ttl)
	for _, l := range []*Lock{r1, r2, p1, m} {
		if err := l.Err(); err != nil {
			t.Fatalf("%q after three leases: %v", l.Key(), err)
		}
		for key, token := range l.Tokens() {
			if ok, err := c.Validate(ctx, key, token); !ok || err != nil {
				t.Fatalf("VALIDATE %s %d after a second of 300 ms leases: %v, %v", key, token, ok, err)
			}
		}
	}
	for _, l := range []*Lock{r1, r2, p1, m} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("Unlock %q: %v", l.Key(), err)
		}
	}
	if ok, err := c.Validate(ctx, "unit/m2", m.Tokens()["unit/m2"]); ok || err != nil {
		t.Fatalf("VALIDATE of an MLOCK key after Unlock: %v, %v", ok, err)
	}
	// Everything released: a plain lock and a permit are free again.
	for _, opts := range [][]LockOption{nil, {Semaphore(1)}} {
		key := "unit/shared"
		if opts != nil {
			key = "unit/sem"
		}
		l, err := c.TryLock(ctx, key, time.Second, opts...)
		if err != nil {
			t.Fatalf("%s after the release: %v", key, err)
		}
		l.Unlock(ctx)
	}
}

// TestRenewal: a lease of a second lives on for 4 s while the handle renews it.
func TestRenewal(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	l, err := c.Lock(ctx, "unit/renew", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if err := l.Err(); err != nil {
			t.Fatalf("lost while renewing: %v", err)
		}
		if ok, err := c.Validate(ctx, "unit/renew", l.Token()); !ok || err != nil {
			t.Fatalf("VALIDATE while renewing: %v, %v", ok, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitCancelled: cancelling a Lock that waits leaves no waiter in the key's queue.
func TestWaitCancelled(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	holder, err := c.Lock(ctx, "unit/wait", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Unlock(ctx)
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.Lock(wctx, "unit/wait", time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its deadline: %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Lock returned %v after its 500 ms deadline", d)
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	var waiters []any
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		waiters, err = rdb.Do(ctx, "LOCKWAITERS", "unit/wait").Slice()
		if err != nil {
			t.Fatal(err)
		}
		if len(waiters) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LOCKWAITERS 5 s after the cancel: %v", waiters)
		}
	}
}

// TestIdleChannelsUnsubscribed: the channel of a key no longer locked is unsubscribed soon
// after (it lingers a moment in case the key is locked again).
func TestIdleChannelsUnsubscribed(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	l, err := c.Lock(ctx, "unit/idle", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	numsub := func() int64 {
		v, err := rdb.PubSubNumSub(ctx, "__lock__:unit/idle").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v["__lock__:unit/idle"]
	}
	for deadline := time.Now().Add(5 * time.Second); numsub() != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never subscribed to __lock__:unit/idle while holding it")
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * idleFor); numsub() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("__lock__:unit/idle still subscribed %v after its Unlock", 5*idleFor)
		}
	}
}

// TestWaitGranted: a Lock that waits gets the lock when its holder lets go, with a larger
// token; after a wait longer than a third of its lease it starts with a lease renewed, not
// one nearly gone. A Wait bound that passes first gives ErrNotAcquired.
func TestWaitGranted(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	holder, err := c.Lock(ctx, "unit/handoff", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := c.Lock(ctx, "unit/handoff", time.Second, Wait(200*time.Millisecond)); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("Lock with Wait 200 ms on a held key: %v, want ErrNotAcquired", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 2*time.Second {
		t.Fatalf("Wait 200 ms gave up after %v", d)
	}
	time.AfterFunc(600*time.Millisecond, func() { holder.Unlock(context.Background()) })
	const ttl = time.Second
	l, err := c.Lock(ctx, "unit/handoff", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if l.Token() <= holder.Token() {
		t.Fatalf("the waiter's token %d is not above the holder's %d", l.Token(), holder.Token())
	}
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := l.Err(); err != nil {
			t.Fatalf("the lock granted after a wait: %v", err)
		}
	}
	if ok, err := c.Validate(ctx, "unit/handoff", l.Token()); !ok || err != nil {
		t.Fatalf("VALIDATE of the waiter's token: %v, %v", ok, err)
	}
}

// Two acquisitions of one key under the same owner in one Client would be one lock (the server
// gives the same owner the same token) in two handles: the second is refused while the first
// holds, and goes through once it is released.
func TestSameOwnerTwice(t *testing.T) {
	c := liveClient(t, Options{})
	ctx := t.Context()
	a, err := c.TryLock(ctx, "unit/same-owner", 2*time.Second, Owner("svc"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "unit/same-owner", 2*time.Second, Owner("svc")); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("a second handle under the same owner: %v, want ErrNotAcquired", err)
	}
	if err := a.Err(); err != nil {
		t.Fatalf("the first handle after the refusal: %v", err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := c.TryLock(ctx, "unit/same-owner", 2*time.Second, Owner("svc"))
	if err != nil {
		t.Fatalf("the same owner once the first was released: %v", err)
	}
	b.Unlock(ctx)
}

// Close ends a Lock waiting its turn: it returns ErrClosed, and whatever the server grants
// afterwards is not left held under its owner.
func TestCloseEndsAWait(t *testing.T) {
	ctx := t.Context()
	holder := liveClient(t, Options{})
	h, err := holder.TryLock(ctx, "unit/close-wait", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Options{Addrs: []string{serverAddr}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "unit/close-wait", 5*time.Second, Owner("waiter"))
		got <- err
	}()
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2})
	defer rdb.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := rdb.Do(ctx, "LOCKWAITERS", "unit/close-wait").Slice(); len(n) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	start := time.Now()
	c.Close()
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the waiting Lock after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Lock did not end with Close")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // a hand-off, were the waiter still queued
	if v, err := rdb.Do(ctx, "LOCKINFO", "unit/close-wait").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("LOCKINFO after Close and the holder's release = %v, %v; want the key free", v, err)
	}
}

// A notice that names a token before its handle exists (between the grant and register) ends
// the handle as register makes it.
func TestEarlyNotice(t *testing.T) {
	c := liveClient(t, Options{})
	chans := c.channels([]string{"unit/early"})
	c.watch.subscribe(chans)
	defer c.watch.unsubscribe(chans)
	mark := c.watch.mark(chans)
	c.watch.deliver(chans[0], "lost 4242 deleted")
	l := &Lock{c: c, keys: []string{"unit/early"}, tokens: []uint64{4242}, ttl: time.Second, done: make(chan struct{}), mark: mark}
	l.mu.expiry = time.Now().Add(time.Second)
	c.watch.register(l)
	defer c.watch.unregister(l)
	var lost *LostError
	if err := l.Err(); !errors.As(err, &lost) || lost.Reason != "deleted" || lost.Token != 4242 {
		t.Fatalf("Err after an early notice = %v, want lost (deleted)", err)
	}
}
