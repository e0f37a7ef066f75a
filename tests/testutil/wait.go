// Package testutil is the support every test of the main module shares: one way to wait for a
// condition (WaitFor, Poll), one way to run a child process (Launch, Start: a log file per
// process, signals, a bounded stop, the log checked for panics and data races), and the
// redis-server the comparison tests run against (StartRedis).
//
// It is test support, not production: only tests and the tests/ harnesses import it, and
// tests/layout_test.go checks that no package under cmd/ depends on anything under tests/.
package testutil

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often WaitFor and Poll try their condition.
const PollInterval = 10 * time.Millisecond

// WaitFor calls cond every PollInterval until it returns nil, and fails tb with cond's last
// error once timeout has passed, or at once if it wraps ErrGiveUp (nats-server's checkFor).
func WaitFor(tb testing.TB, timeout time.Duration, cond func() error) {
	tb.Helper()
	if err := Poll(timeout, PollInterval, cond); err != nil {
		tb.Fatal(err)
	}
}

// ErrGiveUp, wrapped in the error a condition returns, ends the wait at once: what it waits
// for can no longer happen (the process it polls has exited).
var ErrGiveUp = errors.New("giving up")

// Poll calls cond every interval until it returns nil, and returns cond's last error once
// timeout has passed, or at once if it wraps ErrGiveUp: WaitFor for code that reports errors
// rather than failing a test.
func Poll(timeout, interval time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrGiveUp) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still failing after %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Cond adapts a condition that only says yes or no for WaitFor and Poll; the error names what
// was awaited: WaitFor(t, time.Second, Cond("the leader", func() bool { ... })).
func Cond(what string, ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return fmt.Errorf("waiting for %s", what)
	}
}
