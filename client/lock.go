package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lock is a held lock (a plain lock, a share, a semaphore's permit, or an MLOCK's keys). It
// renews its lease in the background until Unlock, or until it is known lost: then Done is
// closed and Err says why. Its methods are safe for concurrent use.
//
// Check Err right before acting on what the lock protects: Err reads the lease clock itself,
// so it answers at once after the process was paused, when the timer behind Done may not have
// fired yet.
type Lock struct {
	c      *Client
	keys   []string
	owner  string
	tokens []uint64 // tokens[i] is keys[i]'s
	ttl    time.Duration
	kind   kind
	done   chan struct{}
	mark   noticeMark // what the subscriber had heard when the lock was asked for

	renewer sync.WaitGroup // the renewer goroutine
	cleanup sync.Once      // forgets the handle in the client and the subscriber

	mu struct {
		sync.Mutex
		err error // nil while held
		// expiry is when the lease runs out on this client's clock: a lease's length after
		// the request that last set it was sent, so it errs early, never late.
		expiry    time.Time
		timer     *time.Timer        // fires at expiry
		stopRenew context.CancelFunc // ends the renewer's context
		unlocked  bool               // Unlock was called
	}
}

// kind is what the server calls the lock, which names the commands that take, renew and
// release it.
type kind int

const (
	plain kind = iota
	shared
	semaphore
	multi
)

// Key returns the lock's key (an MLOCK's first key).
func (l *Lock) Key() string { return l.keys[0] }

// Token returns the lock's fencing token (an MLOCK's first key's): what a protected resource
// compares with the largest token it has seen for the key.
func (l *Lock) Token() uint64 { return l.tokens[0] }

// Tokens returns each key's token.
func (l *Lock) Tokens() map[string]uint64 {
	out := make(map[string]uint64, len(l.keys))
	for i, k := range l.keys {
		out[k] = l.tokens[i]
	}
	return out
}

// Done returns a channel closed once the lock ends: lost (its lost-lock notice came, a renewal
// was refused, its lease ran out on the client's clock), released by Unlock, or its Client
// closed.
func (l *Lock) Done() <-chan struct{} { return l.done }

// Err returns nil while the lock is held, else why it is not: an error matching ErrLockLost
// (a *LostError, or ErrExpired), ErrReleased or ErrClosed.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err == nil && !time.Now().Before(l.mu.expiry) {
		l.endLocked(ErrExpired)
	}
	return l.mu.err
}

// end ends the handle with err unless it has ended already; it returns the error the handle
// ended with first.
func (l *Lock) end(err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err == nil {
		l.endLocked(err)
	}
	return l.mu.err
}

func (l *Lock) endLocked(err error) {
	l.mu.err = err
	close(l.done)
	if l.mu.timer != nil {
		l.mu.timer.Stop()
	}
	if l.mu.stopRenew != nil {
		l.mu.stopRenew()
	}
}

// start begins the handle's life: a timer at its lease's expiry and the renewer. The handle's
// expiry is set.
func (l *Lock) start() error {
	if err := l.c.track(l); err != nil { // counts the renewer in the client's wg
		return err
	}
	check := l.c.watch.register(l)
	ctx, cancel := context.WithCancel(context.Background())
	l.mu.Lock()
	l.mu.stopRenew = cancel
	if l.mu.err == nil {
		l.mu.timer = time.AfterFunc(time.Until(l.mu.expiry), l.checkExpiry)
	} else {
		cancel() // Close ended it, or a notice did, as it was being started
	}
	l.mu.Unlock()
	l.renewer.Add(1)
	go func() {
		defer l.c.wg.Done()
		defer l.renewer.Done()
		defer l.forget()
		if check {
			l.checkMissed(ctx)
		}
		l.renewLoop(ctx)
	}()
	return nil
}

// checkMissed asks VALIDATE for every key once the subscriber hears their channels, for a
// lock whose notices may have gone unheard between its grant and its handle (register): the
// subscription was not confirmed when it was asked for, or the subscriber moved to another
// node meanwhile. A key no longer held ends the handle.
func (l *Lock) checkMissed(ctx context.Context) {
	chans := l.c.channels(l.keys)
	for deadline := time.Now().Add(l.c.opts.ReadTimeout); !l.c.watch.confirmed(chans) && time.Now().Before(deadline); {
		// A subscription unconfirmed for that long is the connection's trouble: run moves
		// on and checks every handle; this one is checked now regardless.
		if sleep(ctx, 5*time.Millisecond) != nil {
			return
		}
	}
	// Bounded by the lease: past it the handle has ended anyway (go-redis gives up a read at a
	// context's deadline, not at its cancellation).
	l.mu.Lock()
	expiry := l.mu.expiry
	l.mu.Unlock()
	for i, key := range l.keys {
		vctx, cancel := context.WithDeadline(ctx, expiry)
		held, err := l.c.Validate(vctx, key, l.tokens[i])
		cancel()
		if err == nil && !held {
			l.end(&LostError{Key: key, Token: l.tokens[i], Reason: "not held"})
			return
		}
	}
}

// checkExpiry runs when the expiry timer fires: it ends the handle if no renewal moved the
// expiry meanwhile, else sets the timer again.
func (l *Lock) checkExpiry() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.err != nil {
		return
	}
	if left := time.Until(l.mu.expiry); left > 0 {
		l.mu.timer.Reset(left)
		return
	}
	l.endLocked(ErrExpired)
}

// forget removes the handle from its client and unsubscribes its keys' channels.
func (l *Lock) forget() {
	l.cleanup.Do(func() {
		l.c.untrack(l)
		l.c.watch.unregister(l)
		l.c.unclaim(l.keys, l.owner)
	})
}

