package testutil

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/resp"
)

// fakeTB records a failure instead of ending the test.
type fakeTB struct {
	testing.TB
	fatal string
}

func (f *fakeTB) Helper()                      {}
func (f *fakeTB) Fatal(args ...any)            { f.fatal = fmt.Sprint(args...) }
func (f *fakeTB) Fatalf(s string, args ...any) { f.fatal = fmt.Sprintf(s, args...) }

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, time.Second, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n != 3 {
		t.Errorf("cond ran %d times, want 3", n)
	}
	var f fakeTB
	WaitFor(&f, 30*time.Millisecond, func() error { return errors.New("the last error") })
	if !strings.Contains(f.fatal, "the last error") {
		t.Errorf("WaitFor failed with %q, want cond's last error", f.fatal)
	}
	f = fakeTB{}
	WaitFor(&f, 30*time.Millisecond, Cond("the moon", func() bool { return false }))
	if !strings.Contains(f.fatal, "waiting for the moon") {
		t.Errorf("WaitFor(Cond) failed with %q, want it to name what it waited for", f.fatal)
	}
	start := time.Now()
	err := Poll(time.Minute, time.Millisecond, func() error { return fmt.Errorf("%w: gone", ErrGiveUp) })
	if !errors.Is(err, ErrGiveUp) || time.Since(start) > 10*time.Second {
		t.Errorf("Poll = %v after %v, want ErrGiveUp at once", err, time.Since(start))
	}
}

// shell runs script with sh in a process of the test.
func shell(t *testing.T, script string) *Proc {
	t.Helper()
	p, err := Start("sh", filepath.Join(t.TempDir(), "sh.log"), "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill() })
	return p
}

func TestProcStop(t *testing.T) {
	p := shell(t, `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	WaitFor(t, 5*time.Second, Cond("ready", func() bool { return strings.Contains(p.Log(), "\nready\n") }))
	if err := p.Pause(); err != nil || !p.Paused() {
		t.Fatalf("Pause = %v, Paused = %v", err, p.Paused())
	}
	// Stop resumes a paused process so it can act on SIGTERM.
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if p.Running() || p.ExitStatus() != nil || !strings.Contains(p.Log(), "got TERM") {
		t.Errorf("after Stop: running %v, status %v, log %q", p.Running(), p.ExitStatus(), p.Log())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}
}

func TestProcStopHung(t *testing.T) {
	p := shell(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	WaitFor(t, 5*time.Second, Cond("ready", func() bool { return strings.Contains(p.Log(), "\nready\n") }))
	if err := p.Stop(100 * time.Millisecond); !errors.Is(err, ErrWouldNotStop) {
		t.Errorf("Stop of a process ignoring SIGTERM = %v, want a kill", err)
	}
	if p.Running() {
		t.Error("still running after Stop")
	}
}

func TestProcExits(t *testing.T) {
	p := shell(t, `echo 'panic: boom'; exit 3`)
	if err := p.WaitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.ExitStatus(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("ExitStatus = %v, want exit status 3", err)
	}
	if err := p.Stop(time.Second); !errors.Is(err, ErrExitedEarly) {
		t.Errorf("Stop after an exit nobody expected = %v, want ErrExitedEarly", err)
	}
	if err := p.CheckLog(); err == nil || !strings.Contains(err.Error(), `"panic:"`) {
		t.Errorf("CheckLog = %v, want the panic found", err)
	}
	if !strings.Contains(p.Log(), "=== sh exited: exit status 3") {
		t.Errorf("log lacks the exit line:\n%s", p.Log())
	}

	q := shell(t, `sleep 0.1`)
	q.ExpectExit()
	if err := q.WaitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := q.Stop(time.Second); err != nil {
		t.Errorf("Stop after an expected exit = %v, want nil", err)
	}
}

func TestProcKill(t *testing.T) {
	p := shell(t, `trap '' TERM; while :; do sleep 0.05; done`)
	if err := p.Kill(); err != nil {
		t.Fatalf("Kill = %v", err)
	}
	if p.Running() {
		t.Error("running after Kill")
	}
	if err := p.Signal(syscall.SIGCONT); err == nil {
		t.Error("Signal to an exited process succeeded")
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop after Kill = %v, want nil", err)
	}
}

func TestPlain(t *testing.T) {
	v, _, err := resp.ParseValue([]byte("*7\r\n+OK\r\n$-1\r\n:7\r\n#t\r\n-ERR no\r\n=7\r\ntxt:abc\r\n%1\r\n$1\r\nk\r\n,1.5\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := Plain(v).([]any)
	want := []any{"OK", nil, int64(7), true, &resp.ReplyError{Msg: "ERR no"}, "abc", []any{"k", "1.5"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Plain (-want +got):\n%s", diff)
	}
}

func TestGoflagsTags(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"-tags=chaos_nonatomic":     "chaos_nonatomic",
		"-race --tags=a,b -mod=mod": "a,b",
		"-mod=mod -tags=x -tags=y":  "x,y",
		"-trimpath":                 "",
	} {
		if got := strings.Join(goflagsTags(in), ","); got != want {
			t.Errorf("goflagsTags(%q) = %q, want %q", in, got, want)
		}
	}
}

// FreePort never returns a port twice in one process, even when the kernel would (a cluster's
// ports are all asked for before any is bound), nor one of the kernel's ephemeral range.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := make(map[int]bool)
	for range 500 {
		port, err := FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d returned twice", port)
		}
		if port < testPortLow || port > testPortHigh {
			t.Fatalf("port %d is outside %d-%d, below the ephemeral range", port, testPortLow, testPortHigh)
		}
		seen[port] = true
	}
}
