package powerloss

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// The client load and what it was told. Each client owns its keys and runs LOCK (a grant if
// absent, with an owner unique to the attempt) and UNLOCK (a release matched by token) on them
// through whichever node leads, one request at a time. A request is acknowledged when it
// returned success and the leader that answered still had power afterwards (the fence): an
// answer from a node after its cut would come from a filesystem the cut discarded.

type opKind int

const (
	opLock opKind = iota
	opUnlock
)

type outcome int

const (
	unknown  outcome = iota // no acknowledgement: it may apply, before the key's next request, or never
	granted                 // LOCK acknowledged with a token
	refused                 // LOCK acknowledged as held (says nothing durable: the view had pending entries)
	released                // UNLOCK acknowledged as released
	notFound                // UNLOCK acknowledged as not held with that token
)

type op struct {
	kind    opKind
	owner   string    // LOCK: the attempt's owner; UNLOCK: the holder it means to release
	token   fsm.Token // LOCK: the granted token; UNLOCK: the token it matches
	outcome outcome
}

// keyLog is one key's requests in the order its client made them.
type keyLog struct {
	key string
	ops []op
	// holder is who the client believes holds the key (its own grant), for the next request.
	holder      string
	holderToken fsm.Token
}

// history is one round's acknowledged grants, shared by the clients.
type history struct {
	report func(format string, args ...any)
	mu     sync.Mutex
	tokens map[fsm.Token]string // token -> owner, of every acknowledged grant
	max    fsm.Token            // the largest acknowledged token
	keys   []*keyLog
	acked  atomic.Int64
}

func newHistory(report func(format string, args ...any)) *history {
	return &history{report: report, tokens: map[fsm.Token]string{}}
}

func (h *history) floor() fsm.Token {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.max
}

// grant records an acknowledged grant of key to owner. floor is the largest token acknowledged
// before the request began: fencing tokens strictly increase, across keys and cuts.
func (h *history) grant(key, owner string, tok, floor fsm.Token) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev, ok := h.tokens[tok]; ok {
		h.report("token %d granted twice: to %s, then to %s (key %s)", tok, prev, owner, key)
	}
	if tok <= floor {
		h.report("token %d granted to %s on %s after token %d was acknowledged", tok, owner, key, floor)
	}
	h.tokens[tok] = owner
	h.max = max(h.max, tok)
}

// runClient runs requests on its keys until ctx ends.
func (c *cluster) runClient(ctx context.Context, h *history, id int, keys []*keyLog, rng *rand.Rand) {
	seq := 0
	for ctx.Err() == nil {
		l := c.readyLeader()
		if l == nil {
			time.Sleep(time.Millisecond)
			continue
		}
		k := keys[rng.IntN(len(keys))]
		floor := h.floor()
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		if k.holder != "" {
			o := op{kind: opUnlock, owner: k.holder, token: k.holderToken}
			res, err := l.rep.Exec(rctx, [][]byte{[]byte(k.key)}, func(node.View) []fsm.Command {
				return []fsm.Command{{Kind: fsm.KindRelease, Key: []byte(k.key), Match: fsm.Match{Kind: fsm.MatchToken, Token: o.token}}}
			}, nil)
			if err == nil && len(res) == 1 && l.fence.up(nil) {
				o.outcome = notFound
				if res[0].Status == fsm.StatusReleased {
					o.outcome = released
				}
				h.acked.Add(1)
			}
			k.holder = ""
			k.ops = append(k.ops, o)
		} else {
			seq++
			o := op{kind: opLock, owner: fmt.Sprintf("c%d-%d", id, seq)}
			var saw fsm.Lock
			var held bool
			res, err := l.rep.Exec(rctx, [][]byte{[]byte(k.key)}, func(v node.View) []fsm.Command {
				if saw, _, held = v.Lookup([]byte(k.key)); held {
					return nil
				}
				return []fsm.Command{{Kind: fsm.KindGrant, Key: []byte(k.key), Owner: []byte(o.owner), Match: fsm.Match{Kind: fsm.MatchAbsent}}}
			}, nil)
			switch {
			case err != nil || !l.fence.up(nil):
			case len(res) == 1 && res[0].Status == fsm.StatusGranted:
				o.outcome, o.token = granted, res[0].Token
				h.grant(k.key, o.owner, o.token, floor)
				k.holder, k.holderToken = o.owner, o.token
				h.acked.Add(1)
			default:
				o.outcome = refused
				if held && strings.HasPrefix(string(saw.Owner), fmt.Sprintf("c%d-", id)) {
					k.holder, k.holderToken = string(saw.Owner), saw.Token // ours, from a request not acknowledged
				}
			}
			k.ops = append(k.ops, o)
		}
		cancel()
	}
}

