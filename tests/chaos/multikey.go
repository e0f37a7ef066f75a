package chaos

// Multi-key atomicity (DESIGN.md §8.7): a script, or a MULTI/EXEC transaction, that sets every
// key of a group to one fresh value, and a DEL of every key of the group. Each is one request, so on every node, at every
// moment, a group's keys hold the same value or are all absent: a group seen otherwise, by a
// read during the run or in any node's own table after healing, holds a request applied to some
// of its keys and not the others. A request whose outcome is unknown (a timeout, UNCERTAIN) may
// have applied whole or not at all, never partly, so the invariant holds whatever the outcomes.
//
// Collection groups do the same over three types at once: a hash, a sorted set and a list
// (collKeys). A script, or a MULTI/EXEC, adds one fresh value to all three (HSET of a field,
// ZADD of a member, LPUSH of an element), a DEL removes the three keys, and a read-only script
// reads all three (HKEYS, ZRANGE, LRANGE) on one node: the three always hold the same values,
// and a value found in some of them and not the others is a request (or a DEL) applied in part.

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Multi-key op kinds.
const (
	MultiSet  = "eval-set" // EVAL setScript over the group's keys, with a value of its own
	MultiTx   = "exec-set" // MULTI, EXISTS of the group, SET of each key, EXEC
	MultiDel  = "del"      // DEL of every key of the group
	MultiRead = "mget"     // READONLY MGET of the group on one node: its own table on a follower

	MultiCollSet  = "eval-coll" // EVAL collSetScript: the three sizes, then HSET, ZADD, LPUSH of its value
	MultiCollTx   = "exec-coll" // MULTI, HLEN, ZCARD, LLEN, HSET, ZADD, LPUSH, EXEC
	MultiCollDel  = "del-coll"  // DEL of the group's three keys
	MultiCollRead = "read-coll" // READONLY EVAL_RO collReadScript on one node: its own table on a follower
)

// multiGroups groups of groupSize keys each, and collGroups collection groups; the multi-key
// clients contend on them.
const (
	multiGroups = 3
	groupSize   = 3
	collGroups  = 2
)

// The collection groups' scripts. collSetScript returns the sizes of the hash, the sorted set
// and the list before it adds its value: on the view it ran on they are equal.
const (
	collSetScript = "local n = {redis.call('HLEN', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('LLEN', KEYS[3])} " +
		"redis.call('HSET', KEYS[1], ARGV[1], '1') redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) redis.call('LPUSH', KEYS[3], ARGV[1]) return n"
	collReadScript = "return {redis.call('HKEYS', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1), redis.call('LRANGE', KEYS[3], 0, -1)}"
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
	// Found is, for eval-set, how many keys held a value when the script ran; for del and
	// del-coll, how many it removed.
	Found  int64    `json:"found,omitempty"`
	Values []string `json:"values,omitempty"` // mget: each key's value, "" when absent
	// Sizes are, for eval-coll and exec-coll, the hash's, sorted set's and list's sizes as the
	// request saw them; Sets, for read-coll, their fields, members and elements.
	Sizes []int64    `json:"sizes,omitempty"`
	Sets  [][]string `json:"sets,omitempty"`
}

// collKind reports whether kind is a request or read of a collection group.
func collKind(kind string) bool {
	switch kind {
	case MultiCollSet, MultiCollTx, MultiCollDel, MultiCollRead:
		return true
	}
	return false
}

