package server

import (
	"net"
	"sync"
	"time"
)

// leaderCheckEvery is how often the forward watch looks at the leader even when the node has
// not signalled a change: a paused or partitioned leader would otherwise hold a forwarded
// request for the whole ForwardTimeout.
const leaderCheckEvery = 200 * time.Millisecond

// forwardWatch cuts forwarded requests short (their upstream connection's deadline moves to
// now) as soon as this node sees a leader other than the one each waits on. One goroutine per
// server does it, woken by the node's leader changes and every leaderCheckEvery; a request
// registers while it waits (a timer, a closure and a lock of its own per forwarded request
// before).
type forwardWatch struct {
	mu       sync.Mutex
	inflight map[forwardKey]int // how many requests wait on the upstream for that leader
}

type forwardKey struct {
	nc net.Conn
	id string // the leader the requests were sent to
}

// watch registers a request that waits on nc for leader id's reply; unwatch ends it.
func (w *forwardWatch) watch(nc net.Conn, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight == nil {
		w.inflight = make(map[forwardKey]int)
	}
	w.inflight[forwardKey{nc, id}]++
}

func (w *forwardWatch) unwatch(nc net.Conn, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := forwardKey{nc, id}
	if w.inflight[k]--; w.inflight[k] <= 0 {
		delete(w.inflight, k)
	}
}

// cut moves the deadline of every upstream waiting on a leader other than leader to now.
func (w *forwardWatch) cut(leader string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.inflight {
		if k.id != leader {
			k.nc.SetDeadline(time.Now())
		}
	}
}

// watchForwards runs the forward watch until the server closes.
func (s *Server) watchForwards() {
	defer s.wg.Done()
	tick := time.NewTicker(leaderCheckEvery)
	defer tick.Stop()
	for {
		changed := s.node.LeaderChanged() // taken before the check: a change racing it is not missed
		id, _ := s.node.LeaderClient()
		s.forwards.cut(id)
		select {
		case <-s.ctx.Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}
