package chaos

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// lockState is the model's state of one lock key.
type lockState struct {
	Held   bool
	Owner  string
	Token  uint64 // 0: granted by an acquire whose reply was lost, not yet seen by a read
	From   int64  // invoke time of the op that set the lease (ns): the lease was armed after it
	End    int64  // the earliest time the lease can end on a clock without jumps (ns)
	Ghost  bool   // granted by an acquire whose reply was lost: the leader may release it any time
	MaxTok uint64 // highest token seen granted on this key
	Floor  int64  // the linearization point of the last op is at or after Floor
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// matches reports whether the lock is held by the grant (owner, token).
func (s lockState) matches(owner string, token uint64) bool {
	return s.Held && (s.Token == token || (s.Token == 0 && s.Owner == owner))
}

// hidden returns s and every state reachable from it by steps no client asked for that may
// happen before an op completing at complete: expiry once the lease may have ended (earlier by
// the forward clock jumps injected while it ran: see clock.go), and the ghost-lock release of a
// grant whose reply was lost.
func hidden(s lockState, complete int64, clk *clockTimeline) []lockState {
	out := []lockState{s}
	if s.Held && complete > s.End-clk.bound() {
		if end := s.End - clk.slack(s.From, complete); complete > end {
			out = append(out, lockState{MaxTok: s.MaxTok, Floor: max64(s.Floor, end)})
		}
	}
	if s.Held && s.Ghost {
		out = append(out, lockState{MaxTok: s.MaxTok, Floor: s.Floor})
	}
	return out
}

// step applies op to s; ok is false when the op's reply is impossible in s.
func step(s lockState, op Op) []lockState {
	if s.Floor > op.Complete {
		return nil // the op must linearize before a point it cannot reach
	}
	lp := max64(s.Floor, op.Invoke)
	n := s
	n.Floor = lp
	ttl := op.TTL * int64(time.Millisecond)
	switch op.Kind {
	case Acquire:
		switch {
		case op.Outcome == Unknown:
			out := []lockState{s}
			if !s.Held {
				out = append(out, lockState{Held: true, Owner: op.Owner, From: op.Invoke, End: lp + ttl, Ghost: true, MaxTok: s.MaxTok, Floor: lp})
			}
			return out
		case op.Granted && op.Token == 0:
			// SET NX PX granted, but the pipelined LOCKINFO did not show this owner: the token
			// is unknown, the owner identifies the grant.
			if s.Held {
				return nil
			}
			return []lockState{{Held: true, Owner: op.Owner, From: op.Invoke, End: lp + ttl, MaxTok: s.MaxTok, Floor: lp}}
		case op.Granted:
			if s.Held || op.Token <= s.MaxTok {
				return nil
			}
			return []lockState{{Held: true, Owner: op.Owner, Token: op.Token, From: op.Invoke, End: lp + ttl, MaxTok: op.Token, Floor: lp}}
		default:
			if !s.Held {
				return nil
			}
			return []lockState{n}
		}
	case Renew:
		match := s.matches(op.Owner, op.Token)
		renewed := n
		renewed.From, renewed.End = op.Invoke, lp+ttl
		switch {
		case op.Outcome == Unknown:
			if match {
				return []lockState{s, renewed}
			}
			return []lockState{s}
		case op.Success:
			if !match {
				return nil
			}
			return []lockState{renewed}
		default:
			if match {
				return nil
			}
			return []lockState{n}
		}
	case Release:
		match := s.matches(op.Owner, op.Token)
		freed := lockState{MaxTok: s.MaxTok, Floor: lp}
		switch {
		case op.Outcome == Unknown:
			if match {
				return []lockState{s, freed}
			}
			return []lockState{s}
		case op.Success:
			if !match {
				return nil
			}
			return []lockState{freed}
		default:
			if match {
				return nil
			}
			return []lockState{n}
		}
	case Read:
		if op.Outcome == Unknown {
			return []lockState{s}
		}
		if op.Free {
			if s.Held {
				return nil
			}
			return []lockState{n}
		}
		if !s.Held || s.Owner != op.RdOwner {
			return nil
		}
		if s.Token == 0 {
			if op.RdToken <= s.MaxTok {
				return nil
			}
			n.Token, n.MaxTok = op.RdToken, op.RdToken
			return []lockState{n}
		}
		if s.Token != op.RdToken {
			return nil
		}
		return []lockState{n}
	}
	return nil
}

// lockModel is the porcupine model of one lock key under the clock changes of clk (nil: none).
func lockModel(clk *clockTimeline) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{lockState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			op := input.(Op)
			var out []interface{}
			for _, h := range hidden(state.(lockState), op.Complete, clk) {
				for _, n := range step(h, op) {
					out = append(out, n)
				}
			}
			return out
		},
		DescribeOperation: func(input, output interface{}) string { return input.(Op).String() },
		DescribeState:     describeState,
	}
	return m.ToModel()
}

func describeState(state interface{}) string {
	s := state.(lockState)
	if !s.Held {
		return fmt.Sprintf("free (max token %d)", s.MaxTok)
	}
	g := ""
	if s.Ghost {
		g = " ghost"
	}
	return fmt.Sprintf("%s/%d until>=%.3fs%s", s.Owner, s.Token, float64(s.End)/1e9, g)
}

// LinResult is the outcome of the linearizability check of one key.
type LinResult struct {
	Model  string // Lock, LockKinds, Counter, ZSet or List
	Key    string
	Result porcupine.CheckResult
	Info   porcupine.LinearizationInfo
}

// porcupineOps turns the ops of one key into porcupine operations (certain failures dropped:
// nothing happened).
func porcupineOps(ops []Op) []porcupine.Operation {
	return porcupineOpsReading(ops, func(op Op) bool { return op.Kind == Read })
}

// porcupineOpsReading is porcupineOps where reads are the ops read says: a read of unknown
// outcome tells nothing, and is dropped like a certain failure.
func porcupineOpsReading(ops []Op, read func(Op) bool) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == Fail || read(op) && op.Outcome == Unknown {
			continue
		}
		ret := op.Complete
		if op.Outcome == Unknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Invoke, Output: nil, Return: ret})
	}
	return out
}

// checkLinearizable checks every key's history separately, each within timeout.
func checkLinearizable(ops []Op, clk *clockTimeline, timeout time.Duration) []LinResult {
	byKey := map[string][]Op{}
	for _, op := range ops {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	model := lockModel(clk)
	var out []LinResult
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(model, porcupineOps(byKey[k]), timeout)
		out = append(out, LinResult{Model: Lock, Key: k, Result: res, Info: info})
	}
	return out
}
