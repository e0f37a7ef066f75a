package tests

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// heldSpan is one lock a client held: the token it was granted, from when its LOCK was sent to
// when its reply came (grant), and from then to when it sent its UNLOCK (held for sure).
type heldSpan struct {
	token                         int64
	lockSent, granted, unlockSent time.Time
	client                        string
}

// TestSlotMoveUnderLoad moves a hash slot from one raft group to the other and back while
// clients on every node, plain and cluster-mode, lock and unlock its keys: no request fails,
// no two clients hold a key at once, every key's tokens rise in real-time order across both
// moves, a lock held through the moves keeps its holder, token and lease, and every node's
// replicas of each group end equal.
func TestSlotMoveUnderLoad(t *testing.T) {
	c := newClusterWith(t, 3, &cluster{extra: []string{"--groups", "2"}})
	waitSpread(t, c, 2)
	ctx := context.Background()

	tag := tagOfGroup0()
	slot := fsm.KeySlot([]byte(tag))
	keys := []string{"{" + tag + "}a", "{" + tag + "}b", "{" + tag + "}c"}
	held := "{" + tag + "}held"

	plain := redis.NewClient(&redis.Options{Addr: c.nodes[1].addr})
	defer plain.Close()
	heldToken, err := plain.Do(ctx, "LOCK", held, "60000").Int64()
	if err != nil {
		t.Fatalf("LOCK %s: %v", held, err)
	}

	var mu sync.Mutex
	spans := map[string][]heldSpan{}
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(name string, do func(args ...any) *redis.Cmd) {
		defer wg.Done()
		for i := 0; i < 100_000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			r := lockOnce(do, keys[i%len(keys)], name)
			if !r.held && r.lockErr == nil {
				continue // held by another client
			}
			mu.Lock()
			if r.lockErr != nil {
				failures = append(failures, fmt.Sprintf("%s LOCK %s: %v", name, r.key, r.lockErr))
			} else {
				spans[r.key] = append(spans[r.key], r.span)
				if r.unlockErr != nil || r.unlocked != 1 {
					failures = append(failures, fmt.Sprintf("%s UNLOCK %s %d: %d, %v", name, r.key, r.span.token, r.unlocked, r.unlockErr))
				}
			}
			mu.Unlock()
		}
	}
	for _, n := range c.nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
		defer cl.Close()
		wg.Add(1)
		go run("plain@"+n.id, func(args ...any) *redis.Cmd { return cl.Do(ctx, args...) })
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs(c.nodes), MaxRedirects: 8})
	defer cc.Close()
	wg.Add(1)
	go run("cluster", func(args ...any) *redis.Cmd { return cc.Do(ctx, args...) })

	move := func(target int) {
		t.Helper()
		time.Sleep(time.Second)
		v, err := callWithin(30*time.Second, c.nodes[2].addr, "RAFT", "MOVESLOTS", strconv.Itoa(slot), strconv.Itoa(slot), strconv.Itoa(target))
		if err != nil {
			t.Errorf("RAFT MOVESLOTS %d %d %d: %v", slot, slot, target, err)
			return
		}
		if n, ok := v.(int64); !ok || n < 1 {
			t.Errorf("RAFT MOVESLOTS %d to group %d moved %v keys; want at least the held lock", slot, target, v)
		}
		waitServedBy(t, c.nodes, slot, target, 10*time.Second)
	}
	move(1)
	move(0)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()

	for _, f := range failures {
		t.Error(f)
	}
	checkSpans(t, spans)
	total := 0
	for _, ss := range spans {
		total += len(ss)
	}
	if total < 20 {
		t.Errorf("only %d locks granted during the moves", total)
	}
	t.Logf("%d locks granted and released across two moves of slot %d", total, slot)

	// The lock held through both moves keeps its holder, token and lease.
	if err := plain.Do(ctx, "LOCK", held, "60000").Err(); err != redis.Nil {
		t.Errorf("LOCK of the held key after the moves: %v; want nil (still held)", err)
	}
	if ttl, err := plain.PTTL(ctx, held).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
		t.Errorf("the held lock's TTL after the moves: %v, %v", ttl, err)
	}
	if n, err := plain.Do(ctx, "UNLOCK", held, strconv.FormatInt(heldToken, 10)).Int64(); err != nil || n != 1 {
		t.Errorf("UNLOCK of the held key with its token %d after the moves: %d, %v", heldToken, n, err)
	}
	sameGroupTables(t, c, 2)
}

