package tests

import (
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestGoRedis runs the flows a Go program uses, through go-redis v9 in RESP2 and RESP3.
func TestGoRedis(t *testing.T) {
	n := startNode(t, t.TempDir())
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			p := fmt.Sprintf("p%d/", proto) // each protocol on its own keys
			t.Run("native", func(t *testing.T) { testNativeFlow(t, n, proto, p+"native") })
			t.Run("tokenless", func(t *testing.T) { testTokenless(t, n, proto, p+"tokenless") })
			t.Run("setnx", func(t *testing.T) { testSetNXFlow(t, n, proto, p+"setnx") })
			t.Run("expiry", func(t *testing.T) { testLeaseExpiry(t, n, proto, p+"expiry") })
			t.Run("pipeline", func(t *testing.T) { testPipelinedLocks(t, n, proto, p+"pipe") })
		})
	}
}

// testNativeFlow: LOCK, a contender, LOCKINFO, VALIDATE, RENEW, UNLOCK with the wrong token and
// then the right one, and the next holder's larger token.
func testNativeFlow(t *testing.T, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	a, b := newClient(t, n.addr, proto), newClient(t, n.addr, proto)

	tok, err := a.Do(ctx, "LOCK", key, 10000, "OWNER", "alice").Int64()
	if err != nil || tok <= 0 {
		t.Fatalf("LOCK: %d, %v; want a positive token", tok, err)
	}
	if got, err := b.Do(ctx, "LOCK", key, 10000, "OWNER", "bob").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("LOCK by a contender: %v, %v; want nil", got, err)
	}
	if got, err := b.Do(ctx, "LOCK", key, 10000).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("LOCK without OWNER by a contender: %v, %v; want nil", got, err)
	}
	// The same owner again: the same token, a renewed lease.
	if got, err := a.Do(ctx, "LOCK", key, 20000, "OWNER", "alice").Int64(); err != nil || got != tok {
		t.Fatalf("LOCK again by its owner: %d, %v; want %d", got, err, tok)
	}
	st, held, err := lockInfo(ctx, b, key)
	if err != nil || !held {
		t.Fatalf("LOCKINFO: held=%v, %v", held, err)
	}
	if st.owner != "alice" || st.token != tok || st.pttl <= 10000 || st.pttl > 20000 {
		t.Errorf("LOCKINFO: %+v; want owner alice, token %d, pttl in (10000, 20000]", st, tok)
	}
	if got, err := b.Get(ctx, key).Result(); err != nil || got != "alice" {
		t.Errorf("GET: %q, %v; want alice", got, err)
	}
	for _, c := range []struct {
		token int64
		want  int64
	}{{tok, 1}, {tok + 1, 0}, {tok - 1, 0}} {
		if got, err := b.Do(ctx, "VALIDATE", key, c.token).Int64(); err != nil || got != c.want {
			t.Errorf("VALIDATE %d: %d, %v; want %d", c.token, got, err, c.want)
		}
	}
	if got, err := b.Do(ctx, "RENEW", key, tok+1, 30000).Int64(); err != nil || got != 0 {
		t.Errorf("RENEW with a wrong token: %d, %v; want 0", got, err)
	}
	if got, err := b.Do(ctx, "RENEW", key, tok, 30000).Int64(); err != nil || got != 1 {
		t.Errorf("RENEW with the token from another connection: %d, %v; want 1", got, err)
	}
	if got, err := a.PTTL(ctx, key).Result(); err != nil || got <= 20*time.Second || got > 30*time.Second {
		t.Errorf("PTTL after RENEW 30000: %v, %v; want in (20s, 30s]", got, err)
	}
	if got, err := b.Do(ctx, "UNLOCK", key, tok+1).Int64(); err != nil || got != 0 {
		t.Errorf("UNLOCK with a wrong token: %d, %v; want 0", got, err)
	}
	if got, err := b.Do(ctx, "UNLOCK", key, tok).Int64(); err != nil || got != 1 {
		t.Errorf("UNLOCK with the token: %d, %v; want 1", got, err)
	}
	if got, err := a.Do(ctx, "UNLOCK", key, tok).Int64(); err != nil || got != 0 {
		t.Errorf("UNLOCK again: %d, %v; want 0", got, err)
	}
	if _, held, err := lockInfo(ctx, a, key); err != nil || held {
		t.Errorf("LOCKINFO after UNLOCK: held=%v, %v; want nil", held, err)
	}
	if got, err := a.Do(ctx, "VALIDATE", key, tok).Int64(); err != nil || got != 0 {
		t.Errorf("VALIDATE after UNLOCK: %d, %v; want 0", got, err)
	}
	if got, err := a.Do(ctx, "RENEW", key, tok, 1000).Int64(); err != nil || got != 0 {
		t.Errorf("RENEW after UNLOCK: %d, %v; want 0", got, err)
	}
	next, err := b.Do(ctx, "LOCK", key, 10000, "OWNER", "bob").Int64()
	if err != nil || next <= tok {
		t.Errorf("LOCK by the next holder: %d, %v; want a token > %d", next, err, tok)
	}
	if _, err := b.Do(ctx, "UNLOCK", key, next).Int64(); err != nil {
		t.Errorf("UNLOCK: %v", err)
	}
	// Bad arguments get errors, not crashes.
	for _, args := range [][]any{
		{"LOCK", key, 0}, {"LOCK", key, "x"}, {"LOCK", key, 100, "OWNER"}, {"LOCK", key, 100, "BOGUS", "x"},
		{"UNLOCK", key, 0}, {"UNLOCK", key, "abc"}, {"VALIDATE", key, -1}, {"RENEW", key, 1, 0},
	} {
		if err := a.Do(ctx, args...).Err(); err == nil || errors.Is(err, redis.Nil) || !strings.HasPrefix(err.Error(), "ERR ") {
			t.Errorf("%v: %v; want an ERR reply", args, err)
		}
	}
}