func (o MultiOp) String() string {
	res := o.Outcome
	if o.Outcome == OK {
		switch o.Kind {
		case MultiRead:
			res = fmt.Sprint(o.Values)
		case MultiCollSet, MultiCollTx:
			res = fmt.Sprint(o.Sizes)
		case MultiCollRead:
			res = fmt.Sprint(o.Sets)
		default:
			res = fmt.Sprint(o.Found)
		}
	} else if o.Err != "" {
		res += " (" + o.Err + ")"
	}
	what := o.Kind + " " + o.Group
	switch o.Kind {
	case MultiSet, MultiTx:
		what += " = " + o.Value
	case MultiCollSet, MultiCollTx:
		what += " += " + o.Value
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

// collGroupName names collection group g.
func collGroupName(g int) string { return fmt.Sprintf("mc{%d}", g) }

// collKeys are a collection group's hash, sorted set and list.
func collKeys(group string) []string { return []string{group + ".h", group + ".z", group + ".l"} }

// multiKey is the multi-key client loop: set a string group, add to a collection group, delete
// a group, or read one, on the worker's node, moving to another node on any failure.
func (w *worker) multiKey() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for n := 0; !w.stop.Load(); n++ {
		value := fmt.Sprintf("w%d-%d", w.id, n)
		var op MultiOp
		if w.rng.IntN(2) == 0 {
			op = w.stringGroup(value)
		} else {
			op = w.collGroup(value, n)
		}
		w.rec.multi(op)
		w.sleep(30*time.Millisecond, 120*time.Millisecond)
	}
}

// stringGroup sets a string group to value, deletes it, or reads it.
func (w *worker) stringGroup(value string) MultiOp {
	group := groupName(w.rng.IntN(multiGroups))
	keys := groupKeys(group)
	op := MultiOp{Client: w.id, Group: group}
	switch p := w.rng.Float64(); {
	case p < 0.25:
		op.Kind, op.Value = MultiSet, value
		args := append([]string{"EVAL", setScript, fmt.Sprint(groupSize)}, keys...)
		w.multiCall(&op, append(args, op.Value)...)
	case p < 0.45:
		op.Kind, op.Value = MultiTx, value
		cmds := [][]string{append([]string{"EXISTS"}, keys...)}
		for _, k := range keys {
			cmds = append(cmds, []string{"SET", k, op.Value})
		}
		if a := w.multiTx(&op, cmds); a != nil {
			if n, ok := asInt(a[0]); ok {
				op.Found = n
			} else {
				op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected EXISTS reply %#v", a[0])
			}
		}
	case p < 0.7:
		op.Kind = MultiDel
		w.multiCall(&op, append([]string{"DEL"}, keys...)...)
	default:
		op.Kind = MultiRead
		w.multiCall(&op, append([]string{"MGET"}, keys...)...)
	}
	return op
}

// collGroup adds value to a collection group (with score n in the sorted set), deletes the
// group, or reads it. A delete every few adds keeps the groups small.
func (w *worker) collGroup(value string, n int) MultiOp {
	group := collGroupName(w.rng.IntN(collGroups))
	keys := collKeys(group)
	score := strconv.Itoa(n)
	op := MultiOp{Client: w.id, Group: group}
	switch p := w.rng.Float64(); {
	case p < 0.25:
		op.Kind, op.Value = MultiCollSet, value
		w.multiCall(&op, append(append([]string{"EVAL", collSetScript, "3"}, keys...), op.Value, score)...)
	case p < 0.45:
		op.Kind, op.Value = MultiCollTx, value
		cmds := [][]string{{"HLEN", keys[0]}, {"ZCARD", keys[1]}, {"LLEN", keys[2]},
			{"HSET", keys[0], value, "1"}, {"ZADD", keys[1], score, value}, {"LPUSH", keys[2], value}}
		if a := w.multiTx(&op, cmds); a != nil && !sizes(&op, a[:3]) {
			op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected EXEC reply %#v", a)
		}
	case p < 0.7:
		op.Kind = MultiCollDel
		w.multiCall(&op, append([]string{"DEL"}, keys...)...)
	default:
		op.Kind = MultiCollRead
		w.multiCall(&op, append([]string{"EVAL_RO", collReadScript, "3"}, keys...)...)
	}
	return op
}

// sizes reads the three sizes a collection group's request saw into op.Sizes.
func sizes(op *MultiOp, a []any) bool {
	if len(a) != 3 {
		return false
	}
	for _, x := range a {
		n, ok := x.(int64)
		if !ok {
			return false
		}
		op.Sizes = append(op.Sizes, n)
	}
	return true
}

// collSets reads collReadScript's reply: the three keys' fields, members and elements.
func collSets(v any) ([][]string, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return nil, false
	}
	sets := make([][]string, 3)
	for i, x := range a {
		elems, ok := x.([]any)
		if !ok {
			return nil, false
		}
		sets[i] = []string{}
		for _, e := range elems {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			sets[i] = append(sets[i], s)
		}
	}
	return sets, true
}

