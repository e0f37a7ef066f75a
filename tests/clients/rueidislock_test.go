package clients

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock: RESP3 with client-side caching (CLIENT TRACKING OPTOUT); a lock is a majority of
// KeyMajority*2-1 keys on the one endpoint, taken with SET NX PXAT scripts, extended in the
// background with PEXPIREAT, released (or lost) through invalidation messages.
//
// Variants:
//   - rueidislock: the defaults. rueidis asks CLUSTER SLOTS and, on raftlock, connects to the
//     leader whichever node it was given.
//   - rueidislock/single: ForceSingleClient, so it stays on the node it was given: on a follower
//     its scripts are forwarded and its invalidations come from that follower.
//   - rueidislock/noloop: NoLoopTracking (CLIENT TRACKING ... NOLOOP), the setting rueidislock
//     recommends on Redis >= 7.0.5. Without it a holder hears of its own extensions, and each
//     invalidation makes it extend again: a busy loop of writes (on Redis too; on raftlock every
//     one is a replicated, fsynced log entry). With it, the holder must extend only on its timer.
func TestRueidislock(t *testing.T) {
	t.Parallel() // each library on its own keys
	tg := plainTarget(t)
	for _, v := range []struct {
		name, lib      string
		single, noloop bool
	}{
		{"auto", "rueidislock", false, false},
		{"single", "rueidislock/single", true, false},
		{"noloop", "rueidislock/noloop", false, true},
	} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			testRueidislock(t, tg, v.lib, v.single, v.noloop)
		})
	}
}