// testTokenless: UNLOCK and RENEW without a token work on the connection that acquired the lock,
// and on no other.
func testTokenless(t *testing.T, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	rdb := newClient(t, n.addr, proto)
	mine, other := rdb.Conn(), rdb.Conn()
	t.Cleanup(func() { mine.Close(); other.Close() })

	tok, err := mine.Do(ctx, "LOCK", key, 5000).Int64()
	if err != nil {
		t.Fatalf("LOCK: %v", err)
	}
	if got, err := mine.Do(ctx, "RENEW", key, 15000).Int64(); err != nil || got != 1 {
		t.Errorf("RENEW without a token on the acquiring connection: %d, %v; want 1", got, err)
	}
	if st, _, err := lockInfo(ctx, other, key); err != nil || st.token != tok || st.pttl <= 5000 {
		t.Errorf("LOCKINFO after RENEW: %+v, %v; want token %d, pttl > 5000", st, err, tok)
	}
	err = other.Do(ctx, "UNLOCK", key).Err()
	if err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("UNLOCK without a token on another connection: %v; want an error asking for the token", err)
	}
	if err := other.Do(ctx, "RENEW", key, 1000).Err(); err == nil {
		t.Errorf("RENEW without a token on another connection: no error")
	}
	if got, err := mine.Do(ctx, "UNLOCK", key).Int64(); err != nil || got != 1 {
		t.Errorf("UNLOCK without a token on the acquiring connection: %d, %v; want 1", got, err)
	}
	if got, err := mine.Exists(ctx, key).Result(); err != nil || got != 0 {
		t.Errorf("EXISTS after UNLOCK: %d, %v; want 0", got, err)
	}
}

