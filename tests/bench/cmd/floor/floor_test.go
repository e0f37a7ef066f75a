package main

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The floor answers what the drivers send as raftlock and Redis do, and a
// durable floor has a write's record in its log file when it replies.
func TestFloorAnswers(t *testing.T) {
	for _, durable := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "durable"}[durable], func(t *testing.T) {
			s := &server{locks: newTable()}
			var wal *groupLog
			if durable {
				var err error
				if wal, err = openGroupLog(t.TempDir()); err != nil {
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
				if _, err := nc.Write(respRequest(args...)); err != nil {
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
				size := wal.written.Load()
				wrote := got == "+OK\r\n" || got == ":1\r\n" || got == ":2\r\n"
				if wrote && size <= logged {
					t.Errorf("%q replied %q with the log at %d bytes, as before it", st.args, got, size)
				}
				logged = size
			}
		})
	}
}

// The raft floor replicates: a write on the leader is replied once applied, and every node's
// table has applied it; followers refuse writes; a release reaches the followers too.
func TestRaftFloorReplicates(t *testing.T) {
	for _, pace := range []string{"write", "commit"} {
		t.Run(pace, func(t *testing.T) {
			var addrs []string
			for range 3 {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addrs = append(addrs, ln.Addr().String())
				ln.Close()
			}
			peers := "n1=" + addrs[0] + ",n2=" + addrs[1] + ",n3=" + addrs[2]
			var nodes []*raftNode
			for i := range 3 {
				n, err := startRaft(t.TempDir(), "n"+strconv.Itoa(i+1), addrs[i], peers, pace == "commit")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.r.Shutdown().Error() })
				nodes = append(nodes, n)
			}
			var leader *raftNode
			for deadline := time.Now().Add(10 * time.Second); leader == nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no leader after 10s")
				}
				for _, n := range nodes {
					if n.leads() {
						leader = n
					}
				}
			}
			servers := map[*raftNode]*server{}
			for _, n := range nodes {
				servers[n] = &server{locks: newTable(), raft: n, wal: n.j}
			}
			do := func(n *raftNode, args ...string) string {
				t.Helper()
				return serveOne(t, servers[n], args...)
			}
			if got := do(leader, "LOCK", "k", "10000"); got != ":1\r\n" {
				t.Fatalf("LOCK on the leader: %q", got)
			}
			for _, n := range nodes {
				if n != leader {
					if got := do(n, "LOCK", "j", "10000"); !strings.HasPrefix(got, "-READONLY") {
						t.Errorf("LOCK on a follower: %q", got)
					}
				}
			}
			applied := func(want bool) {
				t.Helper()
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
					ok := true
					for _, n := range nodes {
						n.table.mu.Lock()
						_, has := n.table.locks["k"]
						n.table.mu.Unlock()
						ok = ok && has == want
					}
					if ok {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("k held on every node: want %v, not so after 5s", want)
					}
				}
			}
			applied(true)
			if got := do(leader, "UNLOCK", "k", "1"); got != ":1\r\n" {
				t.Fatalf("UNLOCK on the leader: %q", got)
			}
			applied(false)
		})
	}
}

// serveOne sends one command to s over a real socket and returns the reply's first line.
func serveOne(t *testing.T, s *server, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go s.acceptLoop(ln)
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write(respRequest(args...)); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// respRequest encodes a command as a RESP array of bulk strings.
func respRequest(args ...string) []byte {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	return []byte(b.String())
}