// state is one state a key may be in after its requests.
type state struct {
	held       bool
	owner      string
	token      fsm.Token
	tokenKnown bool
}

func (s state) String() string {
	switch {
	case !s.held:
		return "free"
	case s.tokenKnown:
		return fmt.Sprintf("held by %s with token %d", s.owner, s.token)
	}
	return fmt.Sprintf("held by %s", s.owner)
}

// possible replays a key's requests: an acknowledged one applied, in order; an unacknowledged
// one applied at its place or never (raft commits entries in log order, and a request is made
// only after the one before it returned). It reports requests whose acknowledgement the history
// cannot explain: those mean an acknowledged write was lost.
func (h *history) possible(k *keyLog) []state {
	states := []state{{}}
	for _, o := range k.ops {
		next := states
		switch {
		case o.kind == opLock && o.outcome == granted:
			if !slices.ContainsFunc(states, func(s state) bool { return !s.held }) {
				h.report("key %s granted to %s (token %d) while it must be %v", k.key, o.owner, o.token, states)
			}
			next = []state{{held: true, owner: o.owner, token: o.token, tokenKnown: true}}
		case o.kind == opLock && o.outcome == unknown:
			if slices.ContainsFunc(states, func(s state) bool { return !s.held }) {
				next = append(slices.Clone(states), state{held: true, owner: o.owner})
			}
		case o.kind == opUnlock && o.outcome == released:
			if !slices.ContainsFunc(states, func(s state) bool { return o.matches(s) }) {
				h.report("key %s released with %s's token %d while it must be %v", k.key, o.owner, o.token, states)
			}
			next = []state{{}}
		case o.kind == opUnlock && o.outcome == notFound:
			// Its release was applied and found no lock of that token: every state in which the
			// key held it is ruled out, and if none is left, a grant was lost.
			next = slices.DeleteFunc(slices.Clone(states), func(s state) bool { return o.matches(s) })
			if len(next) == 0 {
				h.report("key %s: %s's release with token %d found no lock while it must be %v", k.key, o.owner, o.token, states)
				next = []state{{}}
			}
		case o.kind == opUnlock && o.outcome == unknown:
			if slices.ContainsFunc(states, func(s state) bool { return o.matches(s) }) {
				next = append(slices.Clone(states), state{})
			}
		}
		states = dedupe(next)
	}
	return states
}

func (o op) matches(s state) bool {
	return s.held && s.owner == o.owner && (!s.tokenKnown || s.token == o.token)
}

func dedupe(states []state) []state {
	var out []state
	for _, s := range states {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// check compares the converged table (lookup) with every key's history.
func (h *history) check(lookup func(key string) (fsm.Lock, bool)) {
	for _, k := range h.keys {
		states := h.possible(k)
		l, held := lookup(k.key)
		got := state{held: held}
		if held {
			got.owner, got.token, got.tokenKnown = string(l.Owner), l.Token, true
			h.mu.Lock()
			prev, ok := h.tokens[l.Token]
			h.mu.Unlock()
			if ok && prev != got.owner {
				h.report("key %s held by %s with token %d, which was granted to %s", k.key, got.owner, l.Token, prev)
			}
		}
		if !slices.ContainsFunc(states, func(s state) bool {
			return s.held == got.held && (!s.held || s.owner == got.owner && (!s.tokenKnown || s.token == got.token))
		}) {
			h.report("key %s is %v after recovery, acknowledged requests allow only %v", k.key, got, states)
		}
	}
}
