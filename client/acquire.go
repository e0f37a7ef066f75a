package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxWait is the longest WAIT the server takes; a longer wait is several in a row.
const maxWait = 60 * time.Second

// LockOption changes how Lock, TryLock or MultiLock asks for a lock.
type LockOption func(*lockOptions)

type lockOptions struct {
	kind    kind
	permits int
	owner   string
	delay   time.Duration
	wait    time.Duration // 0: until ctx ends
}

// Shared asks for a share of a shared (read) lock: any number are held together, and a plain
// lock waits for all of them.
func Shared() LockOption { return func(o *lockOptions) { o.kind = shared } }

// Semaphore asks for one permit of a semaphore of permits (SEMACQUIRE).
func Semaphore(permits int) LockOption {
	return func(o *lockOptions) { o.kind, o.permits = semaphore, permits }
}

// Owner names the holder. The default is a random owner for each call, which the call's own
// retries reuse: asking again with the same owner is what makes a retry after UNCERTAIN safe
// (the server answers with the same token). Give one only to take over a lock that an earlier
// process of yours, with the same owner, holds: the server treats every request of one owner
// as the same holder's. Within one Client a second acquisition of a key under an owner that
// one of its handles (or acquisitions) has is refused with ErrNotAcquired; two Clients that
// share an owner share its locks.
func Owner(id string) LockOption { return func(o *lockOptions) { o.owner = id } }

// Delay sets a lock-delay: once the lease expires (not after an Unlock), nobody is granted the
// key for d.
func Delay(d time.Duration) LockOption { return func(o *lockOptions) { o.delay = d } }

// Wait bounds how long Lock waits for the lock, besides its context's deadline.
func Wait(d time.Duration) LockOption { return func(o *lockOptions) { o.wait = d } }

// Lock takes the lock on key with a lease of ttl, waiting in the server's first-come
// first-served queue while someone else holds it: until ctx ends (then ctx's error) or the
// Wait option's time passes (then ErrNotAcquired); with neither, for as long as it takes.
// Cancelling ctx takes its place in the queue away: the wait's connection is closed, and the
// server withdraws a waiter whose connection closed. The server's WAIT is at most a minute: a
// longer wait asks again each minute, and so queues again at the back (a waiter can be
// overtaken then by those that queued during the minute).
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, ttl, true, opts)
}

// TryLock takes the lock on key with a lease of ttl if it is free, else returns
// ErrNotAcquired at once. It takes the same options as Lock.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration, opts ...LockOption) (*Lock, error) {
	return c.acquire(ctx, []string{key}, ttl, false, opts)
}

// MultiLock takes plain locks on all of keys with one MLOCK, all or none, waiting as Lock
// does. Its handle renews, watches and releases them together: losing one is losing the
// handle.
func (c *Client) MultiLock(ctx context.Context, ttl time.Duration, keys []string, opts ...LockOption) (*Lock, error) {
	if len(keys) == 0 {
		return nil, errors.New("client: MultiLock of no keys")
	}
	opts = append(opts, func(o *lockOptions) { o.kind = multi })
	return c.acquire(ctx, keys, ttl, true, opts)
}

// request is one acquisition being asked for.
type request struct {
	keys []string
	ttl  time.Duration
	lockOptions
	// unknownSince is when the first attempt whose outcome was unknown was sent (zero: none
	// yet). A grant found afterwards by reading may date from that attempt, so its lease is
	// counted from then.
	unknownSince time.Time
	// mark is what the notice subscriber had heard on the keys' channels when the request was
	// first sent (watcher.mark).
	mark noticeMark
}

// attempted records an attempt sent at sent that failed with err.
func (r *request) attempted(sent time.Time, err error) {
	if classify(err) == unknownDone && r.unknownSince.IsZero() {
		r.unknownSince = sent
	}
}

