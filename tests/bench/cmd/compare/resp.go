package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Lockers that speak the Redis protocol: raftlock's own LOCK/UNLOCK, the SET
// NX PX recipe (raftlock or redis-server), and Redlock through redsync.

// unlockScript is the compare-and-delete release of the SET NX PX recipe:
// delete the key only if it still holds our value.
const unlockScript = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"

// netTimeout bounds every dial, read and write on top of the cell's deadline.
const netTimeout = 5 * time.Second

// quietRedis drops go-redis's own log lines (a refused dial while a server
// starts); the driver reports failures itself.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// newRESPClient returns a client holding exactly one connection (pipelines
// included), that never retries (a retried acquire could take a second
// lock) and honours the context's deadline on every read and write.
func newRESPClient(addr string) *redis.Client { return newWaitingClient(addr, 0) }

// newWaitingClient is newRESPClient for a client whose replies may take
// wait besides the round trip (LOCK ... WAIT).
func newWaitingClient(addr string, wait time.Duration) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		Protocol:              2,
		PoolSize:              1,
		PipelinePoolSize:      -1,
		MaxRetries:            -1,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
		DialTimeout:           netTimeout,
		ReadTimeout:           netTimeout + wait,
		WriteTimeout:          netTimeout,
	})
}

// openConns opens n clients to addr (newWaitingClient's, for wait), each
// connected (by a PING) before the cell starts so that dialing is not
// measured.
func openConns(ctx context.Context, addr string, n int, wait time.Duration) ([]*redis.Client, error) {
	cls := make([]*redis.Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cls {
		cls[i] = newWaitingClient(addr, wait)
		wg.Go(func() { errs[i] = cls[i].Ping(ctx).Err() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll(cls)
		return nil, err
	}
	return cls, nil
}

func closeAll(cls []*redis.Client) {
	for _, c := range cls {
		_ = c.Close() // nothing to do about a failed close
	}
}

// respLocker is one connection taking locks natively (LOCK key ttl →
// token; UNLOCK key token), natively queueing for them (LOCK key ttl OWNER
// owner WAIT ms: the leader hands the lock to its waiters in turn), or by
// the recipe (SET key value NX PX ttl; EVALSHA of unlockScript, loaded once
// per cell).
type respLocker struct {
	c      *redis.Client
	native bool
	waitMS int64  // > 0: LOCK ... WAIT (native only)
	sha    string // of unlockScript
	ttlMS  int64
	owner  string // unique per worker: values are owner:seq
	seq    uint64
	held   []heldLock
}

type heldLock struct {
	key, value string
	token      int64
}

// openRESP opens the workers of one cell against addr. Each of s.conns
// connections pipelines s.depth cycles. With wait (native only), each
// acquire queues for its key for up to wait.
func openRESP(ctx context.Context, addr string, s setting, native bool, ttl, wait time.Duration) (*workers, error) {
	if wait > 0 && (!native || s.depth != 1) {
		return nil, errors.New("LOCK ... WAIT is native and cannot pipeline")
	}
	cls, err := openConns(ctx, addr, s.conns, wait)
	if err != nil {
		return nil, err
	}
	var sha string
	if !native {
		// Loaded once, as a library would; raftlock replicates its script cache.
		if sha, err = cls[0].ScriptLoad(ctx, unlockScript).Result(); err != nil {
			closeAll(cls)
			return nil, fmt.Errorf("SCRIPT LOAD: %w", err)
		}
	}
	w := &workers{batch: s.depth, close: func() { closeAll(cls) }}
	for i, c := range cls {
		w.lockers = append(w.lockers, &respLocker{c: c, native: native, waitMS: wait.Milliseconds(), sha: sha, ttlMS: ttl.Milliseconds(), owner: "w" + strconv.Itoa(i)})
	}
	return w, nil
}

func (l *respLocker) acquire(ctx context.Context, keys []string) (int, error) {
	l.held = l.held[:0]
	if l.waitMS > 0 {
		// go-redis honours a context's deadline while it reads a reply,
		// not its cancellation, and a queued LOCK reads for up to its
		// WAIT: ending ctx closes the connection instead, so that the
		// cell can stop its waiters at once. The server then drops the
		// wait, or releases a grant that raced the close (a ghost lock).
		stop := context.AfterFunc(ctx, func() { _ = l.c.Close() })
		defer stop()
	}
	args := make([][]any, len(keys))
	values := make([]string, len(keys))
	for i, k := range keys {
		switch {
		case l.waitMS > 0:
			args[i] = []any{"LOCK", k, l.ttlMS, "OWNER", l.owner, "WAIT", l.waitMS}
			continue
		case l.native:
			args[i] = []any{"LOCK", k, l.ttlMS}
			continue
		}
		l.seq++
		values[i] = l.owner + ":" + strconv.FormatUint(l.seq, 10)
		args[i] = []any{"SET", k, values[i], "NX", "PX", l.ttlMS}
	}
	var errs []error
	for i, cmd := range l.exec(ctx, args) {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue // refused: held by someone else
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		h := heldLock{key: keys[i], value: values[i]}
		var ok bool
		if l.native {
			h.token, ok = v.(int64)
		} else {
			ok = v == "OK"
		}
		if !ok {
			errs = append(errs, fmt.Errorf("unexpected reply to acquire: %T %v", v, v))
			continue
		}
		l.held = append(l.held, h)
	}
	return len(l.held), errors.Join(errs...)
}

func (l *respLocker) release(ctx context.Context) error {
	args := make([][]any, len(l.held))
	for i, h := range l.held {
		if l.native {
			args[i] = []any{"UNLOCK", h.key, h.token}
		} else {
			args[i] = []any{"EVALSHA", l.sha, 1, h.key, h.value}
		}
	}
	var errs []error
	for _, cmd := range l.exec(ctx, args) {
		if n, err := cmd.Int64(); err != nil || n != 1 {
			errs = append(errs, fmt.Errorf("release: got %d, %v; want 1", n, err))
		}
	}
	l.held = l.held[:0]
	return errors.Join(errs...)
}

// exec sends the commands as one pipeline, or as a plain request when there
// is only one. Each command carries its own result.
func (l *respLocker) exec(ctx context.Context, args [][]any) []*redis.Cmd {
	if len(args) == 1 {
		return []*redis.Cmd{l.c.Do(ctx, args[0]...)}
	}
	pipe := l.c.Pipeline()
	cmds := make([]*redis.Cmd, len(args))
	for i, a := range args {
		cmds[i] = pipe.Do(ctx, a...)
	}
	_, _ = pipe.Exec(ctx) // the first failure, which the commands carry too
	return cmds
}

// redsyncLocker takes Redlock locks over every node through redsync, with
// redsync's defaults except a single try: the load loop does the retrying,
// at once, as it does for every other system.
type redsyncLocker struct {
	rs   *redsync.Redsync
	ttl  time.Duration
	held *redsync.Mutex
}

// openRedsync opens s.conns workers, each with one connection to every node
// (redsync asks the nodes in parallel). Redlock cannot pipeline: depth must
// be 1.
func openRedsync(ctx context.Context, addrs []string, s setting, ttl time.Duration) (*workers, error) {
	if s.depth != 1 {
		return nil, errors.New("redsync cannot pipeline")
	}
	var all []*redis.Client
	w := &workers{batch: 1, close: func() { closeAll(all) }}
	for range s.conns {
		var pools []rsredis.Pool
		for _, a := range addrs {
			cls, err := openConns(ctx, a, 1, 0)
			if err != nil {
				closeAll(all)
				return nil, err
			}
			all = append(all, cls[0])
			pools = append(pools, goredis.NewPool(cls[0]))
		}
		w.lockers = append(w.lockers, &redsyncLocker{rs: redsync.New(pools...), ttl: ttl})
	}
	return w, nil
}

func (l *redsyncLocker) acquire(ctx context.Context, keys []string) (int, error) {
	if len(keys) != 1 {
		return 0, errors.New("redsync takes one lock at a time")
	}
	m := l.rs.NewMutex(keys[0], redsync.WithExpiry(l.ttl), redsync.WithTries(1))
	err := m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case err == nil:
		l.held = m
		return 1, nil
	case errors.As(err, &taken), errors.Is(err, redsync.ErrFailed):
		return 0, nil // a majority of nodes hold it for someone else
	default:
		return 0, err
	}
}

func (l *redsyncLocker) release(ctx context.Context) error {
	m := l.held
	l.held = nil
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync unlock: not released on a majority")
	}
	return err
}
