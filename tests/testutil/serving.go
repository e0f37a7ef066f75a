package testutil

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/resp"
)

// handedOut are the ports FreePort returned in this process; next is where its walk goes on.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
	next  int
}

// Test ports come from below the kernel's ephemeral range (ip_local_port_range, 32768-60999 by
// default), which the kernel never picks as a connection's source port: a node stopped by a test
// finds its ports free when it restarts, where a port of the ephemeral range can be held by any
// outgoing connection meanwhile (TestClusterLeaderStop failed on that once).
const (
	testPortLow  = 10000
	testPortHigh = 32767
)

// FreePort returns a TCP port on ip, below the ephemeral range, that was free a moment ago and
// that it has not returned before in this process. A cluster's ports are asked for one after
// another before any node binds them, so a port handed out is never handed out again. Each
// process walks the range from a random place of its own, so that the test binaries go test runs
// at once rarely meet.
func FreePort(ip string) (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = make(map[int]bool)
		handedOut.next = testPortLow + rand.IntN(testPortHigh-testPortLow+1)
	}
	for range testPortHigh - testPortLow + 1 {
		port := handedOut.next
		handedOut.next++
		if handedOut.next > testPortHigh {
			handedOut.next = testPortLow
		}
		if handedOut.ports[port] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			continue // taken by someone else
		}
		ln.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("free port: no port of %d-%d is free on %s", testPortLow, testPortHigh, ip)
}

// clientTLS maps a client address to the TLS config that reaches it (UseTLS).
var clientTLS sync.Map

// UseTLS makes Dial, Ping and WaitServing, and every helper built on them, speak TLS with
// config to addr until tb ends: the tests of a node whose client port speaks TLS use the
// same helpers as any other.
func UseTLS(tb testing.TB, addr string, config *tls.Config) {
	clientTLS.Store(addr, config)
	tb.Cleanup(func() { clientTLS.Delete(addr) })
}

// TLSFor returns the TLS config UseTLS set for addr, nil if none.
func TLSFor(addr string) *tls.Config {
	if v, ok := clientTLS.Load(addr); ok {
		return v.(*tls.Config)
	}
	return nil
}

// Dial is resp.Dial, over TLS to an address UseTLS named.
func Dial(ctx context.Context, addr string, timeout time.Duration) (*resp.Client, error) {
	return resp.DialTLS(ctx, addr, timeout, TLSFor(addr))
}

// Ping dials addr and sends PING, within timeout; nil means it answered PONG.
func Ping(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := Dial(ctx, addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	v, err := c.Do(ctx, "PING")
	if err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if v.Text() != "PONG" {
		return fmt.Errorf("PING: %v", v)
	}
	return nil
}

// WaitServing polls until the process answers PING on addr and then passes check (if any),
// for up to timeout. When it gives up, or the process exits, it kills the process and returns
// an error with the process's log.
func (p *Proc) WaitServing(addr string, timeout time.Duration, check func() error) error {
	err := Poll(timeout, 20*time.Millisecond, func() error {
		if !p.Running() {
			return fmt.Errorf("%w: %s exited: %v\n%s", ErrGiveUp, p.name, p.status, p.Log())
		}
		if err := Ping(addr, 2*time.Second); err != nil {
			return err
		}
		if check != nil {
			return check()
		}
		return nil
	})
	if errors.Is(err, ErrGiveUp) {
		return err
	}
	if err != nil {
		p.Kill()
		return fmt.Errorf("%s not ready: %w\n%s", p.name, err, p.Log())
	}
	return nil
}