// recover reads, after an attempt of unknown outcome, whether an MLOCK was granted: asking
// again would be refused while the first grant holds, as the same OWNER's LOCK would not.
// sent is when the grant's lease began at the earliest.
func (r *request) recover(ctx context.Context, rdb *redis.Client) (tokens []uint64, sent time.Time, err error) {
	if r.unknownSince.IsZero() || r.kind != multi {
		return nil, time.Time{}, nil
	}
	tokens, held, err := ownedTokens(ctx, rdb, r)
	if err != nil || !held {
		return nil, time.Time{}, err
	}
	return tokens, r.unknownSince, nil
}

// args are the command that asks for the lock, WAITing wait when it is positive.
func (r *request) args(wait time.Duration) []any {
	ttl := r.ttl.Milliseconds()
	var a []any
	switch r.kind {
	case plain:
		a = []any{"LOCK", r.keys[0], ttl}
	case shared:
		a = []any{"LOCK", r.keys[0], ttl, "SHARED"}
	case semaphore:
		a = []any{"SEMACQUIRE", r.keys[0], r.permits, ttl}
	case multi:
		a = []any{"MLOCK", ttl}
		for _, k := range r.keys {
			a = append(a, k)
		}
	}
	a = append(a, "OWNER", r.owner)
	if r.delay > 0 {
		a = append(a, "DELAY", r.delay.Milliseconds())
	}
	if wait > 0 {
		a = append(a, "WAIT", max(wait.Milliseconds(), 1))
	}
	return a
}

// tokens reads a granted reply: a token, or an MLOCK's array of them; granted is false for
// nil (held by someone else).
func (r *request) tokens(v any, err error) (tokens []uint64, granted bool, _ error) {
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	switch v := v.(type) {
	case int64:
		return []uint64{uint64(v)}, true, nil
	case []any:
		if len(v) == len(r.keys) {
			for _, t := range v {
				n, ok := t.(int64)
				if !ok {
					break
				}
				tokens = append(tokens, uint64(n))
			}
			if len(tokens) == len(r.keys) {
				return tokens, true, nil
			}
		}
	}
	return nil, false, fmt.Errorf("client: unexpected reply %#v to %s", v, r.args(0)[0])
}

func (c *Client) acquire(ctx context.Context, keys []string, ttl time.Duration, wait bool, opts []LockOption) (*Lock, error) {
	// The server counts a lease in whole milliseconds: so does the client, or a fraction of a
	// millisecond would be counted that the server does not grant.
	r := &request{keys: keys, ttl: ttl.Truncate(time.Millisecond)}
	for _, o := range opts {
		o(&r.lockOptions)
	}
	switch {
	case ttl < time.Millisecond:
		return nil, fmt.Errorf("client: lease %v is shorter than a millisecond", ttl)
	case r.kind == semaphore && r.permits < 1:
		return nil, fmt.Errorf("client: semaphore of %d permits", r.permits)
	}
	if r.owner == "" {
		r.owner = newOwner()
	}
	if err := c.begin(keys, r.owner); err != nil {
		return nil, err
	}
	defer c.acquiring.Done()
	// Close ends the acquisition too (a Lock waiting its turn).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	// Listen for the keys' notices before asking: a loss between the grant and a later
	// subscription would go unheard (the renewals would still find it). mark says what the
	// subscriber had heard by then, for register to tell whether a notice may have been missed.
	chans := c.channels(keys)
	c.watch.subscribe(chans)
	r.mark = c.watch.mark(chans)
	l, err := c.acquireSubscribed(ctx, r, wait)
	if err != nil {
		c.watch.unsubscribe(chans)
		c.unclaim(keys, r.owner)
		if c.isClosed() && ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, err
	}
	return l, nil
}