// testSetNXFlow is the Redlock-style lock: SET key value NX PX, GET to check, compare-and-DEL.
func testSetNXFlow(t *testing.T, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	a, b := newClient(t, n.addr, proto), newClient(t, n.addr, proto)

	if ok, err := a.SetNX(ctx, key, "value-a", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX PX: %v, %v; want OK", ok, err)
	}
	if ok, err := b.SetNX(ctx, key, "value-b", 10*time.Second).Result(); err != nil || ok {
		t.Fatalf("SET NX PX by a contender: %v, %v; want nil", ok, err)
	}
	if got, err := b.SetArgs(ctx, key, "value-b", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second, Get: true}).Result(); err != nil || got != "value-a" {
		t.Errorf("SET NX PX GET by a contender: %q, %v; want value-a", got, err)
	}
	if got, err := b.Get(ctx, key).Result(); err != nil || got != "value-a" {
		t.Errorf("GET: %q, %v; want value-a", got, err)
	}
	if d, err := b.PTTL(ctx, key).Result(); err != nil || d <= 0 || d > 10*time.Second {
		t.Errorf("PTTL: %v, %v; want in (0, 10s]", d, err)
	}
	st, held, err := lockInfo(ctx, b, key)
	if err != nil || !held || st.owner != "value-a" || st.token <= 0 {
		t.Errorf("LOCKINFO of a SET NX lock: %+v held=%v, %v", st, held, err)
	}
	// The contender's compare-and-delete finds someone else's value and leaves it alone.
	if got, _ := b.Get(ctx, key).Result(); got == "value-b" {
		b.Del(ctx, key)
	}
	if got, err := a.Exists(ctx, key).Result(); err != nil || got != 1 {
		t.Fatalf("EXISTS: %d, %v; want 1", got, err)
	}
	// The holder's finds its own and deletes it.
	if got, err := a.Get(ctx, key).Result(); err != nil || got != "value-a" {
		t.Fatalf("GET by the holder: %q, %v", got, err)
	}
	if got, err := a.Del(ctx, key).Result(); err != nil || got != 1 {
		t.Errorf("DEL by the holder: %d, %v; want 1", got, err)
	}
	if got, err := a.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after DEL: %q, %v; want nil", got, err)
	}
	if ok, err := b.SetNX(ctx, key, "value-b", 10*time.Second).Result(); err != nil || !ok {
		t.Errorf("SET NX PX after release: %v, %v; want OK", ok, err)
	}
	st2, _, err := lockInfo(ctx, b, key)
	if err != nil || st2.token <= st.token {
		t.Errorf("the next holder's token: %+v, %v; want > %d", st2, err, st.token)
	}
	if got, err := b.Del(ctx, key).Result(); err != nil || got != 1 {
		t.Errorf("DEL: %d, %v", got, err)
	}
}

// testLeaseExpiry: a lease of 200 ms that nobody renews ends within 3 s.
func testLeaseExpiry(t *testing.T, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	rdb := newClient(t, n.addr, proto)
	if ok, err := rdb.SetNX(ctx, key+"/set", "v", 200*time.Millisecond).Result(); err != nil || !ok {
		t.Fatalf("SET NX PX 200: %v, %v", ok, err)
	}
	sent := time.Now()
	tok, err := rdb.Do(ctx, "LOCK", key+"/lock", 200).Int64()
	if err != nil {
		t.Fatalf("LOCK 200: %v", err)
	}
	testutil.WaitFor(t, 3*time.Second, func() error {
		if n, err := rdb.Exists(ctx, key+"/set", key+"/lock").Result(); err != nil || n != 0 {
			return fmt.Errorf("EXISTS: %d, %v", n, err)
		}
		return nil
	})
	// The lease starts when the grant applies, after the request was sent: never early.
	if d := time.Since(sent); d < 200*time.Millisecond {
		t.Errorf("a lease of 200 ms ended %v after its LOCK was sent", d)
	}
	for _, k := range []string{key + "/set", key + "/lock"} {
		if d, err := rdb.PTTL(ctx, k).Result(); err != nil || d != -2*time.Nanosecond && d != -2*time.Millisecond {
			t.Errorf("PTTL %s after expiry: %v, %v; want -2", k, d, err)
		}
	}
	if got, err := rdb.Do(ctx, "VALIDATE", key+"/lock", tok).Int64(); err != nil || got != 0 {
		t.Errorf("VALIDATE after expiry: %d, %v; want 0", got, err)
	}
	next, err := rdb.Do(ctx, "LOCK", key+"/lock", 10000).Int64()
	if err != nil || next <= tok {
		t.Errorf("LOCK after expiry: %d, %v; want > %d", next, err, tok)
	}
}

