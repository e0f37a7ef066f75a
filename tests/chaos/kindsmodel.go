package chaos

// The porcupine model of a lock kinds' key (kinds.go), checked per key like the plain locks'
// (model.go), and the checks across keys a per-key model cannot make (an MLOCK's all or
// nothing).
//
// A key's state is its holders (one plain lock, from LOCK or one key of an MLOCK; or any number
// of shares; or up to a semaphore's count of permits, each with its own owner, token and lease),
// whether a lock-delay may be in force, and the highest token the key has had. The steps nobody
// asked for happen as in the lock model: a holder expires once its lease may have ended (earlier
// by the forward clock jumps the run injected meanwhile: clock.go), and then starts its
// lock-delay if it was granted one; a lock-delay is a lease too, timed from that expiry, and ends
// once it may have (late, never early: the same slack); a grant whose reply was lost may be
// released by the leader at any time (a ghost release is a release: no lock-delay). The model
// thereby holds the server to:
//   - shared/exclusive exclusion: a plain lock is granted only while nobody holds a share or
//     a lock, a share only while nobody holds a plain lock, and a refusal comes only then;
//   - permits: a permit is granted only while fewer than the semaphore's count hold one, and
//     refused only while that many do;
//   - lock-delay: after an expiry of a holder granted with DELAY d, no grant of any kind on the
//     key before d could have run out (a refusal or a LOCKINFO saying delay only while it may
//     run), and none after an UNLOCK;
//   - tokens: every grant's above every token the key has had before it;
//   - LOCKINFO lists exactly the holders there are (or the delay), and VALIDATE, RENEW, UNLOCK
//     and SEMRELEASE find exactly them.
//
// An MLOCK is one plain grant on each of its keys. Its all or nothing is checked across keys:
// refused, it took none of its keys (checkMLock: no read ever shows its owner holding one);
// granted, the model of each key holds it to its lease; of unknown outcome and seen holding one
// of its keys by a read, it applied, so it took every key before that read completed
// (resolveMLocks turns it into a grant on each key).

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// LockKinds names the lock kinds' model among the others in LinResult.
const LockKinds = "lock-kinds"

// kindHolder is one holder of a kinds key: its plain lock, a share or a permit.
type kindHolder struct {
	Owner   string
	Token   uint64 // 0: granted by an acquire whose reply was lost, not yet seen by a read
	MinTok  uint64 // a token still unknown is above it: the key's highest when it was granted
	Permits int64  // a permit's semaphore count; 0 for a share or a plain lock
	From    int64  // invoke time of the op that set the lease (ns)
	End     int64  // the earliest time the lease can end on a clock without jumps (ns)
	Delay   int64  // the lock-delay its expiry starts (ns), 0 for none
	Ghost   bool   // its grant's reply was lost: the leader may release it any time
}

// kindsState is the model's state of one key. Holders are sorted by owner (owners are unique per
// attempt), so equal states compare equal.
type kindsState struct {
	Plain   bool // the one holder is a plain lock
	Holders []kindHolder
	// Delayed: a lock-delay may be in force, started by an expiry at or after DelayFrom, and
	// lasting at least until DelayEnd on a clock without jumps.
	Delayed             bool
	DelayFrom, DelayEnd int64
	MaxTok              uint64 // highest token seen granted on this key
	Floor               int64  // the linearization point of the last op is at or after Floor
}

func equalKinds(a, b kindsState) bool {
	return a.Plain == b.Plain && a.Delayed == b.Delayed && a.DelayFrom == b.DelayFrom && a.DelayEnd == b.DelayEnd &&
		a.MaxTok == b.MaxTok && a.Floor == b.Floor && slices.Equal(a.Holders, b.Holders)
}

// without returns s without its i-th holder.
func (s kindsState) without(i int) kindsState {
	s.Holders = slices.Delete(slices.Clone(s.Holders), i, i+1)
	s.Plain = false
	return s
}

// with returns s with h added, a plain lock if plain.
func (s kindsState) with(h kindHolder, plain bool) kindsState {
	i := sort.Search(len(s.Holders), func(i int) bool { return s.Holders[i].Owner >= h.Owner })
	s.Holders = slices.Insert(slices.Clone(s.Holders), i, h)
	s.Plain = plain
	return s
}

