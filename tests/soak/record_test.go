package soak

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// A loss is an acknowledged number above a session's base (the last acknowledged, or sent, when
// it was confirmed) that it did not deliver up to its last delivery or, open at the end, up to the last
// acknowledged; numbers acknowledged before its confirmation, unacknowledged ones, and a closed
// session's tail are not.
func TestPubsubLoss(t *testing.T) {
	tr := newPubsubTracker(2)
	ack := func(ch int, from, to int64) {
		for seq := from; seq <= to; seq++ {
			if ch != 0 || seq != 7 { // 7's PUBLISH on channel 0 failed: its outcome is unknown
				tr.acked(ch, seq)
			}
		}
	}
	deliver := func(s *session, seqs ...int64) {
		for _, seq := range seqs {
			tr.deliver(s, seq)
		}
	}
	// Channel 0, n1: a session confirmed after 1 that delivered 3-9 but 5 and 7, closed (2,
	// before its first delivery, and 5 are lost; 7 is not); then, after a reconnection, one
	// confirmed after 12, from 13 to the end, missing 16 and 19 (both lost: it stayed open).
	ack(0, 0, 1)
	a := tr.confirmed("n1", 0)
	ack(0, 2, 12)
	deliver(a, 1, 3, 4, 6, 8, 9) // 1 was acknowledged before: not due, but received
	tr.close(a)
	b := tr.confirmed("n1", 0)
	ack(0, 13, 19)
	deliver(b, 13, 15, 14, 17, 18) // out of order is fine
	// Channel 1: n2's session delivers everything; n3's, confirmed after 9, delivers nothing
	// and stays open (10 lost, and 20 below); n1's, confirmed after 19, delivers nothing and owes
	// 20 (lost).
	c := tr.confirmed("n2", 1)
	ack(1, 0, 9)
	e := tr.confirmed("n3", 1)
	ack(1, 10, 19)
	deliver(c, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	d := tr.confirmed("n1", 1)
	// Channel 1 again: 20 was sent before n2's second session was confirmed and acknowledged
	// after; its subscriber's node may have delivered it before the SUBSCRIBE: not due.
	tr.sending(1, 20)
	tr.close(c)
	tr.confirmed("n2", 1)
	tr.acked(1, 20)

	got := tr.figures()
	want := PubSubFigures{Published: 40, Received: 31, Lost: 16, ReceivedBy: map[string]int64{"n1": 11, "n2": 20}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
	if tr.caughtUp() {
		t.Error("caughtUp with b at 18 and e at nothing of 20, want false")
	}
	deliver(b, 19)
	deliver(e, 20)
	if tr.caughtUp() {
		t.Error("caughtUp with d at nothing of 20, want false")
	}
	deliver(d, 20) // f owes nothing
	if !tr.caughtUp() {
		t.Error("caughtUp with every open session at 20 = false, want true")
	}
}

func TestErrorKind(t *testing.T) {
	timeout := &timeoutError{}
	for _, tt := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{redis.Nil, ""},
		{replyError("UNCERTAIN the outcome is unknown (leadership changed)"), "UNCERTAIN"},
		{replyError("TRYAGAIN this node is shutting down; retry on another node"), "TRYAGAIN"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "conn"},
		{io.EOF, "conn"},
		{timeout, "timeout"},
		{context.DeadlineExceeded, "timeout"},
	} {
		if got := errorKind(tt.err); got != tt.want {
			t.Errorf("errorKind(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// replyError is a server's error reply, as go-redis types it (redis.Error).
func replyError(msg string) error { return redisErr(msg) }

type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

type timeoutError struct{}

func (*timeoutError) Error() string   { return "i/o timeout" }
func (*timeoutError) Timeout() bool   { return true }
func (*timeoutError) Temporary() bool { return true }

// A window's latency is over replies (error replies included); a stall is the longest time
// between two answers, or from the last answer to the end.
func TestRecorder(t *testing.T) {
	r := newRecorder(1)
	t0 := time.Now()
	r.observe(0, famSetNX, t0, time.Millisecond, nil) // before start: not recorded
	r.start(t0)
	r.observe(0, famSetNX, t0.Add(time.Second), 2*time.Millisecond, nil)
	r.observe(0, famSetNX, t0.Add(2*time.Second), 3*time.Millisecond, redis.Nil)
	r.observe(0, famSetNX, t0.Add(3*time.Second), 9*time.Millisecond, replyError("UNCERTAIN x"))
	r.observe(0, famSetNX, t0.Add(4*time.Second), 5*time.Second, io.EOF)
	r.observe(0, famSetNX, t0.Add(12*time.Second), time.Millisecond, nil)
	w := r.swap()[0][famSetNX]
	if w.ops != 5 || len(w.latency) != 4 || w.errors["UNCERTAIN"] != 1 || w.errors["conn"] != 1 {
		t.Errorf("window: %d ops, %d timed, errors %v; want 5, 4, UNCERTAIN=1 conn=1", w.ops, len(w.latency), w.errors)
	}
	answered, stall := r.stop(t0.Add(13 * time.Second))
	if answered != 3 || stall.Round(time.Millisecond) != 9998*time.Millisecond {
		t.Errorf("stop = %d answered, stall %v; want 3, 9.998s", answered, stall)
	}
}