// lockRound is one LOCK key 5000 and, when granted, the UNLOCK right after it (lockOnce).
type lockRound struct {
	key       string
	held      bool     // granted: span is the time it was held
	span      heldSpan // the grant's token and times
	lockErr   error    // LOCK failed (redis.Nil, another client holding the key, is not one)
	unlockErr error
	unlocked  int64 // UNLOCK's reply: 1 when the lock was still this client's
}

// lockOnce locks key through do and unlocks it at once, timing both for the span checks.
func lockOnce(do func(args ...any) *redis.Cmd, key, client string) lockRound {
	r := lockRound{key: key}
	sent := time.Now()
	tok, err := do("LOCK", key, "5000").Int64()
	granted := time.Now()
	switch {
	case err == redis.Nil:
		return r
	case err != nil:
		r.lockErr = err
		return r
	}
	r.held = true
	r.span = heldSpan{token: tok, lockSent: sent, granted: granted, unlockSent: time.Now(), client: client}
	r.unlocked, r.unlockErr = do("UNLOCK", key, strconv.FormatInt(tok, 10)).Int64()
	return r
}

// tagOfGroup0 is a hash tag whose slot group 0 of a 2-group cluster serves by default.
func tagOfGroup0() string {
	for i := 0; ; i++ {
		if tag := strconv.Itoa(i); fsm.GroupOfSlot(fsm.KeySlot([]byte(tag)), 2) == 0 {
			return tag
		}
	}
}

// waitServedBy waits until every one of nodes routes slot to group g (INFO raft), once its
// replicas applied the move that gave it there.
func waitServedBy(t *testing.T, nodes []*node, slot, g int, within time.Duration) {
	t.Helper()
	testutil.WaitFor(t, within, func() error {
		for _, n := range nodes {
			info, err := infoRaft(n.addr)
			if err != nil {
				return err
			}
			if f := info["raft_group"+strconv.Itoa(g)]; !servesSlot(f, slot) {
				return fmt.Errorf("%s: group %d serves %s, without slot %d", n.id, g, f, slot)
			}
		}
		return nil
	})
}

// servesSlot reports whether an INFO raft raft_groupN line's slots ("slots=a-b;c-d,...")
// include slot.
func servesSlot(line string, slot int) bool {
	for _, f := range strings.Split(line, ",") {
		ranges, ok := strings.CutPrefix(f, "slots=")
		if !ok {
			continue
		}
		for _, r := range strings.Split(ranges, ";") {
			a, b, _ := strings.Cut(r, "-")
			first, err1 := strconv.Atoi(a)
			last, err2 := strconv.Atoi(b)
			if err1 == nil && err2 == nil && first <= slot && slot <= last {
				return true
			}
		}
	}
	return false
}

