package tests

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/fsm"
)

// lockLoad is clients locking and unlocking a set of keys, one client per node, while a test
// changes the cluster under them: each grant's span is kept by key (checkSpans: no two holders
// at once, tokens per key in real-time order), grants are counted by the phase the test says it
// is in (the cluster served throughout), and an UNLOCK that finds its lock gone is a failure.
type lockLoad struct {
	keys []string
	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	phase    string
	spans    map[string][]heldSpan
	granted  map[string]int
	failures []string
}

// newLockLoad returns a load over keys prefix0 .. prefix15 (over every slot quarter), in phase.
func newLockLoad(prefix, phase string) *lockLoad {
	l := &lockLoad{stop: make(chan struct{}), phase: phase, spans: map[string][]heldSpan{}, granted: map[string]int{}}
	for i := range 16 {
		l.keys = append(l.keys, prefix+strconv.Itoa(i))
	}
	return l
}

// start runs client i on node n until finish. While its node is down its requests fail and it
// tries again; with untilGone it stops once n's process has exited (a node removed for good;
// a node a test restarts is a new process, so a test that restarts nodes leaves it false).
func (l *lockLoad) start(i int, n *node, untilGone bool) {
	l.wg.Go(func() {
		ctx := context.Background()
		name := "client@" + n.id
		cl := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: time.Second})
		defer cl.Close()
		do := func(args ...any) *redis.Cmd { return cl.Do(ctx, args...) }
		for j := 0; j < 200_000; j++ {
			select {
			case <-l.stop:
				return
			default:
			}
			r := lockOnce(do, l.keys[(i*5+j)%len(l.keys)], name)
			if r.lockErr != nil {
				if untilGone && !n.Running() {
					return
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			if !r.held {
				continue
			}
			l.mu.Lock()
			l.spans[r.key] = append(l.spans[r.key], r.span)
			l.granted[l.phase]++
			if r.unlockErr == nil && r.unlocked != 1 {
				l.failures = append(l.failures, fmt.Sprintf("%s UNLOCK %s %d: %d (its lock was lost)", name, r.key, r.span.token, r.unlocked))
			}
			l.mu.Unlock()
		}
	})
}

// setPhase counts the grants from a second from now as phase p's.
func (l *lockLoad) setPhase(p string) {
	time.Sleep(time.Second)
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

// finish stops the clients and checks what they saw: no lock lost, the spans (checkSpans), and
// locks granted in each of phases.
func (l *lockLoad) finish(t *testing.T, phases []string) {
	t.Helper()
	time.Sleep(time.Second)
	close(l.stop)
	l.wg.Wait()
	for _, f := range l.failures {
		t.Error(f)
	}
	checkSpans(t, l.spans)
	t.Logf("locks granted by phase: %v", l.granted)
	for _, p := range phases {
		if l.granted[p] == 0 {
			t.Errorf("no lock granted while %s: the cluster did not serve throughout", p)
		}
	}
}

// heldLocks is a lock held in each of four raft groups' default slot ranges (one group's
// quarter of the slots), through whatever a test does to the cluster.
type heldLocks struct {
	keys   []string // keys[g]: a key of group g's quarter
	tokens []int64
}

// holdOnePerQuarter locks, through cl, a key prefixN of each quarter of the slots for ten
// minutes.
func holdOnePerQuarter(t *testing.T, cl *redis.Client, prefix string) heldLocks {
	t.Helper()
	h := heldLocks{keys: make([]string, 4), tokens: make([]int64, 4)}
	for i := 0; slices.Contains(h.keys, ""); i++ {
		k := prefix + strconv.Itoa(i)
		if q := fsm.GroupOfSlot(fsm.KeySlot([]byte(k)), 4); h.keys[q] == "" {
			h.keys[q] = k
		}
	}
	for q, k := range h.keys {
		tok, err := cl.Do(context.Background(), "LOCK", k, "600000").Int64()
		if err != nil {
			t.Fatalf("LOCK %s: %v", k, err)
		}
		h.tokens[q] = tok
	}
	return h
}

// check checks, through cl, that each lock is still held with a lease left, and releases it by
// its token (UNLOCK answers 1 only to its holder).
func (h heldLocks) check(t *testing.T, cl *redis.Client) {
	t.Helper()
	ctx := context.Background()
	for q, k := range h.keys {
		if ttl, err := cl.PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > 10*time.Minute {
			t.Errorf("the lease of %s (quarter %d), held throughout: %v, %v", k, q, ttl, err)
		}
		if n, err := cl.Do(ctx, "UNLOCK", k, strconv.FormatInt(h.tokens[q], 10)).Int64(); err != nil || n != 1 {
			t.Errorf("UNLOCK of %s (quarter %d), held throughout, with its token %d: %d, %v", k, q, h.tokens[q], n, err)
		}
	}
}
