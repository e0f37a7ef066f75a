package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recvNotice reads one notice from c (within a few seconds) and returns its lines.
func recvNotice(t *testing.T, c *net.UnixConn) []string {
	t.Helper()
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notice: %v", err)
	}
	return strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")
}

// The notifier sends a STATUS= line each time the reasons change (not at every poll), READY=1
// once ready says so, and then stops polling; an abstract socket ("@name") works as a path does.
func TestNotifyWhenReady(t *testing.T) {
	name := fmt.Sprintf("@raftlock-notify-test-%d", os.Getpid())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var polls atomic.Int32
	ready := func() (bool, []string) {
		switch p := polls.Add(1); {
		case p <= 3:
			return false, []string{"no leader known"}
		case p <= 5:
			return false, []string{"no leader known", "store not writable: disk full"}
		default:
			return true, nil
		}
	}
	sd := sdNotifier{socket: name, log: slog.New(slog.DiscardHandler)}
	stop := sd.notifyWhenReady(ready)
	defer stop()
	want := [][]string{
		{"STATUS=not ready: no leader known"},
		{"STATUS=not ready: no leader known; store not writable: disk full"},
		{"READY=1", "STATUS=serving"},
	}
	for _, w := range want {
		if got := recvNotice(t, c); !slices.Equal(got, w) {
			t.Fatalf("notice %q; want %q", got, w)
		}
	}
	stop() // returns at once: the poller ended with READY=1
	if p := polls.Load(); p != 6 {
		t.Errorf("ready asked %d times; want 6 (no poll after READY=1)", p)
	}
	sd.notify("STOPPING=1")
	if got := recvNotice(t, c); !slices.Equal(got, []string{"STOPPING=1"}) {
		t.Errorf("notice %q; want STOPPING=1", got)
	}
}

// Without NOTIFY_SOCKET nothing polls and nothing is sent.
func TestNotifyWithoutSocket(t *testing.T) {
	sd := sdNotifier{log: slog.New(slog.DiscardHandler)}
	stop := sd.notifyWhenReady(func() (bool, []string) {
		t.Error("ready asked without a socket")
		return true, nil
	})
	stop()
	sd.notify("STOPPING=1")
}

// Stopping before the node is ready ends the poller.
func TestNotifyStopBeforeReady(t *testing.T) {
	dir, err := os.MkdirTemp("", "rl-sd")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := dir + "/notify"
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sd := sdNotifier{socket: path, log: slog.New(slog.DiscardHandler)}
	stop := sd.notifyWhenReady(func() (bool, []string) { return false, []string{"no leader known"} })
	if got := recvNotice(t, c); !slices.Equal(got, []string{"STATUS=not ready: no leader known"}) {
		t.Errorf("notice %q; want the reason", got)
	}
	done := make(chan struct{})
	go func() { stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return")
	}
}
