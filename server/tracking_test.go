package server

import (
	"strings"
	"testing"
	"time"
)

func TestClientTrackingInvalidates(t *testing.T) {
	addr, f := startFake(t)
	reader := dialRaw(t, addr)
	writer := dialRaw(t, addr)
	if got := reader.do("CLIENT", "TRACKING", "ON"); !strings.HasPrefix(got, "-ERR raftlock sends invalidations only over RESP3") {
		t.Errorf("TRACKING ON in RESP2 = %q", got)
	}
	reader.do("HELLO", "3")
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"}, "-ERR You can't use both OPTIN and OPTOUT\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "PREFIX", "a"}, "-ERR PREFIX option requires BCAST mode to be enabled\r\n"},
		{[]string{"CLIENT", "CACHING", "YES"}, "-ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled\r\n"},
		{[]string{"CLIENT", "TRACKING", "ON", "OPTIN"}, "+OK\r\n"},
		{[]string{"GET", "untracked"}, "_\r\n"},
		{[]string{"CLIENT", "CACHING", "YES"}, "+OK\r\n"},
		{[]string{"GET", "lk"}, "_\r\n"},
	} {
		if got := reader.do(s.args...); got != s.want {
			t.Errorf("%q: got %q, want %q", s.args, got, s.want)
		}
	}
	// A change to a key the reader cached (a grant) is pushed to it; one to a key it read
	// without CACHING YES is not.
	writer.do("SET", "untracked", "x")
	writer.do("SET", "lk", "owner", "NX", "PX", "100")
	want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nlk\r\n"
	reader.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := readReply(reader.br); err != nil || got != want {
		t.Fatalf("push after the grant = %q, %v; want %q", got, err, want)
	}
	// One push per read: the lease's expiry is not pushed again until the key is read again.
	f.expire(t, "lk")
	if got := reader.do("PING"); got != "+PONG\r\n" {
		t.Errorf("next reply = %q, want PONG (no second push)", got)
	}
	// BCAST with a prefix: every change under it.
	bc := dialRaw(t, addr)
	bc.do("HELLO", "3")
	if got := bc.do("CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "job:"); got != "+OK\r\n" {
		t.Fatalf("BCAST = %q", got)
	}
	writer.do("LOCK", "other", "1000")
	writer.do("LOCK", "job:1", "1000")
	bc.nc.SetDeadline(time.Now().Add(5 * time.Second))
	if got, _ := readReply(bc.br); got != ">2\r\n$10\r\ninvalidate\r\n*1\r\n$5\r\njob:1\r\n" {
		t.Errorf("BCAST push = %q", got)
	}
	if got := bc.do("CLIENT", "TRACKING", "OFF"); got != "+OK\r\n" {
		t.Errorf("TRACKING OFF = %q", got)
	}
}

// TestTrackingScriptsAndNoloop: keys a script reads are tracked for its caller (rueidislock
// waits on exactly that), and NOLOOP spares a client the pushes for its own writes.
func TestTrackingScriptsAndNoloop(t *testing.T) {
	addr, _ := startFake(t)
	reader, writer := dialRaw(t, addr), dialRaw(t, addr)
	reader.do("HELLO", "3")
	if got := reader.do("CLIENT", "TRACKING", "ON", "NOLOOP"); got != "+OK\r\n" {
		t.Fatalf("TRACKING ON NOLOOP = %q", got)
	}
	if got := reader.do("EVAL", "return redis.call('GET', KEYS[1])", "1", "sk"); got != "_\r\n" {
		t.Fatalf("EVAL GET = %q", got)
	}
	// Its own write to a key it tracks: no push (NOLOOP).
	reader.do("GET", "own")
	if got := reader.do("SET", "own", "v"); got != "+OK\r\n" {
		t.Fatalf("SET own = %q", got)
	}
	// Another client's write to the key the script read: pushed.
	writer.do("SET", "sk", "v")
	reader.nc.SetDeadline(time.Now().Add(5 * time.Second))
	want := ">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nsk\r\n"
	if got, err := readReply(reader.br); err != nil || got != want {
		t.Fatalf("push = %q, %v; want %q (and none for its own SET)", got, err, want)
	}
}