func (c *Client) acquireSubscribed(ctx context.Context, r *request, wait bool) (*Lock, error) {
	var waitUntil time.Time
	if r.wait > 0 {
		waitUntil = time.Now().Add(r.wait)
	}
	tokens, sent, err := c.ask(ctx, r)
	var giveUp time.Time // while waits fail: when to stop trying other nodes
	for attempt := 0; err == nil && tokens == nil && wait; {
		w, byCtx := maxWait, false
		if d, ok := ctx.Deadline(); ok && time.Until(d) < w {
			w, byCtx = time.Until(d), true
		}
		if !waitUntil.IsZero() && time.Until(waitUntil) < w {
			w, byCtx = time.Until(waitUntil), false
		}
		if w < time.Millisecond {
			if byCtx {
				<-ctx.Done()
				err = ctx.Err()
			}
			break
		}
		i, _ := c.node()
		tokens, sent, err = c.askWaiting(ctx, c.opts.Addrs[i], r, w)
		if err != nil && ctx.Err() != nil {
			// The grant may have come as the connection closed, with none to read it.
			c.releaseOwned(ctx, r)
			return nil, ctx.Err()
		}
		if classify(err) == final {
			giveUp, attempt = time.Time{}, 0
			continue
		}
		c.next(i)
		if giveUp.IsZero() {
			giveUp = time.Now().Add(c.opts.RetryTimeout)
		} else if time.Now().After(giveUp) {
			break
		}
		if err := sleep(ctx, backoff(attempt, len(c.nodes))); err != nil {
			c.releaseOwned(ctx, r)
			return nil, err
		}
		attempt++
		err = nil
	}
	if err != nil || tokens == nil {
		if !r.unknownSince.IsZero() {
			// An attempt may have been granted, its reply lost: let nothing of ours linger
			// until its lease runs out.
			c.releaseOwned(ctx, r)
		}
		if err == nil {
			err = ErrNotAcquired
		}
		return nil, err
	}
	l := &Lock{c: c, keys: r.keys, owner: r.owner, tokens: tokens, ttl: r.ttl, kind: r.kind, done: make(chan struct{}),
		mark: r.mark}
	l.mu.expiry = sent.Add(r.ttl)
	// A grant after a long wait came late in a lease counted from the send: renew before
	// handing the lock out, so its holder starts with a lease it can use.
	if time.Since(sent) > time.Duration(float64(r.ttl)*c.opts.RenewFraction) {
		if err := l.renew(ctx); err != nil {
			c.releaseOwned(ctx, r)
			return nil, fmt.Errorf("client: renew after the grant: %w", err)
		}
	}
	if err := l.start(); err != nil {
		c.releaseOwned(ctx, r)
		return nil, err
	}
	return l, nil
}

// ask sends the request without WAIT through the shared pools, retrying on the next node as
// call does. The retry is safe: the same OWNER asking again gets the same token (an MLOCK's
// keys are read first: recover). sent is when the attempt that got the answer was sent: the
// lease began after it.
func (c *Client) ask(ctx context.Context, r *request) (tokens []uint64, sent time.Time, err error) {
	_, err = c.call(ctx, func(ctx context.Context, rdb *redis.Client) error {
		if tokens, sent, err = r.recover(ctx, rdb); err != nil || tokens != nil {
			return err
		}
		sent = time.Now()
		tokens, _, err = r.tokens(rdb.Do(ctx, r.args(0)...).Result())
		r.attempted(sent, err)
		return err
	})
	return tokens, sent, err
}

// askWaiting sends the request with WAIT w to the node at addr, on a connection of its own
// that it closes if ctx ends first: the server withdraws a waiter whose connection closed.
func (c *Client) askWaiting(ctx context.Context, addr string, r *request, w time.Duration) (tokens []uint64, sent time.Time, err error) {
	d := &dialer{timeout: c.opts.DialTimeout, tls: c.opts.TLSConfig}
	o := c.redisOptions(addr)
	o.Dialer = d.dial
	o.PoolSize = 1
	o.ReadTimeout = -1 // wctx's deadline bounds the wait instead
	rdb := redis.NewClient(o)
	defer rdb.Close()
	defer context.AfterFunc(ctx, d.close)()
	wctx, cancel := context.WithTimeout(ctx, w+c.opts.ReadTimeout)
	defer cancel()
	if tokens, sent, err = r.recover(wctx, rdb); err != nil || tokens != nil {
		return tokens, sent, err
	}
	sent = time.Now()
	tokens, _, err = r.tokens(rdb.Do(wctx, r.args(w)...).Result())
	r.attempted(sent, err)
	return tokens, sent, err
}

