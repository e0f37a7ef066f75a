package clients

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/tests/clients/internal/proxy"
)

// The environment says which servers to test:
//
//	RAFTLOCK_ADDRS          host:port,... : the first is the node every library dials; a second
//	                        client (the contender, the next owner) dials the second, if any.
//	                        Unset: every test skips.
//	RAFTLOCK_CLUSTER_ADDRS  the same for cluster-mode clients (default RAFTLOCK_ADDRS; "-" skips
//	                        them). Against Redis this is a cluster-enabled redis-server.
//	RAFTLOCK_MATRIX         a file to which each scenario appends "library<TAB>scenario<TAB>
//	                        pass|fail|skip<TAB>detail" (run.sh prints the matrix from it).
//	RAFTLOCK_TRACE          1: log every command and reply the libraries exchange, to stderr.
//	RAFTLOCK_DB             the database every plain client SELECTs (default 0; run.sh runs the
//	                        suite again in database 9, its libraries named "...@db9"). Cluster-mode
//	                        clients have database 0 only: they skip in any other.
func addrsFromEnv(t *testing.T, name string) []string {
	t.Helper()
	v := os.Getenv(name)
	if name == "RAFTLOCK_CLUSTER_ADDRS" && v == "" {
		v = os.Getenv("RAFTLOCK_ADDRS")
	}
	if v == "" || v == "-" {
		t.Skipf("%s is not set: no server to test", name)
	}
	return strings.Split(v, ",")
}

// target is where one library's clients go.
type target struct {
	first, second string // the first client's node and the second's
}

func plainTarget(t *testing.T) target { return targetOf(t, "RAFTLOCK_ADDRS") }

func clusterTarget(t *testing.T) target {
	if testDB() != 0 {
		t.Skip("cluster-mode clients use database 0 only")
	}
	return targetOf(t, "RAFTLOCK_CLUSTER_ADDRS")
}

// testDB is the database the plain clients select (RAFTLOCK_DB).
func testDB() int {
	n, _ := strconv.Atoi(os.Getenv("RAFTLOCK_DB"))
	return n
}

func targetOf(t *testing.T, env string) target {
	a := addrsFromEnv(t, env)
	tg := target{first: a[0], second: a[0]}
	if len(a) > 1 {
		tg.second = a[1]
	}
	return tg
}

// dial is the clients' dial function: plain TCP, or with RAFTLOCK_TRACE set, a connection that
// logs every command and reply (cluster-mode clients dial the addresses the server reports, so a
// proxy in front of the seed address would not see their traffic; a dialer does). via, when not
// empty, replaces every address the client dials (a proxy that can freeze the client).
func dial(t *testing.T, via string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	trace := os.Getenv("RAFTLOCK_TRACE") != ""
	if !trace && via == "" {
		return nil
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if via != "" {
			addr = via
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil || !trace {
			return c, err
		}
		// To stderr, not t.Logf: a client may close a connection after its test ended.
		name := t.Name()
		return proxy.Trace(c, addr, func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, name+" "+format+"\n", args...)
		}), nil
	}
}

// rueidisDial adapts dial to rueidis's ClientOption.DialCtxFn; evals, when not nil, counts the
// EVALSHA and EVAL commands the client writes.
func rueidisDial(t *testing.T, via string, evals *atomic.Int64) func(context.Context, string, *net.Dialer, *tls.Config) (net.Conn, error) {
	d := dial(t, via)
	if d == nil && evals == nil {
		return nil
	}
	if d == nil {
		var nd net.Dialer
		d = nd.DialContext
	}
	return func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
		c, err := d(ctx, "tcp", addr)
		if err != nil || evals == nil {
			return c, err
		}
		return &evalCounter{Conn: c, n: evals}, nil
	}
}

// evalCounter counts the scripts a client sends (RESP commands are written whole: a name is
// never split across writes by the clients used here).
type evalCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c *evalCounter) Write(b []byte) (int, error) {
	c.n.Add(int64(bytes.Count(b, []byte("\r\nEVALSHA\r\n")) + bytes.Count(b, []byte("\r\nEVAL\r\n"))))
	return c.Conn.Write(b)
}

