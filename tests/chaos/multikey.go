package chaos

// Multi-key atomicity (DESIGN.md §8.7): a script, or a MULTI/EXEC transaction, that sets every
// key of a group to one fresh value, and a DEL of every key of the group. Each is one request, so on every node, at every
// moment, a group's keys hold the same value or are all absent: a group seen otherwise, by a
// read during the run or in any node's own table after healing, holds a request applied to some
// of its keys and not the others. A request whose outcome is unknown (a timeout, UNCERTAIN) may
// have applied whole or not at all, never partly, so the invariant holds whatever the outcomes.

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Multi-key op kinds.
const (
	MultiSet  = "eval-set" // EVAL setScript over the group's keys, with a value of its own
	MultiTx   = "exec-set" // MULTI, EXISTS of the group, SET of each key, EXEC
	MultiDel  = "del"      // DEL of every key of the group
	MultiRead = "mget"     // READONLY MGET of the group on one node: its own table on a follower
)

// multiGroups groups of groupSize keys each; two clients contend on them.
const (
	multiGroups = 3
	groupSize   = 3
)

// setScript sets every key to ARGV[1] and returns how many held a value before: on the view it
// ran on, a group is all set or all absent, so the answer is 0 or all of them.
const setScript = "local n = 0 for _, k in ipairs(KEYS) do if redis.call('GET', k) then n = n + 1 end redis.call('SET', k, ARGV[1]) end return n"

// MultiOp is one multi-key request or group read.
type MultiOp struct {
	Client   int    `json:"client"`
	Node     string `json:"node"`
	Kind     string `json:"kind"`
	Group    string `json:"group"`
	Value    string `json:"value,omitempty"` // eval-set: what it wrote to every key
	Invoke   int64  `json:"invoke_ns"`
	Complete int64  `json:"complete_ns"`
	Outcome  string `json:"outcome"`
	Err      string `json:"err,omitempty"`
	// Found is, for eval-set, how many keys held a value when the script ran; for del, how many
	// it removed.
	Found  int64    `json:"found,omitempty"`
	Values []string `json:"values,omitempty"` // mget: each key's value, "" when absent
}

func (o MultiOp) String() string {
	res := o.Outcome
	if o.Outcome == OK {
		switch o.Kind {
		case MultiRead:
			res = fmt.Sprint(o.Values)
		default:
			res = fmt.Sprint(o.Found)
		}
	} else if o.Err != "" {
		res += " (" + o.Err + ")"
	}
	what := o.Kind + " " + o.Group
	if o.Kind == MultiSet || o.Kind == MultiTx {
		what += " = " + o.Value
	}
	return fmt.Sprintf("c%d %s on %s at %.3fs -> %s", o.Client, what, o.Node, sec(o.Invoke), res)
}

// groupName names group g; its keys share the hash tag, as a cluster-mode client would need.
func groupName(g int) string { return fmt.Sprintf("m{%d}", g) }

func groupKeys(group string) []string {
	keys := make([]string, groupSize)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s.%c", group, 'a'+i)
	}
	return keys
}

// multiKey is the multi-key client loop: set a group, delete a group, or read one, on the
// worker's node, moving to another node on any failure.
func (w *worker) multiKey() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for n := 0; !w.stop.Load(); n++ {
		group := groupName(w.rng.IntN(multiGroups))
		keys := groupKeys(group)
		op := MultiOp{Client: w.id, Group: group}
		switch p := w.rng.Float64(); {
		case p < 0.25:
			op.Kind, op.Value = MultiSet, fmt.Sprintf("w%d-%d", w.id, n)
			args := append([]string{"EVAL", setScript, fmt.Sprint(groupSize)}, keys...)
			w.multiCall(&op, append(args, op.Value)...)
		case p < 0.45:
			op.Kind, op.Value = MultiTx, fmt.Sprintf("w%d-%d", w.id, n)
			w.multiTx(&op, keys)
		case p < 0.7:
			op.Kind = MultiDel
			w.multiCall(&op, append([]string{"DEL"}, keys...)...)
		default:
			op.Kind = MultiRead
			w.multiCall(&op, append([]string{"MGET"}, keys...)...)
		}
		w.rec.multi(op)
		w.sleep(30*time.Millisecond, 120*time.Millisecond)
	}
}

// multiCall runs one multi-key command on a READONLY connection (sent again ahead of it, in
// case the connection is new): MGET then reads a follower's own table, writes go to the leader.
func (w *worker) multiCall(op *MultiOp, args ...string) {
	c := w.conn()
	op.Node = c.addr
	op.Invoke = w.rec.now()
	vs, errs := c.pipe(opTimeout, nil, []string{"READONLY"}, args)
	op.Complete = w.rec.now()
	err := errs[1]
	if errs[0] != nil {
		err = errs[0]
	}
	if op.Outcome, op.Err = outcomeOf(err); op.Outcome != OK {
		w.failover()
		return
	}
	v := vs[1]
	if op.Kind != MultiRead {
		if n, ok := asInt(v); ok {
			op.Found = n
		} else {
			op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %#v", v)
		}
		return
	}
	a, ok := v.([]any)
	if !ok || len(a) != groupSize {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %#v", v)
		return
	}
	for _, x := range a {
		s, _ := x.(string)
		op.Values = append(op.Values, s)
	}
}