// TestSlotMoveDecidedByTheNextLeader stops a move on the node that runs it, after its freeze
// (undone by the next leader: the slot stays) or after its import (finished by the next
// leader: the slot moves), and kills that node: the source group's next leader decides the move,
// a request that arrived while the slot was frozen waits and then succeeds, and a lock held
// through it keeps its holder and token.
func TestSlotMoveDecidedByTheNextLeader(t *testing.T) {
	for _, tc := range []struct {
		stop  string
		owner int // the group that serves the slot once the move is decided
	}{{"freeze", 0}, {"import", 1}} {
		t.Run("after-"+tc.stop, func(t *testing.T) {
			c := newClusterWith(t, 3, &cluster{extra: []string{"--groups", "2", "--test-move-stop", tc.stop}})
			leaders := waitSpread(t, c, 2)
			ctx := context.Background()
			var source *node
			for _, n := range c.nodes {
				if n.id == leaders[0] {
					source = n
				}
			}
			others := c.others(source)
			tag := tagOfGroup0()
			slot := strconv.Itoa(fsm.KeySlot([]byte(tag)))
			held, waiting := "{"+tag+"}held", "{"+tag+"}waiting"
			cl := redis.NewClient(&redis.Options{Addr: others[0].addr, MaxRetries: -1, ReadTimeout: 30 * time.Second})
			defer cl.Close()
			token, err := cl.Do(ctx, "LOCK", held, "60000").Int64()
			if err != nil {
				t.Fatalf("LOCK %s: %v", held, err)
			}

			_, err = callWithin(30*time.Second, source.addr, "RAFT", "MOVESLOTS", slot, slot, "1")
			if err == nil || !strings.Contains(err.Error(), "stopped undecided") {
				t.Fatalf("RAFT MOVESLOTS on %s with --test-move-stop %s: %v; want it stopped", source.id, tc.stop, err)
			}
			// The slot is frozen now (after a freeze) or served by nobody yet as far as the
			// source knows (after an import): this LOCK waits for the decision.
			type result struct {
				token int64
				err   error
			}
			done := make(chan result, 1)
			go func() {
				// Its node may forward it to the node about to be killed (the source's
				// leader): it retries, as an owner may (the same owner gets its token back).
				other := redis.NewClient(&redis.Options{Addr: others[1].addr, MaxRetries: 20, ReadTimeout: 30 * time.Second})
				defer other.Close()
				var tok int64
				var err error
				for range 20 {
					if tok, err = other.Do(ctx, "LOCK", waiting, "60000", "OWNER", "w").Int64(); err == nil {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				done <- result{tok, err}
			}()
			source.kill9()
			select {
			case r := <-done:
				if r.err != nil || r.token <= token {
					t.Errorf("LOCK %s during the move: token %d, %v; want a token above %d", waiting, r.token, r.err, token)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("LOCK %s during the move: no reply in 30 s", waiting)
			}
			waitServedBy(t, others, fsm.KeySlot([]byte(tag)), tc.owner, 20*time.Second)
			// Once the clients' nodes route around the killed node: the held lock is still held,
			// by its token.
			testutil.WaitFor(t, 20*time.Second, func() error {
				if err := cl.Do(ctx, "LOCK", held, "60000", "OWNER", "someone-else").Err(); err != redis.Nil {
					return fmt.Errorf("LOCK of the held key after the decided move: %v; want nil (still held)", err)
				}
				return nil
			})
			testutil.WaitFor(t, 20*time.Second, func() error {
				if n, err := cl.Do(ctx, "UNLOCK", held, strconv.FormatInt(token, 10)).Int64(); err != nil || n != 1 {
					return fmt.Errorf("UNLOCK of the held key with its token %d: %d, %v", token, n, err)
				}
				return nil
			})
			c.restart(source)
			sameGroupTables(t, c, 2)
		})
	}
}

// TestSlotMoveKeepsAWaiter moves the slot of a held lock that a LOCK ... WAIT waits on: the
// waiter keeps its place in the target's queue, and once the holder unlocks (in the target) the
// waiting client, held on the node it asked, is granted the lock with a token above the
// holder's.
func TestSlotMoveKeepsAWaiter(t *testing.T) {
	c := newClusterWith(t, 3, &cluster{extra: []string{"--groups", "2"}})
	waitSpread(t, c, 2)
	tag := tagOfGroup0()
	slot := strconv.Itoa(fsm.KeySlot([]byte(tag)))
	key := "{" + tag + "}k"
	holder, err := callInt(c.nodes[0].addr, "LOCK", key, "60000", "OWNER", "holder")
	if err != nil {
		t.Fatalf("LOCK %s: %v", key, err)
	}
	waiting, _ := sendWait(t, c.nodes[1].addr, "LOCK", key, "60000", "OWNER", "waiter", "WAIT", "30000")
	q := waitQueue(t, c.nodes[2].addr, key, "waiter")
	if _, err := callWithin(30*time.Second, c.nodes[2].addr, "RAFT", "MOVESLOTS", slot, slot, "1"); err != nil {
		t.Fatalf("RAFT MOVESLOTS %s %s 1: %v", slot, slot, err)
	}
	waitServedBy(t, c.nodes, fsm.KeySlot([]byte(tag)), 1, 10*time.Second)
	if moved := waitQueue(t, c.nodes[0].addr, key, "waiter"); moved[0].place != q[0].place {
		t.Errorf("the waiter's place after the move: %d, was %d", moved[0].place, q[0].place)
	}
	if n, err := callInt(c.nodes[0].addr, "UNLOCK", key, strconv.FormatInt(holder, 10)); err != nil || n != 1 {
		t.Fatalf("UNLOCK %s %d after the move: %d, %v", key, holder, n, err)
	}
	v := replyWithin(t, waiting, "LOCK ... WAIT across the move")
	if tok, ok := v.(int64); !ok || tok <= holder || tok <= q[0].place {
		t.Errorf("LOCK ... WAIT across the move = %#v; want a token above the holder's %d and the place %d", v, holder, q[0].place)
	}
}
