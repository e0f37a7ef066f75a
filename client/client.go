package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configure a Client. A zero field means its documented default.
type Options struct {
	// Addrs are the client addresses (host:port) of any of the cluster's nodes. The client
	// talks to one at a time and moves to the next when it stops answering; a follower
	// forwards writes to the leader, so any node will do.
	Addrs []string

	// Username and Password authenticate every connection (AUTH, as Redis 6 ACL users do).
	Username string
	Password string
	// DB is the database (SELECT) the locks live in.
	DB int
	// TLSConfig, when set, makes every connection speak TLS.
	TLSConfig *tls.Config
	// Protocol is the RESP version the connections speak: 2 (0 means 2) or 3. Replies mean the
	// same either way; lost-lock notices come by pub/sub on a connection of its own in both.
	Protocol int

	// RenewFraction is how far into a lease a renewal is sent: 0 means 1/3, so a lease survives
	// two lost renewals. It must be above 0 and below 1.
	RenewFraction float64
	// DialTimeout bounds a connection's dial and handshake; 0 means 2 s.
	DialTimeout time.Duration
	// ReadTimeout bounds each reply; 0 means 3 s. A LOCK … WAIT gets its wait on top.
	ReadTimeout time.Duration
	// RetryTimeout bounds how long one call goes on trying nodes while none can serve it (a
	// node died, a leader is being elected), within its context's deadline; 0 means 5 s.
	RetryTimeout time.Duration
	// PoolSize is the number of connections kept per node; 0 means go-redis's default (10 per
	// CPU). A waiting Lock uses a connection of its own besides these.
	PoolSize int
}

// Validate reports the first field that cannot be used.
func (o Options) Validate() error {
	switch {
	case len(o.Addrs) == 0:
		return errors.New("client: Options.Addrs is empty")
	case o.Protocol != 0 && o.Protocol != 2 && o.Protocol != 3:
		return fmt.Errorf("client: Options.Protocol %d: want 2 or 3", o.Protocol)
	case o.RenewFraction < 0 || o.RenewFraction >= 1:
		return fmt.Errorf("client: Options.RenewFraction %v is not in (0, 1)", o.RenewFraction)
	case o.DialTimeout < 0:
		return fmt.Errorf("client: Options.DialTimeout %v is negative", o.DialTimeout)
	case o.ReadTimeout < 0:
		return fmt.Errorf("client: Options.ReadTimeout %v is negative", o.ReadTimeout)
	case o.RetryTimeout < 0:
		return fmt.Errorf("client: Options.RetryTimeout %v is negative", o.RetryTimeout)
	case o.PoolSize < 0:
		return fmt.Errorf("client: Options.PoolSize %d is negative", o.PoolSize)
	}
	for i, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("client: Options.Addrs[%d] %q: %w", i, a, err)
		}
	}
	return nil
}

// withDefaults fills the zero fields with their defaults.
func (o Options) withDefaults() Options {
	if o.RenewFraction == 0 {
		o.RenewFraction = 1.0 / 3
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 3 * time.Second
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = 5 * time.Second
	}
	o.Addrs = append([]string(nil), o.Addrs...)
	return o
}

// Client takes locks from a raftlock cluster. It is safe for concurrent use.
type Client struct {
	opts  Options
	nodes []*redis.Client // one pool per address, in Options.Addrs's order
	cur   atomic.Uint32   // the index in nodes of the node in use
	watch *watcher

	// life ends when Close is called: the notice subscriber runs in it, and every acquisition
	// in progress (a Lock waiting its turn) ends with it. stop ends it. wg counts the
	// goroutines that must exit before Close returns; acquiring the acquisitions in progress,
	// which Close waits for before it closes the connections they may still need (to release
	// what they may have been granted).
	life      context.Context
	stop      context.CancelFunc
	wg        sync.WaitGroup
	acquiring sync.WaitGroup
	closeOnce sync.Once

	mu struct {
		sync.Mutex
		closed bool
		locks  map[*Lock]struct{} // the handles not yet ended, which Close ends
		// claims counts, by key and owner, the acquisitions in progress and the handles not yet
		// ended: the server gives the same owner the same token, so a second one of this
		// client's under the same owner would be the same lock in two handles.
		claims map[claim]int
	}
}

// claim is a key taken under an owner.
type claim struct{ key, owner string }

// New returns a Client of the nodes at opts.Addrs. It dials nothing yet: the first call does.
func New(opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Client{opts: opts.withDefaults()}
	c.mu.locks = map[*Lock]struct{}{}
	c.mu.claims = map[claim]int{}
	for _, addr := range c.opts.Addrs {
		c.nodes = append(c.nodes, redis.NewClient(c.redisOptions(addr)))
	}
	c.life, c.stop = context.WithCancel(context.Background())
	c.watch = newWatcher(c)
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.watch.run(c.life)
	}()
	return c, nil
}

// redisOptions are go-redis's options for one node. go-redis never retries by itself: a retry
// is safe only where this package says so (call), and only on another node when this one
// cannot serve.
func (c *Client) redisOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Username:              c.opts.Username,
		Password:              c.opts.Password,
		DB:                    c.opts.DB,
		TLSConfig:             c.opts.TLSConfig,
		Protocol:              cmp.Or(c.opts.Protocol, 2),
		DialTimeout:           c.opts.DialTimeout,
		ReadTimeout:           c.opts.ReadTimeout,
		WriteTimeout:          c.opts.ReadTimeout,
		ContextTimeoutEnabled: true, // a renewal must give up when its lease runs out
		PoolSize:              c.opts.PoolSize,
		MaxRetries:            -1,
		DialerRetries:         1, // a dead node fails the attempt at once; call moves on
		DisableIdentity:       true,
	}
}