// multiCall runs one multi-key command on a READONLY connection (sent again ahead of it, in
// case the connection is new): a read (MGET, EVAL_RO) then reads a follower's own table, writes
// go to the leader.
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
	ok := false
	switch op.Kind {
	case MultiRead:
		a, isArray := v.([]any)
		if ok = isArray && len(a) == groupSize; ok {
			for _, x := range a {
				s, _ := x.(string)
				op.Values = append(op.Values, s)
			}
		}
	case MultiCollSet:
		a, _ := v.([]any)
		ok = sizes(op, a)
	case MultiCollRead:
		op.Sets, ok = collSets(v)
	default:
		op.Found, ok = asInt(v)
	}
	if !ok {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %#v", v)
	}
}

// multiTx runs queued in one MULTI/EXEC on a READONLY connection (the transaction goes to the
// leader) and returns EXEC's reply, one element per queued command; nil when the outcome is
// not OK.
func (w *worker) multiTx(op *MultiOp, queued [][]string) []any {
	cmds := append([][]string{{"READONLY"}, {"MULTI"}}, queued...)
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
		return nil
	}
	a, ok := vs[len(vs)-1].([]any)
	if !ok || len(a) != len(queued) {
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected EXEC reply %#v", vs[len(vs)-1])
		return nil
	}
	return a
}

// finalGroups reads every group from every node's own table (READONLY MGET, and EVAL_RO
// collReadScript for the collection groups): node -> group -> values, and node -> collection
// group -> its keys' contents.
func (c *cluster) finalGroups() (map[string]map[string][]string, map[string]map[string][][]string, error) {
	out, colls := map[string]map[string][]string{}, map[string]map[string][][]string{}
	for _, n := range c.nodes {
		cl := &client{addr: n.clientAddr}
		read := func(group string, cmd ...string) (any, error) {
			vs, errs := cl.pipe(3*time.Second, nil, []string{"READONLY"}, cmd)
			for _, err := range errs {
				if err != nil {
					return nil, fmt.Errorf("%s: %s %s: %w", n.id, cmd[0], group, err)
				}
			}
			return vs[1], nil
		}
		m, mc := map[string][]string{}, map[string][][]string{}
		for g := range multiGroups {
			group := groupName(g)
			v, err := read(group, append([]string{"MGET"}, groupKeys(group)...)...)
			if err != nil {
				cl.close()
				return nil, nil, err
			}
			a, ok := v.([]any)
			if !ok || len(a) != groupSize {
				cl.close()
				return nil, nil, fmt.Errorf("%s: MGET %s: reply %#v", n.id, group, v)
			}
			var values []string
			for _, x := range a {
				s, _ := x.(string)
				values = append(values, s)
			}
			m[group] = values
		}
		for g := range collGroups {
			group := collGroupName(g)
			v, err := read(group, append([]string{"EVAL_RO", collReadScript, "3"}, collKeys(group)...)...)
			if err != nil {
				cl.close()
				return nil, nil, err
			}
			sets, ok := collSets(v)
			if !ok {
				cl.close()
				return nil, nil, fmt.Errorf("%s: EVAL_RO %s: reply %#v", n.id, group, v)
			}
			mc[group] = sets
		}
		cl.close()
		out[n.id], colls[n.id] = m, mc
	}
	return out, colls, nil
}

// AtomicityResult is what checkAtomicity found.
type AtomicityResult struct {
	Requests int // eval-set, exec-set and del requests made, and their collection groups' kinds
	Reads    int // group reads that answered
	Aborted  int // requests whose entry aborted at apply (a leader change raced them)
	// Partial counts the partly applied requests found: groups seen split (by a read, or in a
	// node's table after healing) and requests whose reply saw a split group.
	Partial    int
	Violations []string // the first maxReported of them, described
	Unreported int      // violations found beyond those
	// CollRequests, CollReads and CollPartial are those of Requests, Reads and Partial that
	// were on collection groups.
	CollRequests, CollReads, CollPartial int
}

// maxReported bounds the violations a checker describes one by one (a broken build has many).
const maxReported = 20

