package tests

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// blockWait bounds every wait of the blocking-pop tests.
const blockWait = 10 * time.Second

// blockedClients is INFO's blocked_clients of the server at addr (raftlock or redis-server).
func blockedClients(ctx context.Context, rdb *redis.Client) (int, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no blocked_clients in %q", info)
}

// waitBlocked polls until want clients of rdb's server are blocked (within blockWait).
func waitBlocked(t *testing.T, rdb *redis.Client, want int) {
	t.Helper()
	ctx := testContext(t, blockWait)
	for {
		n, err := blockedClients(ctx, rdb)
		if err == nil && n == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("blocked_clients: %d, %v; want %d", n, err, want)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// popResult is what a BLPOP in the background got.
type popResult struct {
	got []string
	err error
}

// blpopAsync runs BLPOP keys... timeout on its own connection of rdb and delivers the result.
func blpopAsync(ctx context.Context, rdb *redis.Client, timeout time.Duration, keys ...string) <-chan popResult {
	out := make(chan popResult, 1)
	go func() {
		got, err := rdb.BLPop(ctx, timeout, keys...).Result()
		out <- popResult{got, err}
	}()
	return out
}

// receive waits for a background pop's result (within blockWait).
func receive(t *testing.T, ch <-chan popResult) popResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(blockWait):
		t.Fatal("the blocked pop did not return")
		return popResult{}
	}
}

// blockingClient is a go-redis client whose reads outlast a blocking pop's timeout (go-redis
// adds the command's timeout to ReadTimeout itself; a long one covers timeout 0).
func blockingClient(t *testing.T, addr string, proto int) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, DialTimeout: 2 * time.Second,
		ReadTimeout: 2 * blockWait, WriteTimeout: 5 * time.Second})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestBlockingPop checks BLPOP's waits on one node, in RESP2 and RESP3: a push from another
// connection wakes a waiter with its element; two waiters and two pushes give each exactly one
// element; a waiter that hangs up takes nothing from a later push.
func TestBlockingPop(t *testing.T) {
	n := startNode(t, t.TempDir())
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := testContext(t, 3*blockWait)
			rdb := blockingClient(t, n.addr, proto)
			other := newClient(t, n.addr, proto)
			key := fmt.Sprintf("bl/%d/", proto)

			t.Run("WokenByPush", func(t *testing.T) {
				res := blpopAsync(ctx, rdb, blockWait, key+"none", key+"a")
				waitBlocked(t, other, 1)
				if err := other.RPush(ctx, key+"a", "x").Err(); err != nil {
					t.Fatal(err)
				}
				if r := receive(t, res); r.err != nil || !slices.Equal(r.got, []string{key + "a", "x"}) {
					t.Fatalf("BLPOP: %q, %v; want [%sa x]", r.got, r.err, key)
				}
			})

			t.Run("TwoWaitersTwoPushes", func(t *testing.T) {
				k := key + "two"
				first := blpopAsync(ctx, rdb, blockWait, k)
				second := blpopAsync(ctx, rdb, blockWait, k)
				waitBlocked(t, other, 2)
				for _, e := range []string{"e1", "e2"} {
					if err := other.RPush(ctx, k, e).Err(); err != nil {
						t.Fatal(err)
					}
				}
				var got []string
				for _, ch := range []<-chan popResult{first, second} {
					r := receive(t, ch)
					if r.err != nil || len(r.got) != 2 || r.got[0] != k {
						t.Fatalf("BLPOP: %q, %v; want [%s <element>]", r.got, r.err, k)
					}
					got = append(got, r.got[1])
				}
				slices.Sort(got)
				if !slices.Equal(got, []string{"e1", "e2"}) {
					t.Errorf("the waiters got %q; want e1 and e2, one each", got)
				}
				if n, err := other.Exists(ctx, k).Result(); err != nil || n != 0 {
					t.Errorf("EXISTS after both pops: %d, %v; want 0", n, err)
				}
			})

			t.Run("DisconnectedWaiter", func(t *testing.T) {
				k := key + "gone"
				c, err := dialRESP(n.addr)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.writeRaw(encodeCommand("BLPOP", k, "0")); err != nil {
					t.Fatal(err)
				}
				waitBlocked(t, other, 1)
				c.Close()
				waitBlocked(t, other, 0)
				if err := other.RPush(ctx, k, "kept").Err(); err != nil {
					t.Fatal(err)
				}
				if got, err := other.LRange(ctx, k, 0, -1).Result(); err != nil || !slices.Equal(got, []string{"kept"}) {
					t.Errorf("LRANGE after the waiter left: %q, %v; want [kept]", got, err)
				}
				other.Del(ctx, k)
			})

			t.Run("Timeout", func(t *testing.T) {
				start := time.Now()
				got, err := rdb.Do(ctx, "BLPOP", key+"empty", "0.1").Result()
				if !errors.Is(err, redis.Nil) {
					t.Fatalf("BLPOP on an empty key: %q, %v; want nil", got, err)
				}
				if d := time.Since(start); d < 100*time.Millisecond || d > blockWait {
					t.Errorf("BLPOP with timeout 0.1 returned after %v", d)
				}
			})
		})
	}
}

