package soak

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubTracker follows every published sequence number to every subscription. Each channel
// has one publisher, which publishes 0, 1, 2 ... and notes those acknowledged. A subscription
// session is one channel on one subscriber connection, from the SUBSCRIBE confirmation to the
// connection's end; go-redis resubscribes on a new connection, which starts a new session.
// A session's loss is the acknowledged numbers it did not deliver between the first it
// delivered and the last (or, for a session still open when the run ends, the last
// acknowledged): what it missed while connected.
type pubsubTracker struct {
	channels []string
	received atomic.Int64
	mu       struct {
		sync.Mutex
		acked    [][]bool // per channel, by sequence number
		sessions []*session
	}
}

// session is one channel's subscription on one connection.
type session struct {
	channel int
	first   int64 // the first number delivered; -1 before one
	last    int64 // the highest delivered
	got     map[int64]bool
	open    bool
}

func newPubsubTracker(n int) *pubsubTracker {
	t := &pubsubTracker{}
	for i := range n {
		t.channels = append(t.channels, "soak:channel:"+strconv.Itoa(i))
	}
	t.mu.acked = make([][]bool, n)
	return t
}

// acked notes that the PUBLISH of seq on channel ch was acknowledged.
func (t *pubsubTracker) acked(ch int, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for int64(len(t.mu.acked[ch])) <= seq {
		t.mu.acked[ch] = append(t.mu.acked[ch], false)
	}
	t.mu.acked[ch][seq] = true
}

func (t *pubsubTracker) newSession(ch int) *session {
	s := &session{channel: ch, first: -1, last: -1, got: map[int64]bool{}, open: true}
	t.mu.Lock()
	t.mu.sessions = append(t.mu.sessions, s)
	t.mu.Unlock()
	return s
}

func (t *pubsubTracker) deliver(s *session, seq int64) {
	t.received.Add(1)
	t.mu.Lock()
	defer t.mu.Unlock()
	if s.first < 0 || seq < s.first {
		s.first = seq
	}
	s.last = max(s.last, seq)
	s.got[seq] = true
}

func (t *pubsubTracker) close(s *session) {
	t.mu.Lock()
	s.open = false
	t.mu.Unlock()
}

// figures counts what was published and what the sessions lost; call it once publishing has
// stopped and the subscribers had time to receive the last messages.
func (t *pubsubTracker) figures() PubSubFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := PubSubFigures{Received: t.received.Load()}
	for _, acked := range t.mu.acked {
		for _, a := range acked {
			if a {
				f.Published++
			}
		}
	}
	for _, s := range t.mu.sessions {
		if s.first < 0 {
			continue
		}
		acked := t.mu.acked[s.channel]
		upto := s.last
		if s.open {
			upto = int64(len(acked)) - 1
		}
		for seq := s.first; seq <= upto && seq < int64(len(acked)); seq++ {
			if acked[seq] && !s.got[seq] {
				f.Lost++
			}
		}
	}
	return f
}

// subscribe listens on every channel through rdb until ctx ends, following sessions. When ctx
// ends the sessions it has open stay open: they were connected to the end.
func (t *pubsubTracker) subscribe(ctx context.Context, rdb *redis.Client) {
	ps := rdb.Subscribe(ctx, t.channels...)
	defer ps.Close()
	index := map[string]int{}
	for i, c := range t.channels {
		index[c] = i
	}
	cur := map[int]*session{}
	for ctx.Err() == nil {
		msg, err := ps.ReceiveTimeout(ctx, time.Second)
		var ne net.Error
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case errors.As(err, &ne) && ne.Timeout():
			continue // no message this second; the connection stays
		case err != nil:
			// The connection ended (its node restarted): go-redis dials again and
			// resubscribes on the next Receive, which starts new sessions.
			for _, s := range cur {
				t.close(s)
			}
			clear(cur)
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if ch, ok := index[m.Channel]; ok && m.Kind == "subscribe" {
				if s := cur[ch]; s != nil {
					t.close(s)
				}
				cur[ch] = t.newSession(ch)
			}
		case *redis.Message:
			ch, ok := index[m.Channel]
			seq, err := strconv.ParseInt(m.Payload, 10, 64)
			if !ok || err != nil {
				continue
			}
			s := cur[ch]
			if s == nil {
				s = t.newSession(ch)
				cur[ch] = s
			}
			t.deliver(s, seq)
		}
	}
}
