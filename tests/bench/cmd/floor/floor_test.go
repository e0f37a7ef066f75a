package main

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
)

// The floor answers what the drivers send as raftlock and Redis do, and a
// durable floor has a write's record in its log file when it replies.
func TestFloorAnswers(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "durable"}[durable], func(t *testing.T) {
			s := &server{locks: newTable()}
			if durable {
				wal, err := openGroupLog(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				s.wal = wal
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.acceptLoop(ln)
			t.Cleanup(func() { ln.Close() })
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			r := bufio.NewReader(nc)
			do := func(args ...string) string {
				t.Helper()
				var b strings.Builder
				b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
				for _, a := range args {
					b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
				}
				if _, err := nc.Write([]byte(b.String())); err != nil {
					t.Fatal(err)
				}
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
					rest, err := r.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					line += rest
				}
				return line
			}
			script := "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"
			steps := []struct {
				args []string
				want string
			}{
				{[]string{"PING"}, "+PONG\r\n"},
				{[]string{"LOCK", "a", "10000"}, ":1\r\n"},
				{[]string{"LOCK", "a", "10000"}, "$-1\r\n"},
				{[]string{"UNLOCK", "a", "2"}, ":0\r\n"},
				{[]string{"UNLOCK", "a", "1"}, ":1\r\n"},
				{[]string{"LOCK", "b", "10000", "OWNER", "o"}, ":2\r\n"},
				{[]string{"LOCK", "b", "10000", "OWNER", "o"}, ":2\r\n"},
				{[]string{"LOCK", "b", "10000", "OWNER", "p"}, "$-1\r\n"},
				{[]string{"LOCK", "c", "0"}, "-ERR invalid ttl\r\n"},
				{[]string{"SET", "k", "v1", "NX", "PX", "10000"}, "+OK\r\n"},
				{[]string{"SET", "k", "v2", "NX", "PX", "10000"}, "$-1\r\n"},
				{[]string{"EVALSHA", "ae3671744a5dbb24ea37ef607b8b10ac7856d43e", "1", "k", "v1"}, "-NOSCRIPT No matching script. Please use EVAL.\r\n"},
				{[]string{"SCRIPT", "LOAD", script}, "$40\r\nae3671744a5dbb24ea37ef607b8b10ac7856d43e\r\n"},
				{[]string{"EVALSHA", "ae3671744a5dbb24ea37ef607b8b10ac7856d43e", "1", "k", "v2"}, ":0\r\n"},
				{[]string{"EVALSHA", "ae3671744a5dbb24ea37ef607b8b10ac7856d43e", "1", "k", "v1"}, ":1\r\n"},
				{[]string{"SET", "k", "v3", "NX", "PX", "10000"}, "+OK\r\n"},
				{[]string{"EVAL", script, "1", "k", "v3"}, ":1\r\n"},
				{[]string{"DEL", "k"}, ":0\r\n"},
				{[]string{"GET", "k"}, "-ERR the floor server does not serve 'GET' with 1 arguments\r\n"},
			}
			var logged int64
			for _, st := range steps {
				got := do(st.args...)
				if got != st.want {
					t.Errorf("%q: got %q, want %q", st.args, got, st.want)
				}
				if !durable {
					continue
				}
				// A write's reply comes after its record is in the log.
				size := s.wal.written.Load()
				wrote := got == "+OK\r\n" || got == ":1\r\n" || got == ":2\r\n"
				if wrote && size <= logged {
					t.Errorf("%q replied %q with the log at %d bytes, as before it", st.args, got, size)
				}
				logged = size
			}
		})
	}
}
