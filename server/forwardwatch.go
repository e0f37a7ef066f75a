package server

import (
	"net"
	"slices"
	"sync"
	"time"
)

// leaderCheckEvery is how often the forward watch looks at the leader even when the node has
// not signalled a change: a paused or partitioned leader would otherwise hold a forwarded
// request for the whole ForwardTimeout.
const leaderCheckEvery = 200 * time.Millisecond

// forwardWatch cuts forwarded requests short (their upstream connection's deadline moves to
// now) when this node sees a leader other than the one each waits on. One goroutine per server
// looks every leaderCheckEvery; a request registers while it waits (a timer, a closure and a
// lock of its own per forwarded request before).
//
// A request is cut only once it has waited leaderCheckEvery, and only at a check, as when each
// had its own timer: a reply the old leader is about to send (a RAFT TRANSFER's OK, a write it
// committed just before it stepped down) must not be lost to a change this node saw a moment
// before the reply came. (Cutting at once on the node's leader-change signal lost a RAFT
// TRANSFER's OK asked through a follower every time.)
type forwardWatch struct {
	mu       sync.Mutex
	inflight map[forwardKey]forwardWait
}

// forwardWait is how many requests wait on one upstream for one leader, and since when the
// oldest of them (a pipeline's requests share the upstream: a cut ends them all).
type forwardWait struct {
	n     int
	since time.Time
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
		w.inflight = make(map[forwardKey]forwardWait)
	}
	k := forwardKey{nc, id}
	fw, ok := w.inflight[k]
	if !ok {
		fw.since = time.Now()
	}
	fw.n++
	w.inflight[k] = fw
}

func (w *forwardWatch) unwatch(nc net.Conn, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := forwardKey{nc, id}
	fw := w.inflight[k]
	if fw.n--; fw.n <= 0 {
		delete(w.inflight, k)
		return
	}
	w.inflight[k] = fw
}

// cut moves the deadline of every upstream that has waited leaderCheckEvery on a node that
// leads no group now (leaders: the leader of each group) to now.
func (w *forwardWatch) cut(leaders []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	for k, fw := range w.inflight {
		if !slices.Contains(leaders, k.id) && now.Sub(fw.since) >= leaderCheckEvery {
			k.nc.SetDeadline(now)
		}
	}
}

// watchForwards runs the forward watch until the server closes; on the same tick it closes the
// client connections once this node's disk failed (dropClientsOnFailedDisk).
func (s *Server) watchForwards() {
	defer s.wg.Done()
	tick := time.NewTicker(leaderCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-tick.C:
		}
		leaders := make([]string, len(s.groups))
		for g, rep := range s.groups {
			leaders[g] = rep.Leadership().ID
		}
		s.forwards.cut(leaders)
		s.dropClientsOnFailedDisk()
	}
}
