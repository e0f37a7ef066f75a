package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Process timing bounds.
const (
	// StopGrace is how long Stop waits after SIGTERM (a node hands leadership over first).
	StopGrace = 15 * time.Second
	// dumpWait is how long Stop waits for a Go process's goroutine dump after SIGQUIT.
	dumpWait = 5 * time.Second
	// killWait bounds the wait for a process to be gone after SIGKILL.
	killWait = 10 * time.Second
	// logTail is how much of a log a failed test prints.
	logTail = 64 << 10
)

// LogMarkers are what a process's log must never contain: a Go panic, a report of the race
// detector, a fatal runtime error.
var LogMarkers = []string{"panic:", "DATA RACE", "fatal error:"}

// ErrExitedEarly means the process exited on its own before anyone stopped or killed it.
var ErrExitedEarly = errors.New("exited unexpectedly")

// ErrWouldNotStop means the process did not exit within its grace after SIGTERM and was killed.
var ErrWouldNotStop = errors.New("did not stop")

// Proc is one child process, its stdout and stderr appended to a log file. Its methods are safe
// for concurrent use.
type Proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{} // closed once the process has been waited for
	status  error         // its exit status; read only after exited is closed
	// expected is set once an exit is no surprise: Kill, Stop or ExpectExit was called.
	expected atomic.Bool
	paused   atomic.Bool
	// forgiven: the log check is skipped (ForgiveLog).
	forgiven atomic.Bool
}

// ForgiveLog skips the check of the process's log when the test ends: for a crash the test has
// recognised as a known one of a binary it does not build from this tree (an older release).
func (p *Proc) ForgiveLog() { p.forgiven.Store(true) }

// Start starts bin with args, appending its stdout and stderr to logPath (created, with its
// directory, if missing) after a line that says when it started; a line with its exit status
// follows when it exits. On Linux the child is killed if this process dies.
func Start(name, logPath, bin string, args ...string) (*Proc, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "=== start %s at %s: %s %s\n", name, time.Now().Format(time.RFC3339Nano),
		filepath.Base(bin), strings.Join(args, " "))
	p := &Proc{name: name, logPath: logPath, cmd: exec.Command(bin, args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = lf, lf
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		p.status = p.cmd.Wait()
		fmt.Fprintf(lf, "=== %s exited: %v\n", name, p.status)
		lf.Close()
		close(p.exited)
	}()
	return p, nil
}

var logSeq atomic.Int64

// Launch starts bin with args for the test, its log a fresh file under tb.TempDir(). When the
// test ends the process is stopped (Stop), which fails the test if it exited on its own
// unexpectedly or would not stop; its log is checked (CheckLog), and printed if the test failed.
func Launch(tb testing.TB, name, bin string, args ...string) (*Proc, error) {
	tb.Helper()
	logPath := filepath.Join(tb.TempDir(), fmt.Sprintf("%s-%d.log", name, logSeq.Add(1)))
	p, err := Start(name, logPath, bin, args...)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() {
		if err := p.Stop(StopGrace); err != nil {
			tb.Errorf("%s: %v", name, err)
		}
		if err := p.CheckLog(); err != nil {
			tb.Error(err)
		}
		if tb.Failed() {
			text := p.Log()
			if len(text) > logTail {
				text = "...\n" + text[len(text)-logTail:]
			}
			tb.Logf("%s log (%s):\n%s", name, logPath, text)
		}
	})
	return p, nil
}

// Name returns the name the process was started with.
func (p *Proc) Name() string { return p.name }

// LogPath returns the path of the process's log.
func (p *Proc) LogPath() string { return p.logPath }

// Pid returns the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitStatus returns what the process's exit reported (nil for status 0), or an error saying it
// still runs.
func (p *Proc) ExitStatus() error {
	if p.Running() {
		return fmt.Errorf("%s is still running", p.name)
	}
	return p.status
}

// WaitExit waits up to timeout for the process to exit on its own.
func (p *Proc) WaitExit(timeout time.Duration) error {
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("%s still running after %v", p.name, timeout)
	}
}

// ExpectExit says the process is about to exit on its own (it was removed from its cluster,
// say): that exit is not a failure.
func (p *Proc) ExpectExit() { p.expected.Store(true) }

// Signal sends sig to the process; it fails if the process has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return fmt.Errorf("%s: %v: already exited: %v", p.name, sig, p.status)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.name, sig, err)
	}
	return nil
}

// Kill kills the process with SIGKILL (kill -9) and waits for it to be gone.
func (p *Proc) Kill() error {
	p.expected.Store(true)
	if err := p.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	p.paused.Store(false)
	select {
	case <-p.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("%s: still running %v after SIGKILL", p.name, killWait)
	}
}

// Pause stops the process (SIGSTOP). A paused process keeps its sockets: its peers and clients
// see a process that stopped answering, not one that went away.
func (p *Proc) Pause() error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	p.paused.Store(true)
	return nil
}

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() error {
	if err := p.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	p.paused.Store(false)
	return nil
}

// Paused reports whether Pause was called and Resume not since.
func (p *Proc) Paused() bool { return p.paused.Load() }

// Stop stops the process cleanly: SIGTERM (and SIGCONT, since a paused process acts on SIGTERM
// only once it runs again), then up to grace for it to exit; one that does not is ended by Quit.
// Stop is idempotent. It returns nil for a process already killed or stopped, an error wrapping
// ErrExitedEarly for one that exited on its own unexpectedly, one wrapping ErrWouldNotStop for
// one that had to be killed, and the exit status of an exit after SIGTERM that was not clean.
func (p *Proc) Stop(grace time.Duration) error {
	wasExpected := p.expected.Swap(true)
	if !p.Running() {
		if !wasExpected {
			return fmt.Errorf("%w: %v", ErrExitedEarly, p.status)
		}
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM: %w", err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused.Store(false)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Quit()
		return fmt.Errorf("%w within %v of SIGTERM; killed (goroutine dump in %s)", ErrWouldNotStop, grace, p.logPath)
	}
	if p.status != nil {
		return fmt.Errorf("exit after SIGTERM: %w", p.status)
	}
	return nil
}

// Quit ends a process that hangs: SIGQUIT (and SIGCONT, should it be paused), so a Go process
// dumps its goroutines into its log as it exits, then SIGKILL if it still runs a few seconds
// later. It returns once the process is gone.
func (p *Proc) Quit() {
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	p.paused.Store(false)
	select {
	case <-p.exited:
	case <-time.After(dumpWait):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
}

// Log returns everything the process has written so far.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return string(b)
}

// CheckLog returns an error naming each of LogMarkers the log contains.
func (p *Proc) CheckLog() error {
	if p.forgiven.Load() {
		return nil
	}
	text := p.Log()
	var found []string
	for _, bad := range LogMarkers {
		if strings.Contains(text, bad) {
			found = append(found, fmt.Sprintf("%q", bad))
		}
	}
	if len(found) > 0 {
		return fmt.Errorf("%s: log contains %s", p.name, strings.Join(found, ", "))
	}
	return nil
}
