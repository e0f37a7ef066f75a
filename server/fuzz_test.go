package server

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// FuzzRequests throws arbitrary bytes at a real server over a socket: whatever arrives, the
// server answers or closes the connection, never panics or hangs, and keeps serving others.
func FuzzRequests(f *testing.F) {
	ints := []string{"0", "-1", "1", "2147483647", "2147483648", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "99999999999999999999", "1025", "1048577", "+1", " 1", "01"}
	for _, n := range ints {
		f.Add([]byte("*" + n + "\r\n$4\r\nPING\r\n"))
		f.Add([]byte("*2\r\n$" + n + "\r\nPING\r\n"))
		f.Add([]byte(cmd("LOCK", "k", n)))
		f.Add([]byte(cmd("LOCK", "k", "1000", "OWNER", n)))
		f.Add([]byte(cmd("UNLOCK", "k", n)))
		f.Add([]byte(cmd("RENEW", "k", n, n)))
		f.Add([]byte(cmd("SET", "k", "v", "PX", n)))
		f.Add([]byte(cmd("SET", "k", "v", "EXAT", n, "GET")))
		f.Add([]byte(cmd("PEXPIREAT", "k", n, "GT")))
		f.Add([]byte(cmd("EXPIRE", "k", n)))
		f.Add([]byte(cmd("GETRANGE", "k", n, n)))
		f.Add([]byte(cmd("HELLO", n)))
		f.Add([]byte(cmd("SELECT", n)))
	}
	f.Add([]byte("LOCK \"unbalanced\r\n"))
	f.Add([]byte("set 'a\\'b' \"\\x41\\n\" nx px 100\r\n"))
	f.Add([]byte(cmd("HELLO", "3") + cmd("LOCKINFO", "k") + cmd("CLIENT", "INFO") + cmd("INFO")))
	f.Add([]byte(cmd("SET", "k\x00\r\n", "v", "NX", "XX", "KEEPTTL", "PX", "1")))
	fuzzAddr, _ := startServer(f, nil)
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 1<<16 {
			return
		}
		nc, err := net.Dial("tcp", fuzzAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		nc.Write(in)
		nc.(*net.TCPConn).CloseWrite()
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Fatalf("server neither answered nor closed within 10s: %v", err)
		}
		// The server must still answer a fresh client.
		r := dialRaw(t, fuzzAddr)
		if got := r.do("PING"); got != "+PONG\r\n" {
			t.Fatalf("PING after fuzz input = %q", got)
		}
	})
}

func cmd(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}