// Close ends every lock handle still held (their Err becomes ErrClosed; the server lets their
// leases run out) and every Lock still waiting (it returns ErrClosed, and releases what it may
// have been granted), stops the client's goroutines and closes its connections. It is
// idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.mu.closed = true
		locks := make([]*Lock, 0, len(c.mu.locks))
		for l := range c.mu.locks {
			locks = append(locks, l)
		}
		c.mu.Unlock()
		for _, l := range locks {
			l.end(ErrClosed)
		}
		c.stop()
		c.acquiring.Wait()
		c.watch.close()
		c.wg.Wait()
		for _, rdb := range c.nodes {
			rdb.Close()
		}
	})
	return nil
}

// begin registers an acquisition of keys under owner: it fails once the client is closed, and
// with ErrNotAcquired while one of this client's acquisitions or handles has one of the keys
// under the same owner. end undoes it; the handle the acquisition makes takes its claims over.
func (c *Client) begin(keys []string, owner string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	for _, k := range keys {
		if c.mu.claims[claim{k, owner}] > 0 {
			return ErrNotAcquired
		}
	}
	for _, k := range keys {
		c.mu.claims[claim{k, owner}]++
	}
	c.acquiring.Add(1)
	return nil
}

// unclaim drops the claims of keys under owner (an acquisition that failed, a handle that
// ended).
func (c *Client) unclaim(keys []string, owner string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if c.mu.claims[claim{k, owner}]--; c.mu.claims[claim{k, owner}] <= 0 {
			delete(c.mu.claims, claim{k, owner})
		}
	}
}

// track records a handle for Close to end, and counts its renewer in wg, under the same lock
// Close takes to mark the client closed: a handle is either tracked before Close looks, or
// refused. It fails once the client is closed.
func (c *Client) track(l *Lock) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return ErrClosed
	}
	c.mu.locks[l] = struct{}{}
	c.wg.Add(1)
	return nil
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.closed
}

func (c *Client) untrack(l *Lock) {
	c.mu.Lock()
	delete(c.mu.locks, l)
	c.mu.Unlock()
}

// Validate reports whether token is the current holder's of key: what a resource protected by
// the lock asks before it acts for a client that presents the token.
func (c *Client) Validate(ctx context.Context, key string, token uint64) (bool, error) {
	if c.isClosed() {
		return false, ErrClosed
	}
	var held bool
	_, err := c.call(ctx, func(ctx context.Context, rdb *redis.Client) error {
		n, err := rdb.Do(ctx, "VALIDATE", key, token).Int64()
		held = n == 1
		return err
	})
	return held, err
}

// outcome is what an attempt's error says about retrying it.
type outcome int

const (
	final       outcome = iota // a reply (or an error that another try would repeat): stop
	notDone                    // nothing happened (TRYAGAIN, CLUSTERDOWN): try again
	unknownDone                // it may or may not have happened (UNCERTAIN, a broken connection)
)

// classify tells what err, returned by an attempt, says about retrying it. raftlock's errors
// are told apart by their first word, as every Redis client reads an error reply's code.
func classify(err error) outcome {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, redis.ErrClosed) {
		return final
	}
	var re redis.Error
	if errors.As(err, &re) {
		code, _, _ := strings.Cut(re.Error(), " ")
		switch code {
		case "TRYAGAIN", "CLUSTERDOWN":
			return notDone
		case "UNCERTAIN":
			return unknownDone
		}
		return final
	}
	// A dial that failed, a connection that broke or timed out: the request may have reached
	// the node before it did.
	return unknownDone
}

// node returns the index and pool of the node in use.
func (c *Client) node() (uint32, *redis.Client) {
	i := c.cur.Load() % uint32(len(c.nodes))
	return i, c.nodes[i]
}

// next moves from node i to the one after it, unless another call has moved on already.
func (c *Client) next(i uint32) {
	c.cur.CompareAndSwap(i, (i+1)%uint32(len(c.nodes)))
}

// call runs op on the node in use until it gives a reply, trying again on the next node after
// an error that says op did not happen or may have: op must be safe to repeat. It gives up
// when ctx ends or after Options.RetryTimeout, with the last error. uncertain reports whether
// an attempt's outcome was unknown, so that a caller who reads 0 from a repeated UNLOCK knows
// the first one may have done it.
func (c *Client) call(ctx context.Context, op func(ctx context.Context, rdb *redis.Client) error) (uncertain bool, err error) {
	giveUp := time.Now().Add(c.opts.RetryTimeout)
	for attempt := 0; ; attempt++ {
		i, rdb := c.node()
		err = op(ctx, rdb)
		out := classify(err)
		if out == final {
			return uncertain, err // a reply, even if ctx ended meanwhile: the caller must know it
		}
		if out == unknownDone {
			uncertain = true
		}
		if ctx.Err() != nil {
			return uncertain, ctx.Err()
		}
		c.next(i)
		if !time.Now().Before(giveUp) {
			return uncertain, err
		}
		if err := sleep(ctx, backoff(attempt, len(c.nodes))); err != nil {
			return uncertain, err
		}
	}
}

// backoff is the pause before attempt+1: none while there are nodes not yet tried this round,
// then growing to 400 ms, with jitter, while a new leader is elected (about a second).
func backoff(attempt, nodes int) time.Duration {
	if attempt+1 < nodes {
		return 0
	}
	d := 25 * time.Millisecond << min(attempt+1-nodes, 4)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
