package tests

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// maxFailover is how soon after the leader dies a survivor must serve writes again: the
// election timeout is 500 ms; the rest is room for the race detector on two cores.
const maxFailover = 5 * time.Second

// TestClusterLeaderKill kills the leader with SIGKILL under a load of LOCK, RENEW and UNLOCK
// from 6 clients going through random nodes, measures how soon the survivors serve writes,
// restarts the killed node, and checks that nothing acknowledged was lost (DESIGN.md §8.3), that
// grants after the failover got tokens above every earlier one, and that all nodes converge.
func TestClusterLeaderKill(t *testing.T) {
	c := newCluster(t, 3)
	old := c.leader()
	load := startLoad(t, "lk", 6, 2, addrs(c.nodes))
	load.waitProgress(300, 20*time.Second)

	killed := time.Now()
	old.kill9()
	took := waitWritable(t, c.live(), "lk-probe")
	t.Logf("leader %s killed: the survivors serve writes after %v", old.id, took.Round(time.Millisecond))
	if took > maxFailover {
		t.Errorf("failover took %v, want at most %v", took, maxFailover)
	}
	nl := c.leader()
	if nl == old {
		t.Fatalf("the killed node %s is still the leader", old.id)
	}
	load.waitProgress(300, 20*time.Second)

	c.restart(old)
	load.waitProgress(200, 20*time.Second)
	r := load.report()
	t.Logf("load: %d acknowledged, %d errors, %d unknown outcomes; new leader %s", r.acked, r.failed, r.unknowns, nl.id)
	if n := r.checkGrantsAfter(t, killed); n == 0 {
		t.Errorf("no new grant after the failover: the token check saw nothing")
	}
	c.checkLoad(r)
	c.digests()
}

// probeTimeout bounds one try of waitWritable: a follower may hold a request forwarded to a
// leader that stopped answering for much longer (its forward timeout).
const probeTimeout = 500 * time.Millisecond

// waitWritable polls the nodes in turn with a LOCK (always by the same owner, so a try that timed
// out but took effect does not block the next) and its UNLOCK on key, until one is granted and
// released, and returns how long that took. Each try is on a fresh connection.
func waitWritable(t *testing.T, nodes []*node, key string) time.Duration {
	t.Helper()
	start := time.Now()
	i := 0
	testutil.WaitFor(t, 20*time.Second, func() error {
		n := nodes[i%len(nodes)]
		i++
		v, err := callWithin(probeTimeout, n.addr, "LOCK", key, "60000", "OWNER", "probe")
		tok, ok := v.(int64)
		if err != nil || !ok {
			return fmt.Errorf("LOCK on %s: %#v, %v", n.id, v, err)
		}
		if v, err := callWithin(probeTimeout, n.addr, "UNLOCK", key, strconv.FormatInt(tok, 10)); err != nil || v != int64(1) {
			return fmt.Errorf("UNLOCK on %s: %#v, %v", n.id, v, err)
		}
		return nil
	})
	return time.Since(start)
}

// TestClusterFollowerRestart kills a follower with SIGKILL under a light load through every
// node, restarts it, and checks that nothing acknowledged was lost and the nodes converge.
func TestClusterFollowerRestart(t *testing.T) {
	c := newCluster(t, 3)
	f := c.followers()[0]
	load := startLoad(t, "fr", 3, 2, addrs(c.nodes))
	load.waitProgress(150, 20*time.Second)
	f.kill9()
	load.waitProgress(150, 20*time.Second)
	f = c.restart(f)
	load.waitProgress(150, 20*time.Second)
	r := load.report()
	t.Logf("load: %d acknowledged, %d errors, %d unknown outcomes", r.acked, r.failed, r.unknowns)
	c.checkLoad(r)
	d := c.digests()
	t.Logf("converged at applied index %d", d.applied)
}

