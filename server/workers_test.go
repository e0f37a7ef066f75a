package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// A worker runs the next task once it is free, instead of a new goroutine; at most
// maxIdleWorkers wait; and every worker ends when the server closes.
func TestWorkersReuse(t *testing.T) {
	s := &Server{}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	w := newWorkers(s)
	waitIdle := func(n int32) {
		t.Helper()
		testutil.WaitFor(t, 5*time.Second, func() error {
			if got := w.idle.Load(); got != n {
				return fmt.Errorf("%d workers idle, want %d", got, n)
			}
			return nil
		})
	}
	// A worker counts itself idle just before it waits for the next task, so a task run in that
	// instant finds no one waiting and starts another worker: a new worker per task is the
	// failure, not an occasional second one (TestWorkersReuse failed so under -race on a busy
	// machine when it wanted exactly one).
	for range 10 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
		waitIdle(int32(w.started.Load()))
	}
	if got := w.started.Load(); got > 5 {
		t.Errorf("%d workers started for 10 tasks one after the other; want them reused", got)
	}
	// As many tasks at once as may wait, and some more: the extra workers end once free.
	var running, release sync.WaitGroup
	release.Add(1)
	const burst = maxIdleWorkers + 10
	running.Add(burst)
	for range burst {
		w.run(func() {
			running.Done()
			release.Wait()
		})
	}
	running.Wait()
	release.Done()
	waitIdle(maxIdleWorkers)
	s.cancel()
	s.wg.Wait()
	if got := w.idle.Load(); got != 0 {
		t.Errorf("%d workers idle after close, want 0", got)
	}
}