// renewLoop renews the lease at Options.RenewFraction of it, with up to a tenth less of
// jitter so that many locks taken together do not renew together, until ctx ends (the handle
// ended). A renewal refused ends the handle; one that cannot be confirmed in time leaves the
// expiry timer to end it.
func (l *Lock) renewLoop(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var notBefore time.Time // after a failed renewal: a pause before the next
	for {
		l.mu.Lock()
		expiry := l.mu.expiry
		l.mu.Unlock()
		every := time.Duration(float64(l.ttl) * l.c.opts.RenewFraction)
		every -= rand.N(every/10 + 1)
		next := expiry.Add(every - l.ttl)
		if next.Before(notBefore) {
			next = notBefore
		}
		t.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithDeadline(ctx, expiry)
		err := l.renew(rctx)
		cancel()
		var lost *LostError
		switch {
		case errors.As(err, &lost):
			l.end(lost)
			return
		case err != nil:
			// The lease may still be good: try again after a pause, while the expiry timer
			// ends the handle if no renewal is confirmed in time.
			notBefore = time.Now().Add(min(every/4, 100*time.Millisecond))
		}
	}
}

// renew sends RENEW for every key (pipelined, on one node) and, once all are confirmed, moves
// the expiry to a lease after the send. A key whose token no longer holds it is a *LostError.
func (l *Lock) renew(ctx context.Context) error {
	ttlMs := l.ttl.Milliseconds()
	var sent time.Time
	refused := -1
	_, err := l.c.call(ctx, func(ctx context.Context, rdb *redis.Client) error {
		refused = -1
		sent = time.Now()
		cmds, err := pipelined(ctx, rdb, len(l.keys), func(i int) []any { return []any{"RENEW", l.keys[i], l.tokens[i], ttlMs} })
		if err != nil {
			return err
		}
		for i, cmd := range cmds {
			if n, _ := cmd.Int64(); n != 1 {
				refused = i
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if refused >= 0 {
		return &LostError{Key: l.keys[refused], Token: l.tokens[refused], Reason: "not held"}
	}
	l.mu.Lock()
	if e := sent.Add(l.ttl); e.After(l.mu.expiry) {
		l.mu.expiry = e
	}
	l.mu.Unlock()
	return nil
}

// pipelined sends the n commands that args makes in one round trip (the one command alone
// when n is 1) and returns them; err is the first command's error, if any.
func pipelined(ctx context.Context, rdb *redis.Client, n int, args func(i int) []any) ([]*redis.Cmd, error) {
	if n == 1 {
		cmd := rdb.Do(ctx, args(0)...)
		return []*redis.Cmd{cmd}, cmd.Err()
	}
	cmds := make([]*redis.Cmd, n)
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = p.Do(ctx, args(i)...)
		}
		return nil
	})
	return cmds, err
}

// Unlock releases the lock and stops its renewals. It returns nil once the server confirmed
// the release; the lock's own error if it was lost before (the release is sent anyway, and
// harms nothing); a *LostError if the server found the token no longer the holder's. A second
// Unlock returns nil and sends nothing.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	again := l.mu.unlocked
	l.mu.unlocked = true
	l.mu.Unlock()
	if again {
		return nil
	}
	prior := l.end(ErrReleased)
	l.renewer.Wait()
	l.forget()
	err := l.c.release(ctx, l.kind, l.keys, l.tokens)
	if prior != ErrReleased {
		return prior
	}
	return err
}

// release sends the release of each key's token (pipelined, on one node), again for the keys
// not yet confirmed released. A token the server no longer holds is a *LostError, unless a
// release of that key was sent before with an unknown outcome (UNCERTAIN, a broken connection,
// or a pipeline that failed part-way: its first commands may have applied): then it may have
// been that release, and VALIDATE says whether the key is still held, to release again.
func (c *Client) release(ctx context.Context, k kind, keys []string, tokens []uint64) error {
	verb := "UNLOCK"
	if k == semaphore {
		verb = "SEMRELEASE"
	}
	pending := make([]int, len(keys)) // the keys not yet confirmed released, by index
	for i := range pending {
		pending[i] = i
	}
	maybe := make([]bool, len(keys)) // a release of key i was sent with an unknown outcome
	var lost error
	for round := 0; round < 3 && len(pending) > 0; round++ {
		var notHeld []int
		_, err := c.call(ctx, func(ctx context.Context, rdb *redis.Client) error {
			cmds, err := pipelined(ctx, rdb, len(pending), func(j int) []any { return []any{verb, keys[pending[j]], tokens[pending[j]]} })
			var left []int
			for j, cmd := range cmds {
				i := pending[j]
				n, cerr := cmd.Int64()
				switch {
				case cerr == nil && n == 1:
					// released
				case cerr == nil:
					notHeld = append(notHeld, i)
				default:
					if classify(cerr) != notDone {
						maybe[i] = true
					}
					left = append(left, i)
				}
			}
			pending = left
			return err
		})
		for _, i := range notHeld {
			if !maybe[i] {
				if lost == nil {
					lost = &LostError{Key: keys[i], Token: tokens[i], Reason: "not held"}
				}
				continue
			}
			held, verr := c.Validate(ctx, keys[i], tokens[i])
			switch {
			case verr != nil:
				return verr
			case held:
				pending = append(pending, i) // released by nobody: again
			}
		}
		if err != nil && len(pending) > 0 {
			return err
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("client: release of %q not confirmed: the token still holds it", keys[pending[0]])
	}
	return lost
}