// holding returns the index of the holder with token, or -1.
func (s kindsState) holding(token uint64) int {
	if token == 0 {
		return -1
	}
	return slices.IndexFunc(s.Holders, func(h kindHolder) bool { return h.Token == token })
}

// admits reports whether s lets op's acquire be granted.
func (s kindsState) admits(op Op) bool {
	if s.Delayed {
		return false
	}
	switch op.Via {
	case ViaShared:
		return !s.Plain && !slices.ContainsFunc(s.Holders, func(h kindHolder) bool { return h.Permits != 0 })
	case ViaSem:
		return !s.Plain && int64(len(s.Holders)) < op.Permits &&
			!slices.ContainsFunc(s.Holders, func(h kindHolder) bool { return h.Permits != op.Permits })
	}
	return len(s.Holders) == 0 // LOCK, MLOCK
}

// kindsHidden returns s and every state reachable from it by steps nobody asked for that may
// happen before an op completing at complete: expiries (each starting its lock-delay), ghost
// releases, and the end of a lock-delay.
func kindsHidden(s kindsState, complete int64, clk *clockTimeline) []kindsState {
	out := []kindsState{s}
	for i := 0; i < len(out); i++ {
		for _, n := range kindsHiddenSteps(out[i], complete, clk) {
			if !slices.ContainsFunc(out, func(o kindsState) bool { return equalKinds(o, n) }) {
				out = append(out, n)
			}
		}
	}
	return out
}

// kindsHiddenSteps returns the states one hidden step leads to from s.
func kindsHiddenSteps(s kindsState, complete int64, clk *clockTimeline) []kindsState {
	var out []kindsState
	for i, h := range s.Holders {
		if h.Ghost {
			out = append(out, s.without(i))
		}
		if complete <= h.End-clk.bound() {
			continue
		}
		end := h.End - clk.slack(h.From, complete)
		if complete <= end {
			continue
		}
		n := s.without(i)
		n.Floor = max(s.Floor, end) // the expiry: its lock-delay runs from here, at the earliest
		if h.Delay > 0 {
			// A delay already in force goes on at least as long as it was to (fsm's ended).
			if !n.Delayed {
				n.Delayed, n.DelayFrom, n.DelayEnd = true, n.Floor, 0
			}
			n.DelayEnd = max(n.DelayEnd, n.Floor+h.Delay)
		}
		out = append(out, n)
	}
	if s.Delayed && complete > s.DelayEnd-clk.bound() {
		if end := s.DelayEnd - clk.slack(s.DelayFrom, complete); complete > end {
			n := s
			n.Delayed, n.DelayFrom, n.DelayEnd, n.Floor = false, 0, 0, max(s.Floor, end)
			out = append(out, n)
		}
	}
	return out
}

// kindsStep applies op to s: the states it may leave, none when its reply is impossible in s.
func kindsStep(s kindsState, op Op) []kindsState {
	if s.Floor > op.Complete {
		return nil // the op must linearize before a point it cannot reach
	}
	lp := max(s.Floor, op.Invoke)
	n := s
	n.Floor = lp
	ttl := op.TTL * int64(time.Millisecond)
	switch op.Kind {
	case Acquire:
		plain := op.Via != ViaShared && op.Via != ViaSem
		h := kindHolder{Owner: op.Owner, Token: op.Token, Permits: op.Permits, From: op.Invoke, End: lp + ttl,
			Delay: op.DelayMs * int64(time.Millisecond)}
		admits := s.admits(op)
		switch {
		case op.Outcome == Unknown:
			out := []kindsState{s}
			if admits {
				h.Token, h.MinTok, h.Ghost = 0, s.MaxTok, true
				out = append(out, n.with(h, plain))
			}
			return out
		case op.Granted && op.Token == 0:
			// an MLOCK whose reply was lost, seen holding another of its keys (resolveMLocks)
			if !admits {
				return nil
			}
			h.MinTok, h.Ghost = s.MaxTok, true
			return []kindsState{n.with(h, plain)}
		case op.Granted:
			if !admits || op.Token <= s.MaxTok {
				return nil
			}
			n = n.with(h, plain)
			n.MaxTok = op.Token
			return []kindsState{n}
		case op.Via == ViaMLock:
			return []kindsState{n} // refused: one of its keys was taken, not necessarily this one
		case admits:
			return nil
		}
		return []kindsState{n}
	case Renew, Release, Validate:
		i := s.holding(op.Token)
		changed := n
		switch {
		case i < 0:
		case op.Kind == Renew:
			changed.Holders = slices.Clone(s.Holders)
			changed.Holders[i].From, changed.Holders[i].End = op.Invoke, lp+ttl
		case op.Kind == Release:
			changed = n.without(i)
		}
		switch {
		case op.Outcome == Unknown:
			return []kindsState{s, changed}
		case op.Success != (i >= 0):
			return nil
		}
		return []kindsState{changed}
	case Read:
		return kindsRead(s, n, op)
	}
	return nil
}