func testRueidislock(t *testing.T, tg target, lib string, single, noloop bool) {
	const majority = 2
	var evalsA atomic.Int64 // scripts sent by the first locker
	// newLocker makes a locker on addr; via, when not empty, is where it really dials.
	newLocker := func(addr, via string, validity time.Duration, evals *atomic.Int64) rueidislock.Locker {
		l, err := rueidislock.NewLocker(rueidislock.LockerOption{
			ClientOption: rueidis.ClientOption{InitAddress: []string{addr}, DialCtxFn: rueidisDial(t, via, evals),
				ForceSingleClient: single, SelectDB: testDB()},
			KeyValidity:    validity,
			KeyMajority:    majority,
			NoLoopTracking: noloop,
			// The time one key's SET NX may take before a try moves on and counts it as failed.
			// The 20 ms default is missed on a loaded 2-core CI machine even by Redis (three
			// suites run side by side, and the default variant's invalidation loop keeps a core
			// busy); a raftlock grant is a replicated, fsynced write: see docs (raise it above
			// the cluster's p99 write latency).
			TryNextAfter: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatalf("NewLocker(%s): %v", addr, err)
		}
		t.Cleanup(l.Close)
		return l
	}
	in := newInspector(t, tg.first)
	// holders returns the values of name's keys that are held.
	holders := func(t *testing.T, ctx context.Context, name string) map[string]string {
		t.Helper()
		got := map[string]string{}
		for i := 0; i < 2*majority-1; i++ {
			k := fmt.Sprintf("rueidislock:%d:%s", i, name)
			v, ok, err := in.value(ctx, k)
			if err != nil {
				fail(t, "GET %s: %v", k, err)
			}
			if ok {
				got[k] = v
			}
		}
		return got
	}
	// heldBy checks that a majority of name's keys hold one value, and returns it.
	heldBy := func(t *testing.T, ctx context.Context, name string) string {
		t.Helper()
		h := holders(t, ctx, name)
		count := map[string]int{}
		for _, v := range h {
			count[v]++
		}
		for v, n := range count {
			if n >= majority {
				return v
			}
		}
		fail(t, "no value holds a majority of %s's keys: %q", name, h)
		return ""
	}

	s := newSuite(t, lib)
	a, b := newLocker(tg.first, "", 2*time.Second, &evalsA), newLocker(tg.second, "", 2*time.Second, nil)
	name := uniqueKey(lib)
	var ctxA context.Context
	var cancelA, cancelB context.CancelFunc
	var valA string

	s.run(scAcquire, nil, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		var err error
		if ctxA, cancelA, err = a.TryWithContext(context.Background(), name); err != nil {
			fail(t, "TryWithContext on a free lock: %v", err)
		}
		valA = heldBy(t, ctx, name)
		for k := range holders(t, ctx, name) {
			if d, err := in.pttl(ctx, k); err != nil || d <= 0 || d > 2*time.Second {
				fail(t, "PTTL %s = %v, %v; want in (0, 2s]", k, d, err)
			}
		}
	})

	s.run(scContend, []string{scAcquire}, func(t *testing.T) {
		_, cancel, err := b.TryWithContext(context.Background(), name)
		if err == nil {
			cancel()
			fail(t, "a second locker acquired a held lock")
		}
		if !errors.Is(err, rueidislock.ErrNotLocked) {
			fail(t, "a second locker's try: %v; want ErrNotLocked", err)
		}
		if ctxA.Err() != nil {
			fail(t, "the holder's context ended: %v", context.Cause(ctxA))
		}
	})

	s.run(scExtend, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		before := evalsA.Load()
		time.Sleep(3 * time.Second) // past the 2 s validity: only the background extension keeps it
		// On its 1 s timer the holder extends its 3 keys about 3 times in 3 s.
		extends := evalsA.Load() - before
		t.Logf("%s: the holder sent %d scripts in 3 s", lib, extends)
		if noloop && extends > 30 {
			fail(t, "the holder sent %d scripts in 3 s; want about 9 (3 keys, one extension a second): it hears of its own writes despite NOLOOP and extends in a loop", extends)
		}
		if ctxA.Err() != nil {
			fail(t, "the holder's context ended after %v: %v (the extension failed)", 3*time.Second, context.Cause(ctxA))
		}
		if v := heldBy(t, ctx, name); v != valA {
			fail(t, "the keys hold %q; want the holder's %q", v, valA)
		}
		if _, cancel, err := b.TryWithContext(context.Background(), name); err == nil {
			cancel()
			fail(t, "a second locker acquired the extended lock")
		}
	})

	s.run(scWrongOwner, []string{scAcquire}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		// b takes the lock over (ForceWithContext); a must learn it lost it (its context ends),
		// and a's release (cancel: a compare-and-delete with a's value) must leave b's keys.
		var err error
		if _, cancelB, err = b.ForceWithContext(context.Background(), name); err != nil {
			fail(t, "ForceWithContext: %v", err)
		}
		forced := time.Now()
		select {
		case <-ctxA.Done():
			t.Logf("%s: the displaced holder's context ended %v after the takeover", lib, time.Since(forced))
		case <-time.After(5 * time.Second):
			fail(t, "the displaced holder's context is still live 5 s after the takeover")
		}
		cancelA()
		valB := heldBy(t, ctx, name)
		if valB == valA {
			fail(t, "the keys still hold the displaced holder's value")
		}
		time.Sleep(200 * time.Millisecond)
		if v := heldBy(t, ctx, name); v != valB {
			fail(t, "after the displaced holder's release the keys hold %q; want the new holder's %q", v, valB)
		}
	})

	s.run(scRelease, []string{scWrongOwner}, func(t *testing.T) {
		ctx := ctxFor(t, 20*time.Second)
		cancelB() // waits until every key is released
		if h := holders(t, ctx, name); len(h) != 0 {
			fail(t, "keys still held after the release: %q", h)
		}
		_, cancel, err := a.TryWithContext(context.Background(), name)
		if err != nil {
			fail(t, "acquire after the release: %v", err)
		}
		cancel()
	})

	s.run(scWait, nil, func(t *testing.T) {
		name := uniqueKey(lib, "wait")
		_, cancel, err := a.TryWithContext(context.Background(), name)
		if err != nil {
			fail(t, "acquire: %v", err)
		}
		released := make(chan time.Time, 1)
		go func() {
			time.Sleep(300 * time.Millisecond)
			released <- time.Now()
			cancel()
		}()
		// WithContext waits for an invalidation message about the keys (no polling).
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		_, cancel2, err := b.WithContext(wctx, name)
		got := time.Now()
		at := <-released
		if err != nil {
			fail(t, "a waiting locker: %v; want the lock once released (no invalidation?)", err)
		}
		defer cancel2()
		if got.Before(at) {
			fail(t, "the waiter got the lock before the holder released it")
		}
	})

	s.run(scExpiry, nil, func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		// The holder hangs (its traffic frozen): it stops extending, its keys expire (PXAT and
		// PEXPIREAT deadlines), and the next locker gets the lock.
		p := startProxy(t, tg.first)
		hung := newLocker(tg.first, p.Addr, time.Second, nil) // every connection through the proxy
		name := uniqueKey(lib, "expiry")
		hctx, hcancel, err := hung.TryWithContext(context.Background(), name)
		if err != nil {
			fail(t, "acquire: %v", err)
		}
		defer hcancel()
		valH := heldBy(t, ctx, name)
		p.Freeze()
		frozen := time.Now()
		for {
			_, cancel, err := b.TryWithContext(context.Background(), name)
			if err == nil {
				t.Logf("the next locker got the lock %v after the holder hung", time.Since(frozen))
				defer cancel()
				break
			}
			// A try that timed out (a loaded machine: the suites run side by side) is tried
			// again; the 6 s bound below still holds the keys to expiring in time.
			if !errors.Is(err, rueidislock.ErrNotLocked) && !errors.Is(err, context.DeadlineExceeded) {
				fail(t, "the next locker's try: %v", err)
			}
			if err != nil && !errors.Is(err, rueidislock.ErrNotLocked) {
				t.Logf("the next locker's try timed out after %v; trying again", time.Since(frozen))
			}
			if time.Since(frozen) > 6*time.Second {
				fail(t, "the hung holder's keys have not expired %v later", time.Since(frozen))
			}
			time.Sleep(50 * time.Millisecond)
		}
		valB := heldBy(t, ctx, name)
		if valB == valH {
			fail(t, "the keys hold the hung holder's value")
		}
		// The holder comes back: its pending extension and its release must not touch b's keys.
		p.Thaw()
		select {
		case <-hctx.Done():
		case <-time.After(5 * time.Second):
			fail(t, "the hung holder's context is still live 5 s after it came back")
		}
		time.Sleep(200 * time.Millisecond)
		if v := heldBy(t, ctx, name); v != valB {
			fail(t, "after the old holder came back the keys hold %q; want %q", v, valB)
		}
	})
}