// TestClusterLeaderStop stops the leader with SIGTERM under a light load: it hands leadership
// over before it exits (DESIGN.md §9's shutdown order), so a survivor serves writes without
// waiting for an election timeout; the process exits cleanly, restarts, and nothing
// acknowledged is lost.
func TestClusterLeaderStop(t *testing.T) {
	c := newCluster(t, 3)
	old := c.leader()
	load := startLoad(t, "ls", 3, 2, addrs(c.nodes))
	load.waitProgress(150, 20*time.Second)
	stopped := time.Now()
	if err := old.stop(); err != nil {
		t.Fatalf("SIGTERM the leader %s: %v", old.id, err)
	}
	exited := time.Since(stopped)
	took := waitWritable(t, c.live(), "ls-probe")
	nl := c.leader()
	t.Logf("leader %s stopped with SIGTERM: exited after %v; %s serves writes %v after the exit",
		old.id, exited.Round(time.Millisecond), nl.id, took.Round(time.Millisecond))
	if took > maxFailover {
		t.Errorf("handover took %v after the exit, want at most %v", took, maxFailover)
	}
	// raftnode logs the one or the other when it hands leadership over at shutdown.
	if text := old.Log(); strings.Contains(text, "leadership transfer before shutdown failed") ||
		!strings.Contains(text, "lost leadership") {
		t.Errorf("the stopped leader %s did not hand leadership over before it exited", old.id)
	}
	load.waitProgress(150, 20*time.Second)
	c.restart(old)
	load.waitProgress(100, 20*time.Second)
	r := load.report()
	t.Logf("load: %d acknowledged, %d errors, %d unknown outcomes", r.acked, r.failed, r.unknowns)
	c.checkLoad(r)
	c.digests()
}

// pauseFor is how long TestClusterLeaderPause keeps the leader stopped: several election
// timeouts, so the others elect a new leader and serve writes meanwhile.
const pauseFor = 3 * time.Second