// kindsRead checks what an acknowledged LOCKINFO saw against s, and learns the tokens of the
// holders whose grant's reply was lost (n is s at the read's linearization point).
func kindsRead(s, n kindsState, op Op) []kindsState {
	var seen []Holder
	switch op.RdKind {
	case "":
		if !op.Free || len(s.Holders) > 0 || s.Delayed {
			return nil
		}
		return []kindsState{n}
	case KindDelay:
		if len(s.Holders) > 0 || !s.Delayed {
			return nil
		}
		return []kindsState{n}
	case KindLock:
		if !s.Plain {
			return nil
		}
		seen = []Holder{{Owner: op.RdOwner, Token: op.RdToken}}
	case KindShared, KindSemaphore:
		if s.Plain || len(s.Holders) == 0 {
			return nil
		}
		for _, h := range s.Holders {
			if op.RdKind == KindShared && h.Permits != 0 || op.RdKind == KindSemaphore && h.Permits != op.RdPermits {
				return nil
			}
		}
		seen = op.RdHolders
	default:
		return nil
	}
	if len(seen) != len(s.Holders) {
		return nil
	}
	n.Holders = slices.Clone(s.Holders)
	for _, r := range seen {
		i := slices.IndexFunc(n.Holders, func(h kindHolder) bool { return h.Owner == r.Owner })
		switch {
		case i < 0:
			return nil
		case n.Holders[i].Token == 0:
			if r.Token <= n.Holders[i].MinTok || n.holding(r.Token) >= 0 {
				return nil
			}
			n.Holders[i].Token = r.Token
			n.MaxTok = max(n.MaxTok, r.Token)
		case n.Holders[i].Token != r.Token:
			return nil
		}
	}
	return []kindsState{n}
}

// kindsModel is the porcupine model of one lock kinds' key under the clock changes of clk.
func kindsModel(clk *clockTimeline) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{kindsState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			op := input.(Op)
			var out []interface{}
			for _, h := range kindsHidden(state.(kindsState), op.Complete, clk) {
				for _, n := range kindsStep(h, op) {
					out = append(out, n)
				}
			}
			return out
		},
		Equal:             func(a, b interface{}) bool { return equalKinds(a.(kindsState), b.(kindsState)) },
		DescribeOperation: func(input, output interface{}) string { return input.(Op).String() },
		DescribeState:     describeKinds,
	}
	return m.ToModel()
}

func describeKinds(state interface{}) string {
	s := state.(kindsState)
	var parts []string
	for _, h := range s.Holders {
		what := "share"
		switch {
		case s.Plain:
			what = "lock"
		case h.Permits > 0:
			what = fmt.Sprintf("permit of %d", h.Permits)
		}
		d := ""
		if h.Delay > 0 {
			d = fmt.Sprintf(" delay %dms", h.Delay/int64(time.Millisecond))
		}
		g := ""
		if h.Ghost {
			g = " ghost"
		}
		parts = append(parts, fmt.Sprintf("%s %s/%d until>=%.3fs%s%s", what, h.Owner, h.Token, sec(h.End), d, g))
	}
	if s.Delayed {
		parts = append(parts, fmt.Sprintf("lock-delay until>=%.3fs", sec(s.DelayEnd)))
	}
	if len(parts) == 0 {
		parts = append(parts, "free")
	}
	return fmt.Sprintf("%s (max token %d)", strings.Join(parts, ", "), s.MaxTok)
}

