package server

import "sync/atomic"

// workers runs pipelined commands (pipeline.go) on goroutines that outlive them. A new
// goroutine's stack starts small and is copied, twice, as a command's evaluation reaches its
// full depth, for every pipelined command (runtime.copystack in a pipelining node's CPU
// profile). A worker keeps its grown stack for the next command.
type workers struct {
	s *Server
	// tasks is unbuffered: a send succeeds only when a worker is waiting for one.
	tasks chan func()
	// idle counts the workers waiting for a task; past maxIdleWorkers a worker ends instead.
	idle atomic.Int32
	// started counts the workers started.
	started atomic.Int64
}

// maxIdleWorkers bounds the workers kept waiting: the commands one burst had in flight at
// once, up to this many, find a worker the next time (a worker's stack is a few KiB).
const maxIdleWorkers = 256

func newWorkers(s *Server) *workers { return &workers{s: s, tasks: make(chan func())} }

// run runs task on a waiting worker, or on a new one.
func (w *workers) run(task func()) {
	select {
	case w.tasks <- task:
		return
	default:
	}
	w.s.wg.Add(1) // Close waits for the workers, after their connections
	w.started.Add(1)
	go w.work(task)
}

// work runs task, then the tasks it is given, until the server closes or enough others wait.
func (w *workers) work(task func()) {
	defer w.s.wg.Done()
	for {
		task()
		if w.idle.Add(1) > maxIdleWorkers {
			w.idle.Add(-1)
			return
		}
		select {
		case task = <-w.tasks:
			w.idle.Add(-1)
		case <-w.s.ctx.Done():
			w.idle.Add(-1)
			return
		}
	}
}