// checkAtomicity checks the multi-key history and every node's groups after healing (final:
// node -> group -> values; finalColl: node -> collection group -> its keys' contents) for a
// request applied to some of its keys and not the others.
func checkAtomicity(ops []MultiOp, final map[string]map[string][]string, finalColl map[string]map[string][][]string) AtomicityResult {
	var res AtomicityResult
	writer := map[string]MultiOp{}
	for _, op := range ops {
		coll := collKind(op.Kind)
		switch {
		case op.Kind == MultiRead || op.Kind == MultiCollRead:
			if op.Outcome == OK {
				res.Reads++
				if coll {
					res.CollReads++
				}
			}
			continue
		case op.Kind == MultiSet || op.Kind == MultiTx || op.Kind == MultiCollSet || op.Kind == MultiCollTx:
			writer[op.Value] = op
		}
		res.Requests++
		if coll {
			res.CollRequests++
		}
		if strings.Contains(op.Err, "did not apply") || strings.Contains(op.Err, "nothing was applied") {
			res.Aborted++
		}
	}
	report := func(format string, args ...any) {
		if len(res.Violations) < maxReported {
			res.Violations = append(res.Violations, "atomicity: "+fmt.Sprintf(format, args...))
		} else {
			res.Unreported++
		}
	}
	partial := func(coll bool, format string, args ...any) {
		res.Partial++
		if coll {
			res.CollPartial++
		}
		report(format, args...)
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
		partial(false, "%s %s is split [%s]: %s", where, group, strings.Join(state, " "), strings.Join(culprits, "; "))
	}
	// collSplit checks a collection group's contents: every value in all three keys (a list
	// holds each at most once: a request applies once), and each one written by a request.
	collSplit := func(where, group string, sets [][]string) {
		keys := collKeys(group)
		in := map[string][]bool{} // value -> which keys hold it
		var values []string
		for i, set := range sets {
			for _, v := range set {
				if in[v] == nil {
					in[v] = make([]bool, len(keys))
					values = append(values, v)
				}
				if in[v][i] {
					report("%s %s: %s holds %s twice (a request applied twice)", where, group, keys[i], v)
				}
				in[v][i] = true
			}
		}
		sort.Strings(values)
		var culprits []string
		for _, v := range values {
			op, ok := writer[v]
			if !ok {
				report("%s %s holds %s, which no request wrote", where, group, v)
			}
			var on, off []string
			for i, k := range keys {
				if in[v][i] {
					on = append(on, k)
				} else {
					off = append(off, k)
				}
			}
			if len(off) == 0 {
				continue
			}
			what := v + " (written by no request)"
			if ok {
				what = op.String()
			}
			culprits = append(culprits, fmt.Sprintf("%s in %s, not in %s", what, strings.Join(on, " "), strings.Join(off, " ")))
		}
		if len(culprits) > 0 {
			partial(true, "%s %s is split (a request or a DEL applied in part): %s", where, group, strings.Join(culprits, "; "))
		}
	}
	for _, op := range ops {
		where := fmt.Sprintf("a read by c%d on %s at %.3fs saw", op.Client, op.Node, sec(op.Invoke))
		switch {
		case op.Outcome != OK:
		case op.Kind == MultiRead:
			split(where, op.Group, op.Values)
		case op.Kind == MultiCollRead:
			collSplit(where, op.Group, op.Sets)
		case op.Kind == MultiCollSet || op.Kind == MultiCollTx:
			if len(op.Sizes) != 3 || op.Sizes[0] != op.Sizes[1] || op.Sizes[1] != op.Sizes[2] {
				partial(true, "%s: the request saw the hash, sorted set and list at different sizes", op)
			}
		case op.Found != 0 && op.Found != groupSize:
			partial(op.Kind == MultiCollDel, "%s: the request saw %d of the %d keys set", op, op.Found, groupSize)
		}
	}
	nodes := make([]string, 0, len(final)+len(finalColl))
	for n := range final {
		nodes = append(nodes, n)
	}
	for n := range finalColl {
		if _, ok := final[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for g := range multiGroups {
			group := groupName(g)
			if values, ok := final[n][group]; ok {
				split("after healing, "+n+"'s", group, values)
			}
		}
		for g := range collGroups {
			group := collGroupName(g)
			if sets, ok := finalColl[n][group]; ok {
				collSplit("after healing, "+n+"'s", group, sets)
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