// resolveMLocks returns ops with every MLOCK of unknown outcome that a read saw holding one of
// its keys made a grant, on each of its keys, completed when the first such read did: an MLOCK
// applies whole or not at all, so it took every key then. Its tokens stay unknown (the reads
// tell them), and the leader may have released it (its reply was lost: a ghost).
func resolveMLocks(ops []Op) []Op {
	seen := map[string]int64{} // owner -> the earliest completion of a read showing it hold a plain lock
	for _, op := range ops {
		if op.Kind == Read && op.Outcome == OK && op.RdKind == KindLock {
			if at, ok := seen[op.RdOwner]; !ok || op.Complete < at {
				seen[op.RdOwner] = op.Complete
			}
		}
	}
	out := slices.Clone(ops)
	for i, op := range out {
		if at, ok := seen[op.Owner]; ok && op.Kind == Acquire && op.Via == ViaMLock && op.Outcome == Unknown {
			out[i].Outcome, out[i].Granted, out[i].Token, out[i].Complete = OK, true, 0, at
			out[i].Err += " (seen holding one of its keys: granted all)"
		}
	}
	return out
}

// checkMLock checks that a refused MLOCK took none of its keys: no read, on any key, ever shows
// its owner (unique to the attempt) holding one. A granted one's keys are each held to its
// lease by the key's model.
func checkMLock(ops []Op) []string {
	refused := map[string]Op{}
	for _, op := range ops {
		if op.Kind == Acquire && op.Via == ViaMLock && op.Outcome == OK && !op.Granted {
			refused[op.Owner] = op
		}
	}
	var bad []string
	for _, op := range ops {
		if op.Kind != Read || op.Outcome != OK || op.RdKind != KindLock {
			continue
		}
		if m, ok := refused[op.RdOwner]; ok {
			bad = append(bad, fmt.Sprintf("mlock: %s was refused at %.3fs, yet %s at %.3fs saw it hold %s",
				m, sec(m.Complete), op, sec(op.Complete), op.Key))
		}
	}
	return bad
}

// kindsPorcupineOps turns the ops of one key into porcupine operations, as porcupineOps does
// the lock's: certain failures dropped, and reads whose outcome is unknown.
func kindsPorcupineOps(ops []Op) []porcupine.Operation {
	return porcupineOpsReading(ops, func(op Op) bool { return op.Kind == Read || op.Kind == Validate })
}

// checkKinds checks every lock kinds' key separately, each within timeout, after resolving the
// MLOCKs of unknown outcome that reads saw applied.
func checkKinds(ops []Op, clk *clockTimeline, timeout time.Duration) []LinResult {
	byKey := map[string][]Op{}
	for _, op := range resolveMLocks(ops) {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	model := kindsModel(clk)
	var out []LinResult
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(model, kindsPorcupineOps(byKey[k]), timeout)
		out = append(out, LinResult{Model: LockKinds, Key: k, Result: res, Info: info})
	}
	return out
}

// KindsCounts counts the lock kinds' ops of a run: grants of each kind, MLOCKs granted and
// refused (one each, whatever their keys), LOCKINFOs that found a lock-delay in force, and the
// ops whose outcome is unknown.
type KindsCounts struct {
	Ops, Shares, Permits, Locks, MLocks, MLocksRefused, DelaysSeen, Unknown int
}

func countKinds(ops []Op) KindsCounts {
	c := KindsCounts{Ops: len(ops)}
	for _, op := range ops {
		if op.Outcome == Unknown {
			c.Unknown++
		}
		if op.Outcome != OK {
			continue
		}
		switch {
		case op.Kind == Read && op.RdKind == KindDelay:
			c.DelaysSeen++
		case op.Kind != Acquire:
		case op.Via == ViaMLock && op.Key == op.Keys[0]:
			if op.Granted {
				c.MLocks++
			} else {
				c.MLocksRefused++
			}
		case !op.Granted:
		case op.Via == ViaShared:
			c.Shares++
		case op.Via == ViaSem:
			c.Permits++
		case op.Via != ViaMLock:
			c.Locks++
		}
	}
	return c
}
