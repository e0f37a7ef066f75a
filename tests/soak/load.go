package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The mix's key space: bounded, so the data set does not grow by design (a lease lock left to
// expire is taken again once it has; a list is trimmed; hash fields and set members come from
// fixed ranges).
const (
	lockKeys    = 4 // contended LOCK ... WAIT keys
	mutexKeys   = 32
	hashKeys    = 16
	hashFields  = 64
	setKeys     = 8
	setMembers  = 256
	listKeys    = 8
	listMax     = 100 // a list is trimmed to this many once longer
	leaseKeys   = 256 // short leases left to expire
	pubChannels = 3   // one publisher each
	// Leases and waits, in milliseconds.
	lockTTL  = 3000
	lockWait = 1000
	mutexTTL = 3000
	leaseTTL = 500
	// requestLimit is a request's own bound (LOCK ... WAIT waits lockWait of it).
	requestLimit = 5 * time.Second
	// catchUp bounds how far behind its schedule a paced worker may fall before it forgets the
	// missed steps: after a node's restart it goes on at its pace, not in a burst.
	catchUp = time.Second
)

// compareAndDelete is the release of the SET NX recipe: delete the key only if it still holds
// our value.
const compareAndDelete = `if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`

// Worker kinds, and how many of each per node.
const (
	kindLocker     = "locker"     // LOCK ... WAIT, then UNLOCK
	kindMutex      = "mutex"      // SET NX PX, then EVALSHA compare-and-delete
	kindCollection = "collection" // one collection command
	kindLease      = "lease"      // LOCK with a short lease, never released
	kindPublisher  = "publisher"  // PUBLISH the next sequence number on its channel
)

// mix is how many workers of each kind connect to each node's client port. Publishers are
// pubChannels in all, on the nodes in turn.
var mix = []struct {
	kind string
	n    int
}{{kindLocker, 2}, {kindMutex, 2}, {kindCollection, 2}, {kindLease, 1}}

// worker is one client connection doing one kind of step.
type worker struct {
	name    string
	kind    string
	node    int // index of the node its client connects to
	channel int // publishers: the channel's index
	rdb     *redis.Client
	rng     *rand.Rand
	rec     *recorder
	pubsub  *pubsubTracker
	sha     string       // compare-and-delete's SHA1
	steps   atomic.Int64 // steps completed, read by measure
	seq     int64        // publishers: the next sequence number
	owners  uint64       // makes each LOCK's OWNER and SET NX's value unique
}

// newClient is a go-redis client of addr that never retries on its own (the soak counts every
// error) and speaks RESP2, so that no lock-lost push lands among the replies.
func newClient(addr string, conns int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, DisableIdentity: true,
		MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 2 * time.Second, ReadTimeout: requestLimit, WriteTimeout: requestLimit,
		PoolSize: conns,
	})
}

// run does steps until ctx ends, every interval (as fast as it can if 0).
func (w *worker) run(ctx context.Context, interval time.Duration) {
	next := time.Now()
	for ctx.Err() == nil {
		if interval > 0 {
			next = next.Add(interval)
			if wait := time.Until(next); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			} else if -wait > catchUp {
				next = time.Now()
			}
		}
		if ok := w.step(ctx); !ok && interval == 0 {
			// Unpaced, a failing node must not spin the loader.
			sleep(ctx, 50*time.Millisecond)
		}
		w.steps.Add(1)
	}
}

// do sends one request of family fam and records it.
func (w *worker) do(ctx context.Context, fam string, args ...any) (any, error) {
	rctx, cancel := context.WithTimeout(ctx, requestLimit+time.Second)
	defer cancel()
	start := time.Now()
	v, err := w.rdb.Do(rctx, args...).Result()
	if ctx.Err() == nil { // a request cut by the end of the run says nothing about the node
		w.rec.observe(w.node, fam, start, time.Since(start), err)
	}
	return v, err
}

// step does one unit of the worker's kind; false when a request failed.
func (w *worker) step(ctx context.Context) bool {
	switch w.kind {
	case kindLocker:
		key := "soak:lock:" + strconv.Itoa(w.rng.IntN(lockKeys))
		w.owners++
		owner := fmt.Sprintf("%s-%d", w.name, w.owners)
		v, err := w.do(ctx, famLockWait, "LOCK", key, lockTTL, "OWNER", owner, "WAIT", lockWait)
		if err != nil {
			return errors.Is(err, redis.Nil)
		}
		// An unknown outcome leaves the lock to its lease: a lease expiring under WAITers.
		_, err = w.do(ctx, famUnlock, "UNLOCK", key, v)
		return err == nil
	case kindMutex:
		key := "soak:mutex:" + strconv.Itoa(w.rng.IntN(mutexKeys))
		w.owners++
		val := fmt.Sprintf("%s-%d", w.name, w.owners)
		if _, err := w.do(ctx, famSetNX, "SET", key, val, "NX", "PX", mutexTTL); err != nil {
			return errors.Is(err, redis.Nil)
		}
		_, err := w.do(ctx, famScript, "EVALSHA", w.sha, 1, key, val)
		return err == nil
	case kindCollection:
		_, err := w.collection(ctx)
		return err == nil || errors.Is(err, redis.Nil)
	case kindLease:
		key := "soak:lease:" + strconv.Itoa(w.rng.IntN(leaseKeys))
		_, err := w.do(ctx, famLease, "LOCK", key, leaseTTL)
		return err == nil || errors.Is(err, redis.Nil)
	case kindPublisher:
		seq := w.seq
		w.seq++
		ch := w.pubsub.channels[w.channel]
		w.pubsub.sending(w.channel, seq)
		if _, err := w.do(ctx, famPublish, "PUBLISH", ch, strconv.FormatInt(seq, 10)); err != nil {
			return false
		}
		w.pubsub.acked(w.channel, seq)
		return true
	}
	panic("soak: unknown worker kind " + w.kind)
}

// collection sends one collection command, chosen at random, on the bounded key set.
func (w *worker) collection(ctx context.Context) (any, error) {
	rng := w.rng
	hash := "soak:hash:" + strconv.Itoa(rng.IntN(hashKeys))
	field := "f" + strconv.Itoa(rng.IntN(hashFields))
	set := "soak:set:" + strconv.Itoa(rng.IntN(setKeys))
	member := "m" + strconv.Itoa(rng.IntN(setMembers))
	list := "soak:list:" + strconv.Itoa(rng.IntN(listKeys))
	switch rng.IntN(6) {
	case 0:
		return w.do(ctx, famCollection, "HSET", hash, field, w.name)
	case 1:
		return w.do(ctx, famCollection, "HGET", hash, field)
	case 2:
		return w.do(ctx, famCollection, "SADD", set, member)
	case 3:
		return w.do(ctx, famCollection, "SREM", set, member)
	case 4:
		v, err := w.do(ctx, famCollection, "RPUSH", list, w.name)
		if n, ok := v.(int64); err == nil && ok && n > listMax {
			return w.do(ctx, famCollection, "LTRIM", list, -listMax, -1)
		}
		return v, err
	default:
		return w.do(ctx, famCollection, "LPOP", list)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
