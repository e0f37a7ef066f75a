package client

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watcher hears lost-lock notices: one pub/sub connection per Client, subscribed to the
// channel of every key the client holds or is asking for, on a node of its own choosing.
// A notice ends the handle whose token it names. When the connection drops, notices may have
// been missed: once subscribed again elsewhere it asks VALIDATE for every handle.
//
// A channel stays subscribed for idleFor after its last listener left (up to maxIdle such
// channels), so that a key locked again and again costs no SUBSCRIBE and UNSUBSCRIBE each
// time; the notices it brings meanwhile name no handle and are dropped.
type watcher struct {
	c *Client

	// subMu orders the SUBSCRIBE and UNSUBSCRIBE writes as the reference counts changed: a
	// key released and taken again at once must end subscribed. It is held across the write,
	// which mu never is; take subMu before mu.
	subMu sync.Mutex

	mu struct {
		sync.Mutex
		refs   map[string]int                  // channel → acquisitions and handles that listen to it
		idle   map[string]time.Time            // channel → when its last listener left; still subscribed
		locks  map[string]map[uint64]*watchKey // channel → token → the handle holding it
		ps     *redis.PubSub                   // the connection in use; nil between two
		closed bool
	}
}

// watchKey is one key of a handle: what a notice on its channel names.
type watchKey struct {
	l   *Lock
	key string
}

func newWatcher(c *Client) *watcher {
	w := &watcher{c: c}
	w.mu.refs = map[string]int{}
	w.mu.idle = map[string]time.Time{}
	w.mu.locks = map[string]map[uint64]*watchKey{}
	return w
}

const (
	// keepAlive is how long the subscriber waits for a message before it PINGs the node,
	// and, with no answer either, takes the connection for dead.
	keepAlive = 5 * time.Second
	// idleFor is how long a channel stays subscribed with no listener; maxIdle bounds how
	// many do: past it they are all unsubscribed at once.
	idleFor = time.Second
	maxIdle = 1024
)

// run keeps a subscription to every channel in use on one node after another until ctx ends.
func (w *watcher) run(ctx context.Context) {
	node := 0
	for first := true; ctx.Err() == nil; first = false {
		w.mu.Lock()
		if w.mu.closed {
			w.mu.Unlock()
			return
		}
		ps := w.c.nodes[node].Subscribe(ctx)
		w.mu.ps = ps
		w.mu.Unlock()
		// Every channel in use now; one subscribed meanwhile by subscribe is harmlessly
		// subscribed twice. The idle ones stay behind with the old connection.
		w.subMu.Lock()
		w.mu.Lock()
		clear(w.mu.idle)
		channels := make([]string, 0, len(w.mu.refs))
		for ch := range w.mu.refs {
			channels = append(channels, ch)
		}
		w.mu.Unlock()
		var err error
		if len(channels) > 0 {
			err = ps.Subscribe(ctx, channels...)
		}
		w.subMu.Unlock()
		if err == nil {
			if !first {
				w.validateAll(ctx)
			}
			// It returns when the connection fails: then the next node, and a check of
			// every handle.
			_ = w.receive(ctx, ps)
		}
		w.mu.Lock()
		w.mu.ps = nil
		w.mu.Unlock()
		ps.Close()
		if ctx.Err() != nil {
			return
		}
		node = (node + 1) % len(w.c.nodes)
		if node == 0 {
			// Every node tried: pause as call does before the next round.
			if sleep(ctx, backoff(len(w.c.nodes), len(w.c.nodes))) != nil {
				return
			}
		}
	}
}

// receive reads messages until the connection fails, and unsubscribes idle channels as they
// age.
func (w *watcher) receive(ctx context.Context, ps *redis.PubSub) error {
	heard, swept := time.Now(), time.Now()
	var pinged time.Time // when a PING went out that nothing was heard after yet
	for {
		msg, err := ps.ReceiveTimeout(ctx, idleFor)
		var ne net.Error
		switch {
		case err == nil:
			heard, pinged = time.Now(), time.Time{}
			if m, ok := msg.(*redis.Message); ok {
				w.deliver(m.Channel, m.Payload)
			}
		case !errors.As(err, &ne) || !ne.Timeout():
			return err
		case !pinged.IsZero() && time.Since(pinged) >= keepAlive:
			return err // no answer to a PING: the connection is dead
		case pinged.IsZero() && time.Since(heard) >= keepAlive:
			// Quiet: ask the node for a sign of life, which must come within keepAlive.
			if err := ps.Ping(ctx); err != nil {
				return err
			}
			pinged = time.Now()
		}
		if time.Since(swept) >= idleFor {
			w.sweep(ps, time.Now().Add(-idleFor))
			swept = time.Now()
		}
	}
}