// testPipelinedLocks sends 100 LOCKs in one pipeline: 100 grants, tokens increasing in order.
func testPipelinedLocks(t *testing.T, n *node, proto int, key string) {
	ctx := testContext(t, 20*time.Second)
	rdb := newClient(t, n.addr, proto)
	pipe := rdb.Pipeline()
	cmds := make([]*redis.Cmd, 100)
	for i := range cmds {
		cmds[i] = pipe.Do(ctx, "LOCK", fmt.Sprintf("%s/%d", key, i), 10000)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	prev := int64(0)
	for i, c := range cmds {
		tok, err := c.Int64()
		if err != nil {
			t.Fatalf("LOCK %d: %v", i, err)
		}
		if tok <= prev {
			t.Errorf("LOCK %d: token %d, want > %d (the previous one)", i, tok, prev)
		}
		prev = tok
	}
	if got, err := rdb.DBSize(ctx).Result(); err != nil || got < 100 {
		t.Errorf("DBSIZE: %d, %v; want >= 100", got, err)
	}
}

// redisCLI runs redis-cli with args against addr, stdin from stdin, and returns its stdout.
func redisCLI(t *testing.T, addr, stdin string, args ...string) string {
	t.Helper()
	host, port, _ := strings.Cut(addr, ":")
	cmd := exec.CommandContext(testContext(t, 10*time.Second), "redis-cli", append([]string{"-h", host, "-p", port}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// TestRedisCLI runs the README's redis-cli session. redis-cli writing to a pipe prints an integer
// as its digits, nil as an empty line, and a RESP3 map as "key value" lines.
func TestRedisCLI(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not installed: %v", err)
	}
	n := startNode(t, t.TempDir())

	out := redisCLI(t, n.addr, "", "LOCK", "job", "10000")
	tok, err := strconv.ParseInt(strings.TrimSuffix(out, "\n"), 10, 64)
	if err != nil || tok <= 0 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("LOCK job 10000: %q; want a token and a newline", out)
	}
	if out := redisCLI(t, n.addr, "", "LOCK", "job", "10000"); out != "\n" {
		t.Errorf("second LOCK job 10000: %q; want %q (nil)", out, "\n")
	}
	out = redisCLI(t, n.addr, "", "-3", "LOCKINFO", "job")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "owner ") || lines[1] != "token "+strconv.FormatInt(tok, 10) {
		t.Fatalf("-3 LOCKINFO job: %q; want owner, token %d and pttl lines", out, tok)
	}
	pttl, err := strconv.ParseInt(strings.TrimPrefix(lines[2], "pttl "), 10, 64)
	if err != nil || !strings.HasPrefix(lines[2], "pttl ") || pttl <= 0 || pttl > 10000 {
		t.Errorf("-3 LOCKINFO job: pttl line %q; want 0 < pttl <= 10000", lines[2])
	}
	out = redisCLI(t, n.addr, "", "LOCKINFO", "job")
	if l := strings.Split(out, "\n"); len(l) != 7 || l[0] != "owner" || l[2] != "token" || l[3] != strconv.FormatInt(tok, 10) || l[4] != "pttl" {
		t.Errorf("LOCKINFO job (RESP2): %q; want owner, token and pttl as a flat array", out)
	}
	if out := redisCLI(t, n.addr, "", "UNLOCK", "job", strconv.FormatInt(tok+1, 10)); out != "0\n" {
		t.Errorf("UNLOCK job %d: %q; want 0", tok+1, out)
	}
	if out := redisCLI(t, n.addr, "", "UNLOCK", "job", strconv.FormatInt(tok, 10)); out != "1\n" {
		t.Errorf("UNLOCK job %d: %q; want 1", tok, out)
	}
	if out := redisCLI(t, n.addr, "", "-3", "LOCKINFO", "job"); out != "\n" {
		t.Errorf("-3 LOCKINFO job after UNLOCK: %q; want %q (nil)", out, "\n")
	}

	// A session through stdin is one connection: UNLOCK without a token releases its own lock.
	out = redisCLI(t, n.addr, "LOCK x 5000\nUNLOCK x\n")
	lines = strings.Split(out, "\n")
	if len(lines) != 3 || lines[1] != "1" || lines[2] != "" {
		t.Errorf("stdin session LOCK x 5000, UNLOCK x: %q; want a token, then 1", out)
	} else if xt, err := strconv.ParseInt(lines[0], 10, 64); err != nil || xt <= tok {
		t.Errorf("stdin session LOCK x 5000: %q; want a token > %d", lines[0], tok)
	}
	// A token-less UNLOCK on a connection that does not hold the lock is told to send the token.
	redisCLI(t, n.addr, "", "LOCK", "y", "5000")
	if out := redisCLI(t, n.addr, "", "UNLOCK", "y"); !strings.Contains(out, "ERR") || !strings.Contains(out, "token") {
		t.Errorf("UNLOCK y from another connection: %q; want an error asking for the token", out)
	}
	if out := redisCLI(t, n.addr, "", "EXISTS", "x", "y"); out != "1\n" {
		t.Errorf("EXISTS x y: %q; want 1", out)
	}
}
