package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/tests/testutil"
)

// newLockClient returns a client package Client of addrs, closed when the test ends.
func newLockClient(t *testing.T, addrs ...string) *client.Client {
	t.Helper()
	c, err := client.New(client.Options{Addrs: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientCluster runs the client package against one 3-node cluster, its clients on
// followers; the leader is killed last.
func TestClientCluster(t *testing.T) {
	c := newCluster(t, 3)
	t.Run("RenewalKeepsLock", func(t *testing.T) { testClientRenewal(t, c) })
	t.Run("CancelledWaitLeavesNoWaiter", func(t *testing.T) { testClientCancelWait(t, c) })
	t.Run("PausedHolderStopsBeforeNextGrant", func(t *testing.T) { testClientPaused(t, c) })
	t.Run("LeaderKilledMidRenewal", func(t *testing.T) { testClientLeaderKilled(t, c) })
}

// testClientRenewal: a 1 s lease taken through a follower is renewed for 5 s, five leases: the
// leader answers VALIDATE with its token throughout, and the token never changes.
func testClientRenewal(t *testing.T, c *cluster) {
	lc := newLockClient(t, c.followers()[0].addr)
	ctx := testContext(t, 20*time.Second)
	l, err := lc.Lock(ctx, "client/renew", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.leader()
	checks := 0
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if err := l.Err(); err != nil {
			t.Fatalf("lost after %d checks: %v", checks, err)
		}
		v, err := callInt(leader.addr, "VALIDATE", "client/renew", strconv.FormatUint(l.Token(), 10))
		if err != nil || v != 1 {
			t.Fatalf("VALIDATE on the leader after %d checks: %d, %v", checks, v, err)
		}
		checks++
	}
	st, held, err := lockInfo(ctx, newClient(t, leader.addr, 2), "client/renew")
	if err != nil || !held || uint64(st.token) != l.Token() {
		t.Fatalf("LOCKINFO after 5 s: %+v held %v, %v; want token %d", st, held, err, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// testClientCancelWait: a Lock waiting through a follower is in the key's queue until its
// context is cancelled, then in no node's.
func testClientCancelWait(t *testing.T, c *cluster) {
	f := c.followers()[0]
	lc := newLockClient(t, f.addr)
	ctx := testContext(t, 20*time.Second)
	holder, err := lc.Lock(ctx, "client/wait", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := lc.Lock(wctx, "client/wait", time.Second)
		result <- err
	}()
	testutil.WaitFor(t, 5*time.Second, func() error {
		q, err := lockWaitersOf(c.leader().addr, "client/wait")
		if err != nil || len(q) != 1 {
			return fmt.Errorf("LOCKWAITERS: %v, %v; want the one waiter", q, err)
		}
		return nil
	})
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled Lock returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waiting 5 s after its context was cancelled")
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		for _, n := range c.live() {
			q, err := lockWaitersOf(n.addr, "client/wait")
			if err != nil || len(q) != 0 {
				return fmt.Errorf("%s: LOCKWAITERS %v, %v; want none", n.id, q, err)
			}
		}
		return nil
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// testClientLeaderKilled: a client whose node is the leader holds a lock with a 4 s lease
// while the leader is killed. The client moves to a follower; afterwards the handle either
// still holds the lock, and the new leader agrees (VALIDATE with its token), or says it lost
// it: never believes it holds a lock the cluster gave up.
func testClientLeaderKilled(t *testing.T, c *cluster) {
	old := c.leader()
	lc := newLockClient(t, append([]string{old.addr}, addrs(c.followers())...)...)
	ctx := testContext(t, 30*time.Second)
	l, err := lc.Lock(ctx, "client/failover", 4*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // a renewal or so on the old leader first
	old.kill9()
	leader := c.leader()
	// Two leases more: every renewal now goes through a survivor.
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) && l.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	if err := l.Err(); err != nil {
		if !errors.Is(err, client.ErrLockLost) {
			t.Fatalf("the handle ended with %v, want a loss", err)
		}
		t.Logf("the handle reported its lock lost across the failover: %v", err)
		return
	}
	v, err := callInt(leader.addr, "VALIDATE", "client/failover", strconv.FormatUint(l.Token(), 10))
	if err != nil || v != 1 {
		t.Fatalf("the handle holds token %d, the new leader %s answers VALIDATE %d, %v", l.Token(), leader.id, v, err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock through a survivor: %v", err)
	}
}

// pausedChildEnv names the follower a child process of testClientPaused takes its lock
// through; the child is this test binary run again.
const pausedChildEnv = "RAFTLOCK_TEST_CLIENT_CHILD"

// childReport is what the child tells its parent once its handle ended.
type childReport struct {
	Token    uint64 `json:"token"`
	LastHeld int64  `json:"last_held"` // Unix ns of the last look that found the lock held
	DoneAt   int64  `json:"done_at"`   // Unix ns when it found the lock ended
	Err      string `json:"err"`
	Lost     bool   `json:"lost"` // Err matches client.ErrLockLost
	// Saw is the holder's token LOCKINFO showed the child once its handle had ended.
	Saw int64 `json:"saw"`
}

func init() {
	if addr := os.Getenv(pausedChildEnv); addr != "" {
		os.Exit(pausedChild(addr))
	}
}

// pausedChild takes client/paused with a 1 s lease through addr, prints "locked <token>", then
// looks every millisecond whether it still holds the lock, as a holder does before each
// action: the time taken before a look that finds it held is when it last believed itself the
// holder. Once the handle ends it reads LOCKINFO, prints a childReport and exits.
func pausedChild(addr string) int {
	c, err := client.New(client.Options{Addrs: []string{addr}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "client/paused", time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("locked %d\n", l.Token())
	r := childReport{Token: l.Token()}
	for ctx.Err() == nil {
		now := time.Now()
		if err := l.Err(); err != nil {
			r.DoneAt, r.Err, r.Lost = time.Now().UnixNano(), err.Error(), errors.Is(err, client.ErrLockLost)
			select {
			case <-l.Done():
			default:
				r.Err += " (but Done open)"
			}
			break
		}
		r.LastHeld = now.UnixNano()
		time.Sleep(time.Millisecond)
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer rdb.Close()
	if st, held, err := lockInfo(ctx, rdb, "client/paused"); held && err == nil {
		r.Saw = st.token
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return 0
}

// testClientPaused: a holder process paused (SIGSTOP) past its lease, while a second client
// takes the lock, finds its lock ended when it resumes, and never believed itself the holder
// after the second's LOCK was sent.
func testClientPaused(t *testing.T, c *cluster) {
	f := c.followers()[0]
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pausedChildEnv+"="+f.addr)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitOnce sync.Once
	wait := func() { waitOnce.Do(func() { cmd.Wait() }) }
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		wait()
	})
	lines := make(chan string, 2)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var first uint64
	select {
	case line := <-lines:
		if _, err := fmt.Sscanf(line, "locked %d", &first); err != nil {
			t.Fatalf("the child said %q, want locked <token>", line)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the child did not take the lock within 20 s")
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The second client asks until the lease, no longer renewed, has run out.
	rdb := newClient(t, c.leader().addr, 2)
	ctx := testContext(t, 20*time.Second)
	var sent time.Time
	var second int64
	testutil.WaitFor(t, 10*time.Second, func() error {
		sent = time.Now()
		v, err := rdb.Do(ctx, "LOCK", "client/paused", 10000, "OWNER", "second").Int64()
		if err != nil {
			return err
		}
		second = v
		return nil
	})
	if uint64(second) <= first {
		t.Fatalf("the second holder's token %d is not above the first's %d", second, first)
	}
	time.Sleep(200 * time.Millisecond) // the grant applied on every node, the notice sent
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var r childReport
	select {
	case line, ok := <-lines:
		if !ok {
			t.Fatal("the child exited without a report")
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("the child's report %q: %v", line, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report from the child 10 s after it resumed")
	}
	wait()
	if !r.Lost || r.DoneAt == 0 {
		t.Fatalf("the resumed child reports %+v, want its lock lost", r)
	}
	if r.Saw != second {
		t.Fatalf("once its lock ended the child saw holder token %d, want the second's %d", r.Saw, second)
	}
	if last := time.Unix(0, r.LastHeld); !last.Before(sent) {
		t.Fatalf("the child believed it held the lock at %v, %v after the second's LOCK was sent", last, last.Sub(sent))
	}
	t.Logf("the child last believed itself the holder %v before the second's LOCK; ended with %q",
		sent.Sub(time.Unix(0, r.LastHeld)), r.Err)
}

// TestClientNoGoroutineLeak: thousands of Lock and Unlock leave no goroutine behind, and
// neither do waits cancelled, locks lost and a closed Client.
func TestClientNoGoroutineLeak(t *testing.T) {
	n := startNode(t, t.TempDir())
	before := goleak.IgnoreCurrent()
	lc, err := client.New(client.Options{Addrs: []string{n.addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 60*time.Second)
	warm, err := lc.Lock(ctx, "leak/warm", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The subscriber and the pools' connections are running now, and stay while lc lives.
	open := goleak.IgnoreCurrent()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 250 {
				l, err := lc.Lock(ctx, fmt.Sprintf("leak/%d/%d", w, i%10), time.Second)
				if err != nil {
					errs <- err
					return
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Waits cancelled, and locks lost to another connection's release.
	rdb := newClient(t, n.addr, 2)
	for i := range 10 {
		held, err := lc.Lock(ctx, "leak/held", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		if _, err := lc.Lock(wctx, "leak/held", time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d: %v, want DeadlineExceeded", i, err)
		}
		cancel()
		if err := rdb.Do(ctx, "UNLOCK", "leak/held", held.Token()).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed 5 s after another connection released the lock")
		}
	}
	if err := goleak.Find(open); err != nil {
		t.Fatalf("with the client open, after 2000 Lock/Unlock: %v", err)
	}
	lc.Close()
	goleak.VerifyNone(t, before)
}