// sweep unsubscribes the channels idle since before cutoff (every idle one when cutoff is
// zero).
func (w *watcher) sweep(ps *redis.PubSub, cutoff time.Time) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	var stale []string
	w.mu.Lock()
	for ch, since := range w.mu.idle {
		if cutoff.IsZero() || since.Before(cutoff) {
			stale = append(stale, ch)
			delete(w.mu.idle, ch)
		}
	}
	w.mu.Unlock()
	if len(stale) > 0 {
		// An error here is the connection's: run notices it, and subscribes afresh.
		_ = ps.Unsubscribe(context.Background(), stale...)
	}
}

// deliver ends the handle whose token a notice names: "lost <token> <reason>" or
// "released <token>" (a release by someone else: the handle's own Unlock ended it first).
func (w *watcher) deliver(channel, payload string) {
	fields := strings.Fields(payload)
	if len(fields) < 2 {
		return
	}
	token, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return
	}
	reason := fields[0]
	switch {
	case reason == "lost" && len(fields) >= 3:
		reason = fields[2]
	case reason == "released":
	default:
		return
	}
	w.mu.Lock()
	wk := w.mu.locks[channel][token]
	w.mu.Unlock()
	if wk != nil {
		wk.l.end(&LostError{Key: wk.key, Token: token, Reason: reason})
	}
}

// validateAll asks VALIDATE for every key of every handle and ends those no longer held:
// what the notices missed while the subscriber had no connection.
func (w *watcher) validateAll(ctx context.Context) {
	w.mu.Lock()
	var keys []*watchKey
	var tokens []uint64
	for _, byToken := range w.mu.locks {
		for token, wk := range byToken {
			keys, tokens = append(keys, wk), append(tokens, token)
		}
	}
	w.mu.Unlock()
	for i, wk := range keys {
		if wk.l.Err() != nil {
			continue
		}
		vctx, cancel := context.WithTimeout(ctx, w.c.opts.ReadTimeout)
		held, err := w.c.Validate(vctx, wk.key, tokens[i])
		cancel()
		if err == nil && !held {
			wk.l.end(&LostError{Key: wk.key, Token: tokens[i], Reason: "not held"})
		}
	}
}

// subscribe adds a listener to each channel, subscribing those that had none and were not
// idle.
func (w *watcher) subscribe(channels []string) {
	w.subMu.Lock()
	defer w.subMu.Unlock()
	var fresh []string
	w.mu.Lock()
	for _, ch := range channels {
		if w.mu.refs[ch]++; w.mu.refs[ch] > 1 {
			continue
		}
		if _, ok := w.mu.idle[ch]; ok {
			delete(w.mu.idle, ch)
			continue
		}
		fresh = append(fresh, ch)
	}
	ps := w.mu.ps
	w.mu.Unlock()
	if ps != nil && len(fresh) > 0 {
		// An error here is the connection's: run notices it, and subscribes again.
		_ = ps.Subscribe(context.Background(), fresh...)
	}
}

// unsubscribe removes a listener from each channel; one left with none turns idle. Past
// maxIdle idle channels, they are all unsubscribed.
func (w *watcher) unsubscribe(channels []string) {
	w.mu.Lock()
	now := time.Now()
	for _, ch := range channels {
		if w.mu.refs[ch]--; w.mu.refs[ch] <= 0 {
			delete(w.mu.refs, ch)
			w.mu.idle[ch] = now
		}
	}
	full := len(w.mu.idle) > maxIdle
	ps := w.mu.ps
	w.mu.Unlock()
	if full && ps != nil {
		w.sweep(ps, time.Time{})
	}
}

// register maps each of the handle's tokens to it; the acquisition's listeners become the
// handle's.
func (w *watcher) register(l *Lock) {
	chans := w.c.channels(l.keys)
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, ch := range chans {
		if w.mu.locks[ch] == nil {
			w.mu.locks[ch] = map[uint64]*watchKey{}
		}
		w.mu.locks[ch][l.tokens[i]] = &watchKey{l: l, key: l.keys[i]}
	}
}

// unregister forgets the handle and drops its listeners.
func (w *watcher) unregister(l *Lock) {
	chans := w.c.channels(l.keys)
	w.mu.Lock()
	for i, ch := range chans {
		delete(w.mu.locks[ch], l.tokens[i])
		if len(w.mu.locks[ch]) == 0 {
			delete(w.mu.locks, ch)
		}
	}
	w.mu.Unlock()
	w.unsubscribe(chans)
}

// close ends the subscriber: its read returns once the connection is closed.
func (w *watcher) close() {
	w.mu.Lock()
	w.mu.closed = true
	ps := w.mu.ps
	w.mu.Unlock()
	if ps != nil {
		ps.Close()
	}
}
