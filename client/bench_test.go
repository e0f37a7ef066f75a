package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The benchmarks run against serverAddr (TestMain's: RAFTLOCK_ADDR, or a node it starts from
// ../bin/raftlock), at 1 and 64 goroutines, each on keys of its own. "client" is this
// package; "raw" is go-redis sending the same commands with nothing around them: the
// difference is what the client costs (the subscription to each key's notices, the renewer
// goroutine and timer, the handle). `make bench` runs them (scripts/bench.sh).

// benchPool is the connections per node for both: enough for 64 goroutines.
const benchPool = 64

// parallel runs fn b.N times in all over g goroutines, each with its own id, and reports
// the rate.
func parallel(b *testing.B, g int, fn func(id, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	b.ResetTimer()
	start := time.Now()
	for id := range g {
		wg.Go(func() {
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				if err := fn(id, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func rawClient(b *testing.B) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: serverAddr, Protocol: 2, PoolSize: benchPool, MaxRetries: -1, DisableIdentity: true})
	b.Cleanup(func() { rdb.Close() })
	return rdb
}

// BenchmarkLockUnlock: one op is an acquire and its release. Each goroutine locks a key of
// its own again and again, except in client/fresh, where every op takes a key never locked
// before: the client then subscribes to its notices and, once idle, unsubscribes, each time.
func BenchmarkLockUnlock(b *testing.B) {
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("client/fresh/g=%d", g), func(b *testing.B) {
			c := liveClient(b, Options{PoolSize: benchPool})
			ctx := context.Background()
			run := time.Now().UnixNano() // the benchmark runs several rounds: new keys each
			parallel(b, g, func(id, i int) error {
				l, err := c.Lock(ctx, fmt.Sprintf("bench/fresh/%d/%d/%d", run, id, i), 10*time.Second)
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			})
		})
		b.Run(fmt.Sprintf("client/g=%d", g), func(b *testing.B) {
			c := liveClient(b, Options{PoolSize: benchPool})
			ctx := context.Background()
			parallel(b, g, func(id, _ int) error {
				l, err := c.Lock(ctx, fmt.Sprintf("bench/lock/%d", id), 10*time.Second)
				if err != nil {
					return err
				}
				return l.Unlock(ctx)
			})
		})
		b.Run(fmt.Sprintf("raw/g=%d", g), func(b *testing.B) {
			rdb := rawClient(b)
			ctx := context.Background()
			parallel(b, g, func(id, _ int) error {
				key := fmt.Sprintf("bench/raw/%d", id)
				token, err := rdb.Do(ctx, "LOCK", key, 10000).Int64()
				if err != nil {
					return err
				}
				return rdb.Do(ctx, "UNLOCK", key, token).Err()
			})
		})
	}
}

// BenchmarkRenew: one op is a renewal of a held lock, as the client's renewer sends it (with
// its bookkeeping) or as a bare RENEW.
func BenchmarkRenew(b *testing.B) {
	for _, g := range []int{1, 64} {
		b.Run(fmt.Sprintf("client/g=%d", g), func(b *testing.B) {
			c := liveClient(b, Options{PoolSize: benchPool})
			ctx := context.Background()
			locks := make([]*Lock, g)
			for id := range g {
				l, err := c.Lock(ctx, fmt.Sprintf("bench/renew/%d", id), time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				locks[id] = l
				b.Cleanup(func() { l.Unlock(ctx) })
			}
			parallel(b, g, func(id, _ int) error { return locks[id].renew(ctx) })
		})
		b.Run(fmt.Sprintf("raw/g=%d", g), func(b *testing.B) {
			rdb := rawClient(b)
			ctx := context.Background()
			tokens := make([]int64, g)
			for id := range g {
				// An owner of its own: the next round of the benchmark asks again for the lock
				// this one holds, and gets the same token.
				t, err := rdb.Do(ctx, "LOCK", fmt.Sprintf("bench/rawrenew/%d", id), 60000, "OWNER", fmt.Sprint(id)).Int64()
				if err != nil {
					b.Fatal(err)
				}
				tokens[id] = t
			}
			parallel(b, g, func(id, _ int) error {
				n, err := rdb.Do(ctx, "RENEW", fmt.Sprintf("bench/rawrenew/%d", id), tokens[id], 60000).Int64()
				if err == nil && n != 1 {
					err = fmt.Errorf("RENEW answered %d", n)
				}
				return err
			})
		})
	}
}
