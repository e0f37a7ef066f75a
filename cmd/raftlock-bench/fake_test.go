package main

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// fakeLockServer speaks raftlock's native commands well enough to exercise
// the benchmark while the real server is being written: LOCK key ttl
// [OWNER id], UNLOCK key token and PING; for the scale scenarios also
// SET key value NX PX ms|PXAT unix-ms, GET and DBSIZE. A lease ends exactly
// at its deadline. Like a server that predates RESP3, it answers HELLO with
// an error.
type fakeLockServer struct {
	// stall makes LOCK never answer (until the server closes).
	stall bool
	// unlockReply, if set, is UNLOCK's answer whatever the token.
	unlockReply *int

	unblock chan struct{}
	mu      struct {
		sync.Mutex
		next  int64
		locks map[string]fakeLock
	}
}

type fakeLock struct {
	token   int64
	value   string
	expires time.Time
}

// startFake serves f on a free 127.0.0.1 port and returns its address; the
// server stops when the test ends.
func startFake(t *testing.T, f *fakeLockServer) string {
	t.Helper()
	f.unblock = make(chan struct{})
	f.mu.locks = make(map[string]fakeLock)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := redcon.NewServer(ln.Addr().String(), f.handle, nil, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns nil once closed
	}()
	t.Cleanup(func() {
		close(f.unblock)
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

func (f *fakeLockServer) handle(conn redcon.Conn, cmd redcon.Command) {
	args := cmd.Args
	switch strings.ToUpper(string(args[0])) {
	case "PING":
		conn.WriteString("PONG")
	case "LOCK":
		if f.stall {
			<-f.unblock
			return
		}
		if len(args) != 3 && (len(args) != 5 || !strings.EqualFold(string(args[3]), "OWNER")) {
			conn.WriteError("ERR syntax error")
			return
		}
		ttl, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil || ttl <= 0 {
			conn.WriteError("ERR invalid ttl")
			return
		}
		key, now := string(args[1]), time.Now()
		f.mu.Lock()
		defer f.mu.Unlock()
		if l, ok := f.mu.locks[key]; ok && now.Before(l.expires) {
			conn.WriteNull()
			return
		}
		owner := "fake-owner"
		if len(args) == 5 {
			owner = string(args[4])
		}
		f.mu.next++
		f.mu.locks[key] = fakeLock{token: f.mu.next, value: owner, expires: now.Add(time.Duration(ttl) * time.Millisecond)}
		conn.WriteInt64(f.mu.next)
	case "UNLOCK":
		if len(args) != 3 {
			conn.WriteError("ERR wrong number of arguments for 'unlock' command")
			return
		}
		if f.unlockReply != nil {
			conn.WriteInt(*f.unlockReply)
			return
		}
		token, err := strconv.ParseInt(string(args[2]), 10, 64)
		if err != nil {
			conn.WriteError("ERR invalid token")
			return
		}
		key := string(args[1])
		f.mu.Lock()
		defer f.mu.Unlock()
		if l, ok := f.mu.locks[key]; ok && l.token == token && time.Now().Before(l.expires) {
			delete(f.mu.locks, key)
			conn.WriteInt(1)
			return
		}
		conn.WriteInt(0)
	case "SET":
		f.set(conn, args)
	case "GET":
		f.mu.Lock()
		defer f.mu.Unlock()
		if l, ok := f.mu.locks[string(args[1])]; ok && time.Now().Before(l.expires) {
			conn.WriteBulkString(l.value)
			return
		}
		conn.WriteNull()
	case "DBSIZE":
		f.mu.Lock()
		defer f.mu.Unlock()
		n, now := 0, time.Now()
		for _, l := range f.mu.locks {
			if now.Before(l.expires) {
				n++
			}
		}
		conn.WriteInt(n)
	default:
		conn.WriteError("ERR unknown command '" + string(args[0]) + "'")
	}
}

// set is SET key value NX PX ms | PXAT unix-ms, the only form the benchmark
// sends.
func (f *fakeLockServer) set(conn redcon.Conn, args [][]byte) {
	if len(args) != 6 || !strings.EqualFold(string(args[3]), "NX") {
		conn.WriteError("ERR syntax error")
		return
	}
	n, err := strconv.ParseInt(string(args[5]), 10, 64)
	now := time.Now()
	var expires time.Time
	switch {
	case err != nil || n <= 0:
		conn.WriteError("ERR invalid expire time in 'set' command")
		return
	case strings.EqualFold(string(args[4]), "PX"):
		expires = now.Add(time.Duration(n) * time.Millisecond)
	case strings.EqualFold(string(args[4]), "PXAT"):
		expires = time.UnixMilli(n)
	default:
		conn.WriteError("ERR syntax error")
		return
	}
	key := string(args[1])
	f.mu.Lock()
	defer f.mu.Unlock()
	if l, ok := f.mu.locks[key]; ok && now.Before(l.expires) {
		conn.WriteNull()
		return
	}
	f.mu.next++
	f.mu.locks[key] = fakeLock{token: f.mu.next, value: string(args[2]), expires: expires}
	conn.WriteString("OK")
}
