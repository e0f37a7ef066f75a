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
//
// A notice can come before its lock has a handle: between the grant and register. So the
// notices on a channel that acquisitions listen to are kept (the newest maxEarly) for register
// to find its token among; and a lock asked for before its channel's subscription was
// confirmed on the connection in use, or whose early notices overflowed, is checked with
// VALIDATE once the subscriber hears the channel (Lock.checkMissed).
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
		// epoch counts the connections the subscriber has used; confirmed is, per channel,
		// the epoch whose connection confirmed its subscription.
		epoch     uint64
		confirmed map[string]uint64
		// early keeps, per channel listened to, its newest notices that named no handle;
		// dropped counts those that fell off the end.
		early   map[string][]earlyNotice
		dropped map[string]uint64
	}
}

// earlyNotice is a notice that came before any handle of its token.
type earlyNotice struct {
	token  uint64
	reason string
}

// maxEarly bounds the early notices kept per channel.
const maxEarly = 64

// noticeMark is what the subscriber had heard on some channels at one moment (mark).
type noticeMark struct {
	epoch     uint64
	confirmed bool     // every channel's subscription confirmed on the connection of epoch
	dropped   []uint64 // per channel, early notices dropped so far
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
	w.mu.confirmed = map[string]uint64{}
	w.mu.early = map[string][]earlyNotice{}
	w.mu.dropped = map[string]uint64{}
	return w
}

// mark records what the subscriber has heard on chans so far.
func (w *watcher) mark(chans []string) noticeMark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := noticeMark{epoch: w.mu.epoch, confirmed: w.mu.ps != nil, dropped: make([]uint64, len(chans))}
	for i, ch := range chans {
		m.confirmed = m.confirmed && w.mu.confirmed[ch] == w.mu.epoch
		m.dropped[i] = w.mu.dropped[ch]
	}
	return m
}

// confirmed reports whether every channel of chans is subscribed on the connection in use.
func (w *watcher) confirmed(chans []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.ps == nil {
		return false
	}
	for _, ch := range chans {
		if w.mu.confirmed[ch] != w.mu.epoch {
			return false
		}
	}
	return true
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
		w.mu.epoch++
		epoch := w.mu.epoch
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
			_ = w.receive(ctx, ps, epoch)
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
func (w *watcher) receive(ctx context.Context, ps *redis.PubSub, epoch uint64) error {
	heard, swept := time.Now(), time.Now()
	var pinged time.Time // when a PING went out that nothing was heard after yet
	for {
		msg, err := ps.ReceiveTimeout(ctx, idleFor)
		var ne net.Error
		switch {
		case err == nil:
			heard, pinged = time.Now(), time.Time{}
			switch m := msg.(type) {
			case *redis.Message:
				w.deliver(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					w.mu.Lock()
					w.mu.confirmed[m.Channel] = epoch
					w.mu.Unlock()
				}
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
		w.mu.Lock()
		for _, ch := range stale {
			delete(w.mu.confirmed, ch)
		}
		w.mu.Unlock()
		if err := ps.Unsubscribe(context.Background(), stale...); err != nil {
			// go-redis may have reconnected and subscribed again by itself, with notices
			// lost in between and nothing to say so: close the connection, so that run
			// moves on and checks every handle.
			ps.Close()
		}
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
	if wk == nil && w.mu.refs[channel] > 0 {
		// Perhaps a lock being acquired, whose handle register has not made yet.
		early := append(w.mu.early[channel], earlyNotice{token, reason})
		if len(early) > maxEarly {
			early = early[1:]
			w.mu.dropped[channel]++
		}
		w.mu.early[channel] = early
	}
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
		if err := ps.Subscribe(context.Background(), fresh...); err != nil {
			ps.Close() // as in sweep: run moves on, subscribes every channel, checks every handle
		}
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
			delete(w.mu.early, ch)
			delete(w.mu.dropped, ch)
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
// handle's. A notice for one of its tokens that came before (early) ends it at once. check
// reports whether a notice may have gone unheard since the lock was asked for (l.mark): its
// subscription was not confirmed then, the subscriber has changed connections since, or early
// notices were dropped.
func (w *watcher) register(l *Lock) (check bool) {
	chans := w.c.channels(l.keys)
	var lost *LostError
	w.mu.Lock()
	check = !l.mark.confirmed || l.mark.epoch != w.mu.epoch
	for i, ch := range chans {
		if w.mu.locks[ch] == nil {
			w.mu.locks[ch] = map[uint64]*watchKey{}
		}
		w.mu.locks[ch][l.tokens[i]] = &watchKey{l: l, key: l.keys[i]}
		for _, n := range w.mu.early[ch] {
			if n.token == l.tokens[i] && lost == nil {
				lost = &LostError{Key: l.keys[i], Token: n.token, Reason: n.reason}
			}
		}
		if i < len(l.mark.dropped) && w.mu.dropped[ch] != l.mark.dropped[i] {
			check = true
		}
	}
	w.mu.Unlock()
	if lost != nil {
		l.end(lost)
	}
	return check
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