// TestBlockingPopFollower checks that a BLPOP sent to a follower waits there and is woken by an
// LPUSH sent to another node, in RESP2 and RESP3: the pop is the leader's, the wait the
// follower's.
func TestBlockingPopFollower(t *testing.T) {
	c := newCluster(t, 3)
	fs := c.followers()
	f, pusher := fs[0], c.others(fs[0])[0]
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := testContext(t, 3*blockWait)
			k := fmt.Sprintf("blf/%d", proto)
			waiter := blockingClient(t, f.addr, proto)
			onF := newClient(t, f.addr, proto)
			res := blpopAsync(ctx, waiter, blockWait, k)
			waitBlocked(t, onF, 1)
			if err := newClient(t, pusher.addr, proto).LPush(ctx, k, "v").Err(); err != nil {
				t.Fatal(err)
			}
			if r := receive(t, res); r.err != nil || !slices.Equal(r.got, []string{k, "v"}) {
				t.Fatalf("BLPOP on the follower: %q, %v; want [%s v]", r.got, r.err, k)
			}
			if n, err := onF.Exists(ctx, k).Result(); err != nil || n != 0 {
				t.Errorf("EXISTS after the pop: %d, %v; want 0", n, err)
			}
			// Clients blocked on the follower are served in the order they blocked.
			var results []<-chan popResult
			for i := range 3 {
				results = append(results, blpopAsync(ctx, blockingClient(t, f.addr, proto), blockWait, k))
				waitBlocked(t, onF, i+1)
			}
			if err := newClient(t, pusher.addr, proto).RPush(ctx, k, "e0", "e1", "e2").Err(); err != nil {
				t.Fatal(err)
			}
			for i, res := range results {
				if r := receive(t, res); r.err != nil || !slices.Equal(r.got, []string{k, fmt.Sprintf("e%d", i)}) {
					t.Errorf("BLPOP of client %d (in the order they blocked) on the follower: %q, %v; want [%s e%d]", i, r.got, r.err, k, i)
				}
			}
		})
	}
}

// TestPythonRedisLockSignal runs python-redis-lock's release and wait over RESP against
// redis-server and raftlock: a waiter BLPOPs the signal key with a timeout while the lock is
// held; the release script (DEL signal; LPUSH signal 1; PEXPIRE signal N; DEL lock, as one
// EVAL) wakes it, and the lock is free for it to take.
func TestPythonRedisLockSignal(t *testing.T) {
	const release = `
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
else
    redis.call("del", KEYS[2])
    redis.call("lpush", KEYS[2], 1)
    redis.call("pexpire", KEYS[2], ARGV[2])
    redis.call("del", KEYS[1])
    return 0
end`
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	for _, srv := range []struct{ name, addr string }{{"redis-server", rs.addr}, {"raftlock", n.addr}} {
		t.Run(srv.name, func(t *testing.T) {
			ctx := testContext(t, 3*blockWait)
			holder := newClient(t, srv.addr, 2)
			waiter := blockingClient(t, srv.addr, 2)
			lock, signal := "lock:job", "lock-signal:job"
			holder.Del(ctx, lock, signal)
			if ok, err := holder.SetNX(ctx, lock, "id-1", 10*time.Second).Result(); err != nil || !ok {
				t.Fatalf("SET NX by the holder: %v, %v", ok, err)
			}
			// The waiter's acquire fails, so it waits on the signal.
			if ok, err := waiter.SetNX(ctx, lock, "id-2", 10*time.Second).Result(); err != nil || ok {
				t.Fatalf("SET NX by the waiter while held: %v, %v; want false", ok, err)
			}
			res := blpopAsync(ctx, waiter, blockWait, signal)
			waitBlocked(t, holder, 1)
			if got, err := holder.Eval(ctx, release, []string{lock, signal}, "id-1", 1000).Int64(); err != nil || got != 0 {
				t.Fatalf("release: %d, %v; want 0", got, err)
			}
			if r := receive(t, res); r.err != nil || !slices.Equal(r.got, []string{signal, "1"}) {
				t.Fatalf("BLPOP of the signal: %q, %v; want [%s 1]", r.got, r.err, signal)
			}
			if ok, err := waiter.SetNX(ctx, lock, "id-2", 10*time.Second).Result(); err != nil || !ok {
				t.Errorf("SET NX by the woken waiter: %v, %v; want true", ok, err)
			}
			// A second release leaves a signal that expires: a late waiter pops it at once.
			if got, err := waiter.Eval(ctx, release, []string{lock, signal}, "id-2", 1000).Int64(); err != nil || got != 0 {
				t.Fatalf("second release: %d, %v; want 0", got, err)
			}
			if pttl, err := holder.PTTL(ctx, signal).Result(); err != nil || pttl <= 0 || pttl > time.Second {
				t.Errorf("PTTL of the signal: %v, %v; want up to 1s", pttl, err)
			}
			if got, err := holder.BLPop(ctx, time.Second, signal).Result(); err != nil || !slices.Equal(got, []string{signal, "1"}) {
				t.Errorf("BLPOP of a waiting signal: %q, %v", got, err)
			}
			holder.Del(ctx, lock, signal)
		})
	}
}

