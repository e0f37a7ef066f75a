package server

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// A subscriber that stops reading is disconnected once its push queue is full (as Redis's
// pub/sub output buffer limit does), and the publisher is not held up by it.
func TestSlowSubscriberIsDisconnected(t *testing.T) {
	addr, _ := startFake(t)
	sub := dialRaw(t, addr)
	if got := sub.do("SUBSCRIBE", "flood"); !strings.Contains(got, "subscribe") {
		t.Fatalf("SUBSCRIBE = %q", got)
	}
	pub := dialRaw(t, addr)
	body := strings.Repeat("x", 4000)
	var b strings.Builder
	const n = 8000 // far more than the socket buffers and the push queue hold
	for range n {
		fmt.Fprintf(&b, "*3\r\n$7\r\nPUBLISH\r\n$5\r\nflood\r\n$%d\r\n%s\r\n", len(body), body)
	}
	done := make(chan error, 1)
	go func() { _, err := io.WriteString(pub.nc, b.String()); done <- err }()
	pub.nc.SetDeadline(time.Now().Add(20 * time.Second))
	for i := range n {
		if _, err := readReply(pub.br); err != nil {
			t.Fatalf("publisher's reply %d: %v", i, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The subscriber's connection was closed: reading drains what had been sent, then ends
	// (EOF or reset) well before all n messages.
	sub.nc.SetDeadline(time.Now().Add(10 * time.Second))
	got := 0
	for ; got <= n; got++ {
		if _, err := readReply(sub.br); err != nil {
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				t.Fatalf("the slow subscriber is still connected after %d messages", got)
			}
			break
		}
	}
	if got >= n {
		t.Errorf("the slow subscriber got all %d messages; want it cut off", n)
	}
	t.Logf("cut off after %d of %d messages", got, n)
}

// A restored snapshot closes every subscriber's connection: the messages of the entries the
// snapshot covers are never delivered on this node, and a closed connection says so.
func TestRestoreDropsSubscribers(t *testing.T) {
	addr, f := startFake(t)
	sub := dialRaw(t, addr)
	sub.do("SUBSCRIBE", "ch")
	other := dialRaw(t, addr)
	f.watched().Restored()
	sub.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := readReply(sub.br); err == nil {
		t.Error("the subscriber's connection is still open after a restore")
	}
	if got := other.do("PING"); got != "+PONG\r\n" {
		t.Errorf("a connection without subscriptions after a restore: PING = %q", got)
	}
}