// startProxy puts a proxy in front of addr (for tests that freeze a holder).
func startProxy(t *testing.T, addr string) *proxy.Proxy {
	t.Helper()
	p, err := proxy.Start(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

var matrixMu sync.Mutex

// record appends one matrix row for run.sh.
func record(lib, scenario, result, detail string) {
	path := os.Getenv("RAFTLOCK_MATRIX")
	if path == "" {
		return
	}
	if db := testDB(); db != 0 {
		lib += "@db" + strconv.Itoa(db)
	}
	detail = strings.Join(strings.Fields(detail), " ")
	if len(detail) > 300 {
		detail = detail[:300] + "..."
	}
	matrixMu.Lock()
	defer matrixMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%s\t%s\n", lib, scenario, result, detail)
}

// suite runs one library's scenarios in order, as subtests, and records each one's result. A
// scenario that needs an earlier one's state skips once that one failed.
type suite struct {
	t      *testing.T
	lib    string
	passed map[string]bool
}

func newSuite(t *testing.T, lib string) *suite {
	return &suite{t: t, lib: lib, passed: map[string]bool{}}
}

// run runs scenario name after the scenarios in needs passed.
func (s *suite) run(name string, needs []string, f func(t *testing.T)) {
	s.t.Run(name, func(t *testing.T) {
		var detail string
		t.Cleanup(func() {
			switch {
			case t.Skipped():
				record(s.lib, name, "skip", detail)
			case t.Failed():
				msg, _ := failMsgs.Load(t.Name())
				m, _ := msg.(string)
				record(s.lib, name, "fail", m)
			default:
				s.passed[name] = true
				record(s.lib, name, "pass", "")
			}
		})
		for _, n := range needs {
			if !s.passed[n] {
				detail = "not run: " + n + " did not pass"
				t.Skip(detail)
			}
		}
		f(t)
	})
}

// fail fails the scenario with a message that also goes to the matrix file.
func fail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	failMsgs.LoadOrStore(t.Name(), msg)
	t.Fatal(msg)
}

var failMsgs sync.Map

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// uniqueKey is a key no earlier run used: runs against a long-lived server do not collide.
func uniqueKey(parts ...string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "cm:" + strings.Join(parts, ":") + ":" + hex.EncodeToString(b)
}

// inspector reads a key's state with plain commands, independently of the library under test.
type inspector struct{ c *redis.Client }

func newInspector(t *testing.T, addr string) inspector {
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, DB: testDB()})
	t.Cleanup(func() { c.Close() })
	return inspector{c}
}

// value returns the key's value, or "" and false when it is absent.
func (in inspector) value(ctx context.Context, key string) (string, bool, error) {
	v, err := in.c.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	return v, err == nil, err
}

func (in inspector) pttl(ctx context.Context, key string) (time.Duration, error) {
	return in.c.PTTL(ctx, key).Result()
}

// expectHeld fails unless key holds want (any value when want is "") with a lease in (min, max].
func (in inspector) expectHeld(t *testing.T, ctx context.Context, key, want string, min, max time.Duration) {
	t.Helper()
	v, ok, err := in.value(ctx, key)
	if err != nil || !ok {
		fail(t, "GET %s: held=%v, %v; want the lock held", key, ok, err)
	}
	if want != "" && v != want {
		fail(t, "GET %s = %q; want the holder's value %q", key, v, want)
	}
	d, err := in.pttl(ctx, key)
	if err != nil || d <= min || d > max {
		fail(t, "PTTL %s = %v, %v; want in (%v, %v]", key, d, err, min, max)
	}
}

func (in inspector) expectFree(t *testing.T, ctx context.Context, key string) {
	t.Helper()
	v, ok, err := in.value(ctx, key)
	if err != nil || ok {
		fail(t, "GET %s = %q (held=%v), %v; want the lock free", key, v, ok, err)
	}
}

// waitFree polls until key is absent (a lease ended), failing after timeout.
func (in inspector) waitFree(t *testing.T, ctx context.Context, key string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, ok, err := in.value(ctx, key)
		if err == nil && !ok {
			return time.Now()
		}
		if time.Now().After(deadline) {
			fail(t, "%s still held (or error %v) %v later", key, err, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
