package soak

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A loss is an acknowledged number a session did not deliver between its first and its last
// (or, open at the end, the last acknowledged); numbers published while no session listened,
// and unacknowledged ones, are not.
func TestPubsubLoss(t *testing.T) {
	tr := newPubsubTracker(2)
	for seq := range int64(20) {
		if seq != 7 { // 7's PUBLISH failed: its outcome is unknown
			tr.acked(0, seq)
		}
		tr.acked(1, seq)
	}
	// Channel 0: a session that delivered 2-9 but 5 (lost; 7 missing is not), closed; then,
	// after a reconnection, one from 13 to the end, missing 16 and 19 (both lost: it stayed open).
	a := tr.newSession(0)
	for _, seq := range []int64{2, 3, 4, 6, 8, 9} {
		tr.deliver(a, seq)
	}
	tr.close(a)
	b := tr.newSession(0)
	for _, seq := range []int64{13, 15, 14, 17, 18} { // out of order is fine
		tr.deliver(b, seq)
	}
	// Channel 1: everything from 0, and a session that never delivered anything.
	c := tr.newSession(1)
	for seq := range int64(20) {
		tr.deliver(c, seq)
	}
	tr.newSession(1)

	got := tr.figures()
	want := PubSubFigures{Published: 39, Received: 31, Lost: 3}
	if got != want {
		t.Errorf("figures = %+v, want %+v", got, want)
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