// ownedTokens reads each key's holders with LOCKINFO and returns the tokens r's owner holds;
// held is true only when it holds every key.
func ownedTokens(ctx context.Context, rdb *redis.Client, r *request) (tokens []uint64, held bool, err error) {
	for _, key := range r.keys {
		v, err := rdb.Do(ctx, "LOCKINFO", key).Result()
		if errors.Is(err, redis.Nil) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		t, ok := ownerToken(v, r.owner)
		if !ok {
			return nil, false, nil
		}
		tokens = append(tokens, t)
	}
	return tokens, true, nil
}

// ownerToken finds owner's token in a LOCKINFO reply: a lock's owner, token and pttl, or a kind
// and its holders, each such a reply; in RESP2 a flat array of fields and values, in RESP3 a map.
func ownerToken(v any, owner string) (uint64, bool) {
	var fields []any
	switch v := v.(type) {
	case []any:
		fields = v
	case map[any]any:
		for k, x := range v {
			fields = append(fields, k, x)
		}
	default:
		return 0, false
	}
	var own bool
	var token int64
	for i := 0; i+1 < len(fields); i += 2 {
		switch fields[i] {
		case "owner":
			own = fields[i+1] == owner
		case "token":
			token, _ = fields[i+1].(int64)
		case "holders":
			holders, _ := fields[i+1].([]any)
			for _, h := range holders {
				if t, ok := ownerToken(h, owner); ok {
					return t, true
				}
			}
		}
	}
	if !own || token <= 0 {
		return 0, false
	}
	return uint64(token), true
}

// releaseOwned releases whatever r's owner holds of r's keys, for an acquisition given up
// after the server may have granted it. It is bounded by its own timeout: the caller's ctx
// may have ended already.
func (c *Client) releaseOwned(ctx context.Context, r *request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReadTimeout)
	defer cancel()
	for _, key := range r.keys {
		one := &request{keys: []string{key}, lockOptions: r.lockOptions}
		_, _ = c.call(ctx, func(ctx context.Context, rdb *redis.Client) error {
			tokens, held, err := ownedTokens(ctx, rdb, one)
			if err != nil || !held {
				return err
			}
			verb := "UNLOCK"
			if r.kind == semaphore {
				verb = "SEMRELEASE"
			}
			return rdb.Do(ctx, verb, key, tokens[0]).Err()
		})
	}
}

// newOwner returns a random owner name, unique with overwhelming odds.
func newOwner() string {
	var b [12]byte
	rand.Read(b[:])
	return "go-" + hex.EncodeToString(b[:])
}

// dialer dials connections as go-redis would and keeps them, so that close can break one off
// in the middle of a read.
type dialer struct {
	timeout time.Duration
	tls     *tls.Config
	mu      sync.Mutex
	conns   []net.Conn
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: d.timeout}
	var conn net.Conn
	var err error
	if d.tls == nil {
		conn, err = nd.DialContext(ctx, network, addr)
	} else {
		conn, err = (&tls.Dialer{NetDialer: nd, Config: d.tls}).DialContext(ctx, network, addr)
	}
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, conn)
	d.mu.Unlock()
	return conn, nil
}

// close closes every connection dialed.
func (d *dialer) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, conn := range d.conns {
		conn.Close()
	}
}

// channels returns the lost-lock notice channel of each key (docs/locks.md).
func (c *Client) channels(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		if c.opts.DB == 0 {
			out[i] = "__lock__:" + k
		} else {
			out[i] = fmt.Sprintf("__lock__@%d__:%s", c.opts.DB, k)
		}
	}
	return out
}
