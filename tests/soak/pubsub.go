package soak

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// pubsubTracker follows every published sequence number to every subscription. Each channel
// has one publisher, which publishes 0, 1, 2 ... and notes those acknowledged. A subscription
// session is one channel on one subscriber connection, from the SUBSCRIBE confirmation to the
// connection's end; go-redis resubscribes on a new connection, which starts a new session.
// When a session is confirmed it notes the highest number acknowledged so far, or rather sent
// (its base: one PUBLISH at most is in flight on a channel, and a number sent before the
// confirmation may have been delivered by the subscriber's node before the SUBSCRIBE though
// acknowledged after it): every number acknowledged above it is due on that session while it
// stays connected. A session's
// loss is the due numbers it did not deliver up to the last it delivered (for a session that
// closed: what was in flight when its connection ended is not a loss) or, for a session still
// open when the run ends, up to the last acknowledged.
type pubsubTracker struct {
	channels []string
	mu       struct {
		sync.Mutex
		acked    []bitmap // per channel, by sequence number
		top      []int64  // per channel, the highest acknowledged; -1 before one
		sent     []int64  // per channel, the highest whose PUBLISH was sent; -1 before one
		sessions []*session
		received map[string]int64 // by subscriber (its node)
	}
}

// session is one channel's subscription on one connection. Its deliveries are a bitmap of the
// numbers above its base: one bit a message, not a map entry.
type session struct {
	node    string // whose subscriber
	channel int
	base    int64  // the highest number sent when it was confirmed
	last    int64  // the highest delivered; base before one
	got     bitmap // bit seq-base-1 for each seq above base delivered
	open    bool
}

// bitmap is a set of small non-negative integers.
type bitmap []uint64

func (b *bitmap) set(i int64) {
	for int64(len(*b)) <= i/64 {
		*b = append(*b, 0)
	}
	(*b)[i/64] |= 1 << (i % 64)
}

func (b bitmap) has(i int64) bool {
	return i >= 0 && i/64 < int64(len(b)) && b[i/64]&(1<<(i%64)) != 0
}

func newPubsubTracker(n int) *pubsubTracker {
	t := &pubsubTracker{}
	for i := range n {
		t.channels = append(t.channels, "soak:channel:"+strconv.Itoa(i))
	}
	t.mu.acked = make([]bitmap, n)
	t.mu.top = slices.Repeat([]int64{-1}, n)
	t.mu.sent = slices.Repeat([]int64{-1}, n)
	t.mu.received = map[string]int64{}
	return t
}

// sending notes that the PUBLISH of seq on channel ch is about to be sent.
func (t *pubsubTracker) sending(ch int, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.sent[ch] = max(t.mu.sent[ch], seq)
}

// acked notes that the PUBLISH of seq on channel ch was acknowledged.
func (t *pubsubTracker) acked(ch int, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.acked[ch].set(seq)
	t.mu.top[ch] = max(t.mu.top[ch], seq)
}

// confirmed starts a session of node's subscriber on ch, confirmed now: every number sent from
// now on and acknowledged is due on it.
func (t *pubsubTracker) confirmed(node string, ch int) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.newSessionLocked(node, ch, max(t.mu.top[ch], t.mu.sent[ch]))
}

func (t *pubsubTracker) newSessionLocked(node string, ch int, base int64) *session {
	s := &session{node: node, channel: ch, base: base, last: base, open: true}
	t.mu.sessions = append(t.mu.sessions, s)
	return s
}

func (t *pubsubTracker) deliver(s *session, seq int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.received[s.node]++
	if seq > s.base {
		s.got.set(seq - s.base - 1)
		s.last = max(s.last, seq)
	}
}

func (t *pubsubTracker) close(s *session) {
	t.mu.Lock()
	s.open = false
	t.mu.Unlock()
}

// caughtUp reports whether every open session has delivered the last number acknowledged on
// its channel.
func (t *pubsubTracker) caughtUp() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.mu.sessions {
		if s.open && s.last < t.mu.top[s.channel] {
			return false
		}
	}
	return true
}

// figures counts what was published, received and lost; call it once publishing has stopped
// and the subscribers had time to receive the last messages.
func (t *pubsubTracker) figures() PubSubFigures {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := PubSubFigures{ReceivedBy: maps.Clone(t.mu.received)}
	for _, n := range t.mu.received {
		f.Received += n
	}
	for ch, acked := range t.mu.acked {
		for seq := range t.mu.top[ch] + 1 {
			if acked.has(seq) {
				f.Published++
			}
		}
	}
	for _, s := range t.mu.sessions {
		acked := t.mu.acked[s.channel]
		upto := s.last
		if s.open {
			upto = t.mu.top[s.channel]
		}
		for seq := s.base + 1; seq <= upto; seq++ {
			if acked.has(seq) && !s.got.has(seq-s.base-1) {
				f.Lost++
			}
		}
	}
	return f
}

// subscribe listens on every channel through rdb, node's subscriber, until ctx ends, following
// sessions. When ctx ends the sessions it has open stay open: they were connected to the end.
func (t *pubsubTracker) subscribe(ctx context.Context, rdb *redis.Client, node string) {
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
				cur[ch] = t.confirmed(node, ch)
			}
		case *redis.Message:
			ch, ok := index[m.Channel]
			seq, err := strconv.ParseInt(m.Payload, 10, 64)
			if !ok || err != nil {
				continue
			}
			s := cur[ch]
			if s == nil {
				// A message before its confirmation: due from this one on.
				t.mu.Lock()
				s = t.newSessionLocked(node, ch, seq-1)
				t.mu.Unlock()
				cur[ch] = s
			}
			t.deliver(s, seq)
		}
	}
}