// TestRedisCompatBlockingPopOrder: clients blocked on a key are served first come, first served,
// as in Redis: the one that blocked first gets the first element pushed, whether the elements
// come in one push or one at a time, for BLPOP and BRPOP, and for a client blocked on several
// keys. The same steps run on redis-server and on raftlock (one node); what each client got
// must be the same.
func TestRedisCompatBlockingPopOrder(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	type step struct {
		block []string // a new client sends this blocking command, and is blocked before the next step
		push  []string // the writer sends this, and the clients it serves have their replies
	}
	scenarios := []struct {
		name  string
		steps []step
	}{
		{"one push", []step{
			{block: []string{"BLPOP", "q1", "0"}}, {block: []string{"BLPOP", "q1", "0"}},
			{block: []string{"BLPOP", "q1", "0"}}, {block: []string{"BLPOP", "q1", "0"}},
			{push: []string{"RPUSH", "q1", "a", "b", "c", "d"}},
		}},
		{"one at a time", []step{
			{block: []string{"BLPOP", "q2", "0"}}, {block: []string{"BLPOP", "q2", "0"}}, {block: []string{"BLPOP", "q2", "0"}},
			{push: []string{"RPUSH", "q2", "x"}}, {push: []string{"LPUSH", "q2", "y"}}, {push: []string{"RPUSH", "q2", "z"}},
		}},
		{"more elements than clients", []step{
			{block: []string{"BLPOP", "q3", "0"}}, {block: []string{"BLPOP", "q3", "0"}},
			{push: []string{"RPUSH", "q3", "a", "b", "c"}}, {push: []string{"LRANGE", "q3", "0", "-1"}},
		}},
		{"BRPOP", []step{
			{block: []string{"BRPOP", "q4", "0"}}, {block: []string{"BRPOP", "q4", "0"}},
			{push: []string{"RPUSH", "q4", "a", "b"}},
		}},
		{"several keys", []step{
			{block: []string{"BLPOP", "m1", "m2", "0"}}, {block: []string{"BLPOP", "m2", "0"}}, {block: []string{"BLPOP", "m1", "0"}},
			{push: []string{"RPUSH", "m2", "x"}}, {push: []string{"RPUSH", "m1", "y"}}, {push: []string{"RPUSH", "m2", "z"}},
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var got [2][]string
			for i, addr := range []string{rs.addr, n.addr} {
				ctx := testContext(t, 3*blockWait)
				writer := newClient(t, addr, 2)
				var clients []*respConn
				blocked := 0
				for _, s := range sc.steps {
					if s.block != nil {
						c := mustDial(t, addr)
						c.timeout = blockWait
						if err := c.writeRaw(encodeCommand(s.block...)); err != nil {
							t.Fatal(err)
						}
						clients = append(clients, c)
						blocked++
						waitBlocked(t, writer, blocked)
						continue
					}
					r, err := writer.Do(ctx, anySlice(s.push)...).Result()
					got[i] = append(got[i], fmt.Sprintf("%q -> %v, %v", s.push, r, err))
					if s.push[0] == "LRANGE" {
						continue
					}
					// Each push serves as many clients as it pushed elements, at most those blocked.
					blocked = max(0, blocked-(len(s.push)-2))
					waitBlocked(t, writer, blocked)
				}
				for j, c := range clients {
					r, err := c.readReply()
					got[i] = append(got[i], fmt.Sprintf("client %d (%q): %q, %v", j, sc.steps[j].block, r, err))
				}
				for _, k := range []string{"q1", "q2", "q3", "q4", "m1", "m2"} {
					writer.Del(ctx, k)
				}
			}
			if diff := strings.Join(diffLines(got[0], got[1]), "\n"); diff != "" {
				t.Errorf("replies differ (redis-server, then raftlock):\n%s", diff)
			}
		})
	}
}

func anySlice(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}