// TestClusterLeaderPause stops the leader with SIGSTOP while clients use the other nodes, and
// checks that when it runs again it neither grants nor answers from its stale view: requests
// queued on a connection to it while it was stopped (READONLY off) are answered as the new
// leader would, or refused with an error while it steps down; then the cluster converges.
func TestClusterLeaderPause(t *testing.T) {
	c := newCluster(t, 3)
	old := c.leader()
	ctx := testContext(t, 60*time.Second)

	// Before the pause: k0 is granted through the leader, and a connection to it is open.
	tok0, err := callInt(old.addr, "LOCK", "pause/k0", "60000", "OWNER", "before")
	if err != nil {
		t.Fatalf("LOCK pause/k0 on the leader: %v", err)
	}
	direct, err := dialRESP(old.addr)
	if err != nil {
		t.Fatalf("dial the leader: %v", err)
	}
	defer direct.Close()
	if r, err := direct.do("PING"); err != nil || string(r) != "+PONG\r\n" {
		t.Fatalf("PING the leader: %q, %v", r, err)
	}

	paused := time.Now()
	old.sigstop()
	took := waitWritable(t, c.live(), "pause-probe")
	nl := c.leader()
	t.Logf("leader %s stopped: %s leads and serves writes after %v", old.id, nl.id, took.Round(time.Millisecond))
	if took > maxFailover {
		t.Errorf("failover took %v, want at most %v", took, maxFailover)
	}
	// Meanwhile, through the others: k0 is released and k1 granted to someone else.
	rdb := newClient(t, c.others(nl)[0].addr, 2)
	if got, err := rdb.Do(ctx, "UNLOCK", "pause/k0", tok0).Int64(); err != nil || got != 1 {
		t.Fatalf("UNLOCK pause/k0 during the pause: %d, %v; want 1", got, err)
	}
	tok1, err := rdb.Do(ctx, "LOCK", "pause/k1", 60000, "OWNER", "during").Int64()
	if err != nil || tok1 <= tok0 {
		t.Fatalf("LOCK pause/k1 during the pause: %d, %v; want a token > %d", tok1, err, tok0)
	}
	load := startLoad(t, "pause", 3, 2, addrs(c.others(old)))
	load.waitProgress(50, 10*time.Second)
	holdFault(t, paused.Add(pauseFor))

	// Queue requests on the stopped leader's connection: it reads them the moment it runs
	// again, while it may still believe it leads.
	queued := []struct {
		args []string
		ok   func(v any) bool
		want string
	}{
		{[]string{"LOCK", "pause/k1", "60000", "OWNER", "stale"}, isNil, "nil (k1 is held by another owner)"},
		{[]string{"GET", "pause/k0"}, isNil, "nil (k0 was released)"},
		{[]string{"VALIDATE", "pause/k0", strconv.FormatInt(tok0, 10)}, isInt(0), "0 (k0 was released)"},
		{[]string{"LOCKINFO", "pause/k1"}, func(v any) bool {
			a, ok := v.([]any)
			return ok && len(a) == 6 && a[1] == "during" && a[3] == tok1
		}, fmt.Sprintf("owner during, token %d", tok1)},
		{[]string{"LOCK", "pause/k0", "60000", "OWNER", "after"}, isAbove(tok1), fmt.Sprintf("a token above %d (k0 is free)", tok1)},
	}
	for _, q := range queued {
		if err := direct.writeRaw(encodeCommand(q.args...)); err != nil {
			t.Fatalf("queue %v: %v", q.args, err)
		}
	}
	old.sigcont()
	afterToken := int64(0) // the last LOCK's token, if it got one
	afterMaybe := false    // the last LOCK got an error: it may have been granted
	for _, q := range queued {
		raw, err := direct.readReply()
		if err != nil {
			t.Fatalf("%v on the resumed leader: %q, %v", q.args, raw, err)
		}
		v, err := parseReply(raw)
		switch {
		case err != nil:
			t.Errorf("%v on the resumed leader: %v", q.args, err)
		case isErrorReply(v):
			t.Logf("%v on the resumed leader: %v (refused while it steps down)", q.args, v)
			afterMaybe = q.args[0] == "LOCK" && q.args[1] == "pause/k0"
		case !q.ok(v):
			t.Errorf("%v on the resumed leader: %#v; want %s or an error: a stale answer", q.args, v, q.want)
		default:
			t.Logf("%v on the resumed leader: %#v", q.args, v)
			if tok, ok := v.(int64); ok && q.args[0] == "LOCK" {
				afterToken = tok
			}
		}
	}

	// Once it has stepped down, the same connection is served through the new leader.
	testutil.WaitFor(t, settleTimeout, func() error {
		info, err := infoRaft(old.addr)
		if err != nil || info["raft_state"] != "Follower" || info["raft_leader_id"] != nl.id {
			return fmt.Errorf("the resumed node: %v, %v; want a follower of %s", info, err, nl.id)
		}
		return nil
	})
	if r, err := direct.do("LOCK", "pause/k1", "60000", "OWNER", "stale"); err != nil || string(r) != "$-1\r\n" {
		t.Errorf("LOCK pause/k1 on the old leader after it stepped down: %q, %v; want nil", r, err)
	}
	raw, err := direct.do("LOCKINFO", "pause/k0")
	if err != nil {
		t.Fatalf("LOCKINFO pause/k0 on the old leader after it stepped down: %v", err)
	}
	v, err := parseReply(raw)
	info, _ := v.([]any)
	granted := len(info) == 6 && info[1] == "after" && (afterToken == 0 || info[3] == afterToken)
	switch {
	case err != nil:
		t.Errorf("LOCKINFO pause/k0 on the old leader after it stepped down: %v", err)
	case afterToken != 0 && !granted:
		t.Errorf("LOCKINFO pause/k0 on the old leader after it stepped down: %#v; want held by after with token %d", v, afterToken)
	case afterToken == 0 && v != nil && !(afterMaybe && granted):
		t.Errorf("LOCKINFO pause/k0 on the old leader after it stepped down: %#v; want nil (or held by after, if its LOCK was uncertain)", v)
	}
	rep := load.report()
	t.Logf("load during the pause: %d acknowledged, %d errors, %d unknown outcomes", rep.acked, rep.failed, rep.unknowns)
	c.checkLoad(rep)
	c.digests()
}

// holdFault keeps a fault in place (a node stopped, say) until the given moment. It does not
// wait for anything to happen: the fault's length is the scenario.
func holdFault(t *testing.T, until time.Time) {
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-t.Context().Done():
	}
}

func isNil(v any) bool { return v == nil }

func isInt(want int64) func(any) bool {
	return func(v any) bool { return v == want }
}

func isAbove(floor int64) func(any) bool {
	return func(v any) bool { i, ok := v.(int64); return ok && i > floor }
}

func isErrorReply(v any) bool { _, ok := v.(*resp.ReplyError); return ok }

// leaseMs is TestClusterLeaseFailover's lease.
const leaseMs = 3000

