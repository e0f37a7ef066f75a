package client

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
	"go.uber.org/goleak"
)

// serverAddr is the raftlock node the live tests and benchmarks use: RAFTLOCK_ADDR's, or a
// single node TestMain starts. serverBin is the raftlock binary TestMain builds (without the
// race detector: these tests are the client's), for tests that need a node of their own.
var serverAddr, serverBin string

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "client tests:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "raftlock-client-bin-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "raftlock")
	if err := testutil.GoBuild(serverBin, "github.com/raftlock/raftlock/cmd/raftlock", false); err != nil {
		return 1, err
	}
	serverAddr = os.Getenv("RAFTLOCK_ADDR")
	if serverAddr == "" {
		stop, addr, err := startServer(serverBin)
		if err != nil {
			return 1, err
		}
		defer stop()
		serverAddr = addr
	}
	if os.Getenv("RAFTLOCK_ADDRS") == "" {
		os.Setenv("RAFTLOCK_ADDRS", serverAddr) // the examples' cluster
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			return 1, err
		}
	}
	return code, nil
}

// startServer starts a single raftlock node on fresh ports in a temporary directory, with the
// extra flags, and waits until it accepts connections; stop ends it (by its PID) and removes
// the directory.
func startServer(bin string, extra ...string) (stop func(), addr string, err error) {
	dir, err := os.MkdirTemp("", "raftlock-client-")
	if err != nil {
		return nil, "", err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	cmd := exec.Command(bin, "--dir", dir, "--addr", addr, "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--log-level", "error")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = serverProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			return stop, addr, nil
		}
	}
	stop()
	return nil, "", fmt.Errorf("raftlock at %s did not answer within 20 s", addr)
}

// freePorts returns n ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// liveClient returns a Client of serverAddr, closed when the test ends, or skips the test
// when there is no server.
func liveClient(tb testing.TB, opts Options) *Client {
	tb.Helper()
	opts.Addrs = []string{serverAddr}
	c, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
