package chaos

// The porcupine models of the data types (datatypes.go), one per type, each checked per key.
// Every op applies deterministically: apply returns the state it leaves and the reply it must
// have had. The only nondeterminism is the harness's, handled as for the lock keys: an op whose
// outcome is unknown may have taken effect or not (either state follows, whatever its reply),
// any time after its invocation (it has no return); certain failures and unknown reads are
// dropped. States are small comparable values (porcupine compares them with ==): a counter is
// one integer, a sorted set the scores of its zMembers members, a list the string of its few
// elements.

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Lock names the lock model (model.go) among the data types' in LinResult.
const Lock = "lock"

// counterState is one counter key.
type counterState struct {
	V   int64
	Set bool // the key exists: GET says nil otherwise (a counter down to 0 still exists)
}

func applyCounter(s counterState, op TypedOp) (counterState, reply, bool) {
	switch op.Kind {
	case Incr, IncrBy, DecrBy:
		n := counterState{V: s.V + op.Delta, Set: true}
		return n, reply{N: n.V}, true
	case SemTake:
		if s.Set && s.V >= op.Delta {
			return counterState{V: s.V - op.Delta, Set: true}, reply{N: 1}, true
		}
		return s, reply{N: 0}, true
	case Get:
		if !s.Set {
			return s, reply{Nil: true}, true
		}
		return s, reply{N: s.V}, true
	}
	return s, reply{}, false
}

func describeCounter(s counterState) string {
	if !s.Set {
		return "absent"
	}
	return fmt.Sprint(s.V)
}

// zsetState is one sorted-set key: each member's score, 0 when it is not a member (the
// workload's scores start at 1).
type zsetState [zMembers]int64

func (s zsetState) card() int64 {
	var n int64
	for _, sc := range s {
		if sc != 0 {
			n++
		}
	}
	return n
}

// below removes the members scored at most cutoff (ZREMRANGEBYSCORE -inf cutoff), and says how
// many.
func (s zsetState) below(cutoff int64) (zsetState, int64) {
	var removed int64
	for i, sc := range s {
		if sc != 0 && sc <= cutoff {
			s[i] = 0
			removed++
		}
	}
	return s, removed
}

func applyZSet(s zsetState, op TypedOp) (zsetState, reply, bool) {
	m := op.Member
	if m < 0 || m >= zMembers {
		return s, reply{}, false
	}
	n := s
	switch op.Kind {
	case ZAdd:
		n[m] = op.Score
		if s[m] == 0 {
			return n, reply{N: 1}, true
		}
		return n, reply{N: 0}, true
	case ZRem:
		n[m] = 0
		if s[m] != 0 {
			return n, reply{N: 1}, true
		}
		return n, reply{N: 0}, true
	case ZRemBelow:
		n, removed := s.below(op.Cutoff)
		return n, reply{N: removed}, true
	case ZSemAcquire:
		n, _ := s.below(op.Cutoff)
		if n.card() < zLimit {
			n[m] = op.Score
			return n, reply{N: 1}, true
		}
		return n, reply{N: 0}, true
	case ZCard:
		return s, reply{N: s.card()}, true
	case ZScore:
		if s[m] == 0 {
			return s, reply{Nil: true}, true
		}
		return s, reply{N: s[m]}, true
	}
	return s, reply{}, false
}

func describeZSet(s zsetState) string {
	var parts []string
	for i, sc := range s {
		if sc != 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", zMember(i), sc))
		}
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// listState is one list key.
type listState struct {
	Items string // the elements, head (the LPUSH end) first, space-separated
	Len   int64
}

func applyList(s listState, op TypedOp) (listState, reply, bool) {
	switch op.Kind {
	case LPush:
		n := listState{Items: op.Value, Len: s.Len + 1}
		if s.Len > 0 {
			n.Items += " " + s.Items
		}
		return n, reply{N: n.Len}, true
	case RPop:
		if s.Len == 0 {
			return s, reply{Nil: true}, true
		}
		n := listState{Len: s.Len - 1}
		i := strings.LastIndexByte(s.Items, ' ')
		if i >= 0 {
			n.Items = s.Items[:i]
		}
		return n, reply{Elem: s.Items[i+1:]}, true
	case LLen:
		return s, reply{N: s.Len}, true
	}
	return s, reply{}, false
}

func describeList(s listState) string { return "[" + s.Items + "]" }

// dataModel is the porcupine model of one key of a data type whose ops apply deterministically.
func dataModel[S comparable](apply func(S, TypedOp) (S, reply, bool), describe func(S) string) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Init: func() []interface{} {
			var zero S
			return []interface{}{zero}
		},
		Step: func(state, input, output interface{}) []interface{} {
			s, op := state.(S), input.(TypedOp)
			n, want, ok := apply(s, op)
			switch {
			case !ok:
				return nil
			case op.Outcome == Unknown:
				return []interface{}{s, n}
			case want != op.reply():
				return nil
			}
			return []interface{}{n}
		},
		DescribeOperation: func(input, output interface{}) string { return input.(TypedOp).String() },
		DescribeState:     func(state interface{}) string { return describe(state.(S)) },
	}
	return m.ToModel()
}

// modelOf returns the porcupine model named name (Lock, LockKinds, Counter, ZSet or List); clk
// is the lock models' clock timeline.
func modelOf(name string, clk *clockTimeline) porcupine.Model {
	switch name {
	case LockKinds:
		return kindsModel(clk)
	case Counter:
		return dataModel(applyCounter, describeCounter)
	case ZSet:
		return dataModel(applyZSet, describeZSet)
	case List:
		return dataModel(applyList, describeList)
	}
	return lockModel(clk)
}

// typedPorcupineOps turns the ops of one key into porcupine operations, as porcupineOps does
// the lock's.
func typedPorcupineOps(ops []TypedOp) []porcupine.Operation {
	var out []porcupine.Operation
	for _, op := range ops {
		if op.Outcome == Fail || (op.read() && op.Outcome == Unknown) {
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

// checkDataTypes checks every data-type key's history separately with its type's model, each
// within timeout.
func checkDataTypes(ops []TypedOp, timeout time.Duration) []LinResult {
	type key struct{ model, key string }
	byKey := map[key][]TypedOp{}
	for _, op := range ops {
		k := key{op.Model, op.Key}
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].model+" "+keys[i].key < keys[j].model+" "+keys[j].key })
	var out []LinResult
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(modelOf(k.model, nil), typedPorcupineOps(byKey[k]), timeout)
		out = append(out, LinResult{Model: k.model, Key: k.key, Result: res, Info: info})
	}
	return out
}

// TypedCounts counts the data-type ops of a run, per model, and those whose outcome is unknown.
type TypedCounts struct {
	Counter, ZSet, List, Unknown int
}

func countTyped(ops []TypedOp) TypedCounts {
	var c TypedCounts
	for _, op := range ops {
		switch op.Model {
		case Counter:
			c.Counter++
		case ZSet:
			c.ZSet++
		case List:
			c.List++
		}
		if op.Outcome == Unknown {
			c.Unknown++
		}
	}
	return c
}