// TestClusterLeaseFailover checks that a lease survives the leader's death without being reset
// to its full length (DESIGN.md §5): SET k v NX PX 3000 on the leader, SIGKILL it about a
// second later; the new leader reports what is left of the lease, never more than was left by
// its own timer (armed when it applied the grant), never less than the lease from the moment the
// client sent it; and the key ends soon after its lease, not before.
func TestClusterLeaseFailover(t *testing.T) {
	c := newCluster(t, 3)
	old := c.leader()
	ctx := testContext(t, 60*time.Second)
	rdb := newClient(t, old.addr, 3)
	sent := time.Now()
	if ok, err := rdb.SetNX(ctx, "lease/k", "v", leaseMs*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("SET lease/k v NX PX %d: %v, %v", leaseMs, ok, err)
	}
	// Every follower has applied the grant (and armed its timer) by appliedBy.
	for _, f := range c.others(old) {
		ro := newClient(t, f.addr, 2).Conn()
		t.Cleanup(func() { ro.Close() })
		if err := ro.ReadOnly(ctx).Err(); err != nil {
			t.Fatalf("READONLY on %s: %v", f.id, err)
		}
		testutil.WaitFor(t, 5*time.Second, func() error {
			if d, err := ro.Do(ctx, "PTTL", "lease/k").Int64(); err != nil || d <= 0 {
				return fmt.Errorf("PTTL lease/k on %s (READONLY): %d, %v", f.id, d, err)
			}
			return nil
		})
	}
	appliedBy := time.Now()
	// A second of the lease has run by the leader's timer.
	testutil.WaitFor(t, 5*time.Second, func() error {
		if d, err := rdb.Do(ctx, "PTTL", "lease/k").Int64(); err != nil || d > leaseMs-1000 {
			return fmt.Errorf("PTTL lease/k on the leader: %d, %v; waiting for <= %d", d, err, leaseMs-1000)
		}
		return nil
	})
	old.kill9()
	killed := time.Now()
	nl := c.leader()
	t.Logf("leader %s killed %v after the SET; %s leads %v later", old.id, killed.Sub(sent).Round(time.Millisecond),
		nl.id, time.Since(killed).Round(time.Millisecond))

	nrdb := newClient(t, nl.addr, 2)
	asked := time.Now()
	pttl, err := nrdb.Do(ctx, "PTTL", "lease/k").Int64()
	answered := time.Now()
	if err != nil {
		t.Fatalf("PTTL lease/k on the new leader: %v", err)
	}
	// The new leader's timer ends leaseMs after it applied the grant, between sent and
	// appliedBy, and it read the timer between asked and answered.
	hi := leaseMs - asked.Sub(appliedBy).Milliseconds() + 1
	lo := leaseMs - answered.Sub(sent).Milliseconds() - 1
	t.Logf("PTTL on the new leader: %d ms (bounds [%d, %d])", pttl, lo, hi)
	switch {
	case pttl == -2:
		if lo > 0 {
			t.Errorf("the new leader no longer has lease/k, %v after its SET: the lease ended early", asked.Sub(sent))
		}
	case pttl <= 0 || pttl > hi || pttl > leaseMs-1000:
		t.Errorf("PTTL on the new leader: %d, want in (0, %d]: the lease must go on, not start again", pttl, min(hi, leaseMs-1000))
	case pttl < lo:
		t.Errorf("PTTL on the new leader: %d, want >= %d: the lease would end early", pttl, lo)
	}

	// The key ends after its lease (never before) and soon after it (the new leader expires it).
	var goneAt time.Time
	testutil.WaitFor(t, time.Until(sent.Add(leaseMs*time.Millisecond+5*time.Second)), func() error {
		n, err := nrdb.Exists(ctx, "lease/k").Result()
		if err != nil || n != 0 {
			return fmt.Errorf("EXISTS lease/k on the new leader: %d, %v", n, err)
		}
		goneAt = time.Now()
		return nil
	})
	t.Logf("lease/k gone %v after its SET", goneAt.Sub(sent).Round(time.Millisecond))
	if goneAt.Sub(sent) < leaseMs*time.Millisecond {
		t.Errorf("lease/k gone %v after its SET, before its %d ms lease", goneAt.Sub(sent), leaseMs)
	}
	if err := nrdb.Do(ctx, "PTTL", "lease/k").Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Errorf("PTTL after expiry: %v", err)
	}
	c.restart(old)
	c.digests()
}