// multiTx sets every key of a group in one MULTI/EXEC on a READONLY connection (the
// transaction goes to the leader), counting in the same transaction how many held a value.
func (w *worker) multiTx(op *MultiOp, keys []string) {
	cmds := [][]string{{"READONLY"}, {"MULTI"}, append([]string{"EXISTS"}, keys...)}
	for _, k := range keys {
		cmds = append(cmds, []string{"SET", k, op.Value})
	}
	cmds = append(cmds, []string{"EXEC"})
	c := w.conn()
	op.Node = c.addr
	op.Invoke = w.rec.now()
	vs, errs := c.pipe(opTimeout, nil, cmds...)
	op.Complete = w.rec.now()
	var err error
	for _, e := range errs {
		if e != nil {
			err = e // the first queueing error, or EXEC's
			break
		}
	}
	if op.Outcome, op.Err = outcomeOf(err); op.Outcome != OK {
		w.failover()
		return
	}
	a, ok := vs[len(vs)-1].([]any)
	if !ok || len(a) != 1+len(keys) {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected EXEC reply %#v", vs[len(vs)-1])
		return
	}
	if n, ok := asInt(a[0]); ok {
		op.Found = n
	} else {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected EXISTS reply %#v", a[0])
	}
}

// finalGroups reads every group from every node's own table (READONLY MGET).
func (c *cluster) finalGroups() (map[string]map[string][]string, error) {
	out := map[string]map[string][]string{}
	for _, n := range c.nodes {
		cl := &client{addr: n.clientAddr}
		m := map[string][]string{}
		for g := range multiGroups {
			group := groupName(g)
			vs, errs := cl.pipe(3*time.Second, nil, []string{"READONLY"}, append([]string{"MGET"}, groupKeys(group)...))
			for _, err := range errs {
				if err != nil {
					cl.close()
					return nil, fmt.Errorf("%s: MGET %s: %w", n.id, group, err)
				}
			}
			a, ok := vs[1].([]any)
			if !ok || len(a) != groupSize {
				cl.close()
				return nil, fmt.Errorf("%s: MGET %s: reply %#v", n.id, group, vs[1])
			}
			var values []string
			for _, x := range a {
				s, _ := x.(string)
				values = append(values, s)
			}
			m[group] = values
		}
		cl.close()
		out[n.id] = m
	}
	return out, nil
}

// AtomicityResult is what checkAtomicity found.
type AtomicityResult struct {
	Requests int // eval-set and del requests made
	Reads    int // group reads that answered
	Aborted  int // requests whose entry aborted at apply (a leader change raced them)
	// Partial counts the partly applied requests found: groups seen split (by a read, or in a
	// node's table after healing) and requests whose reply saw a split group.
	Partial    int
	Violations []string // the first maxReported of them, described
	Unreported int      // violations found beyond those
}

// maxReported bounds the violations a checker describes one by one (a broken build has many).
const maxReported = 20

// checkAtomicity checks the multi-key history and every node's groups after healing (final:
// node -> group -> values) for a request applied to some of its keys and not the others.
func checkAtomicity(ops []MultiOp, final map[string]map[string][]string) AtomicityResult {
	var res AtomicityResult
	writer := map[string]MultiOp{}
	for _, op := range ops {
		switch {
		case op.Kind == MultiRead && op.Outcome == OK:
			res.Reads++
		case op.Kind != MultiRead:
			res.Requests++
			if op.Kind == MultiSet || op.Kind == MultiTx {
				writer[op.Value] = op
			}
			if strings.Contains(op.Err, "did not apply") || strings.Contains(op.Err, "nothing was applied") {
				res.Aborted++
			}
		}
	}
	report := func(format string, args ...any) {
		if len(res.Violations) < maxReported {
			res.Violations = append(res.Violations, "atomicity: "+fmt.Sprintf(format, args...))
		} else {
			res.Unreported++
		}
	}
	split := func(where, group string, values []string) {
		if uniform(values) {
			if _, ok := writer[values[0]]; !ok && values[0] != "" {
				report("%s %s set to %s, which no request wrote", where, group, values[0])
			}
			return
		}
		keys := groupKeys(group)
		var state, culprits []string
		count := map[string]int{}
		for i, v := range values {
			if v == "" {
				v = "(none)"
			}
			state = append(state, keys[i]+"="+v)
			count[values[i]]++
		}
		var vals []string
		for v := range count {
			vals = append(vals, v)
		}
		sort.Strings(vals)
		for _, v := range vals {
			switch op, ok := writer[v]; {
			case v == "":
				culprits = append(culprits, fmt.Sprintf("absent (a DEL, or before a set) on %d of %d keys", count[v], groupSize))
			case ok:
				culprits = append(culprits, fmt.Sprintf("%s on %d of %d keys", op, count[v], groupSize))
			default:
				culprits = append(culprits, fmt.Sprintf("%s (written by no request) on %d of %d keys", v, count[v], groupSize))
			}
		}
		res.Partial++
		report("%s %s is split [%s]: %s", where, group, strings.Join(state, " "), strings.Join(culprits, "; "))
	}
	for _, op := range ops {
		switch {
		case op.Outcome != OK:
		case op.Kind == MultiRead:
			split(fmt.Sprintf("a read by c%d on %s at %.3fs saw", op.Client, op.Node, sec(op.Invoke)), op.Group, op.Values)
		case op.Found != 0 && op.Found != groupSize:
			res.Partial++
			report("%s: the request saw %d of the %d keys set", op, op.Found, groupSize)
		}
	}
	nodes := make([]string, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for g := range multiGroups {
			group := groupName(g)
			if values, ok := final[n][group]; ok {
				split("after healing, "+n+"'s", group, values)
			}
		}
	}
	return res
}

// uniform reports whether every value is the same (all absent counts).
func uniform(values []string) bool {
	for _, v := range values[1:] {
		if v != values[0] {
			return false
		}
	}
	return true
}
