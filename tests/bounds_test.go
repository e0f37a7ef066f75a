package tests

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Glob and buffer bounds, crossed on a real node with its default configuration. The KEYS and
// SCAN below would cost a matcher that re-parses the 1 MiB class at every byte about 8·10^11
// steps (200 keys of 4000 bytes: over ten minutes under the view lock), far past the client's
// 60 s; a compiled glob answers at once.
func TestBoundsEndToEnd(t *testing.T) {
	n := startNode(t, t.TempDir())
	c, err := dialRESP(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.timeout = 60 * time.Second
	do := func(args ...string) string {
		t.Helper()
		b, err := c.do(args...)
		if err != nil {
			t.Fatalf("%.40q: %v", args, err)
		}
		return string(b)
	}
	for i := range 200 {
		do("SET", fmt.Sprintf("%04d", i)+strings.Repeat("k", 3996), "v")
	}
	class := make([]byte, 1<<20-16)
	for i := range class {
		class[i] = 'A' + byte(i%20)
	}
	pattern := "*[" + string(class) + "]"
	if got := do("KEYS", pattern); got != "*0\r\n" {
		t.Errorf("KEYS with a 1 MiB class = %.80q, want no keys", got)
	}
	if got := do("SCAN", "0", "MATCH", pattern, "COUNT", "10"); !strings.HasSuffix(got, "*0\r\n") {
		t.Errorf("SCAN 0 MATCH (1 MiB class) COUNT 10 = %.80q, want no keys", got)
	}
	if got := do("KEYS", "*0199k*k"); !strings.HasPrefix(got, "*1\r\n") {
		t.Errorf("KEYS *0199k*k = %.80q, want one key", got)
	}

	// Subscriptions: a 1 MiB pattern and a 2 KiB channel name are refused.
	wants := []string{"-ERR pattern too long: at most 256 bytes", "-ERR channel name too long: at most 1024 bytes"}
	s, err := dialRESP(n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, args := range [][]string{{"PSUBSCRIBE", pattern}, {"SUBSCRIBE", strings.Repeat("c", 2048)}} {
		if got, err := s.do(args...); err != nil || !strings.HasPrefix(string(got), wants[i]) {
			t.Errorf("%.20q: %.80q, %v; want the name bound's error", args, got, err)
		}
	}

	// Client names.
	if got := do("CLIENT", "SETNAME", strings.Repeat("n", 1<<20-16)); got != "-ERR Client name is too long: at most 512 bytes\r\n" {
		t.Errorf("CLIENT SETNAME of 1 MiB = %.80q", got)
	}

	// A MULTI queue: 8 MiB at most.
	do("MULTI")
	arg := strings.Repeat("q", 1<<20-16)
	queued := 0
	for range 12 {
		if got := do("ECHO", arg); got != "+QUEUED\r\n" {
			if !strings.HasPrefix(got, "-ERR transaction too large") {
				t.Errorf("queueing 1 MiB commands: %.80q after %d", got, queued)
			}
			break
		}
		queued++
	}
	if queued != 7 {
		t.Errorf("queued %d commands of 1 MiB, want 7", queued)
	}
	if got := do("EXEC"); !strings.HasPrefix(got, "-EXECABORT") {
		t.Errorf("EXEC = %.80q, want EXECABORT", got)
	}
	if got := do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING = %q", got)
	}
}
