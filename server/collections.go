package server

// What the hash, set, sorted set and list commands share: looking a key's collection up with
// Redis's WRONGTYPE check, and replicating a change as one Write of the whole new value
// (DESIGN.md §3), guarded by the revision the leader saw.

import (
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

const errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// errTooManyElements is the refusal of a change that would grow a collection past MaxElements.
func (r *request) errTooManyElements() string {
	return "ERR collection is too large: raftlock collections hold at most " + itoa(int64(r.s.cfg.MaxElements)) + " elements (--max-elements)"
}

// lookupTyped returns key's lock and its collection of type t: nil when the key is missing,
// wrong when it holds another type.
func lookupTyped(v node.View, key []byte, t fsm.Type) (l fsm.Lock, c *fsm.Collection, wrong bool) {
	l, _, held := v.Lookup(key)
	switch {
	case !held:
		return l, nil, false
	case l.Type() != t:
		return l, nil, true
	}
	return l, l.Value, false
}

// writeOf is the Write that replaces key's collection cur (nil: the key is missing; l is its
// lock) by next, keeping the key's lease. An empty or nil next deletes the key, as an emptied
// collection does in Redis.
func writeOf(key []byte, l fsm.Lock, cur, next *fsm.Collection) fsm.Command {
	cmd := fsm.Command{Kind: fsm.KindWrite, Key: key, Value: next, KeepLease: true, Match: fsm.Match{Kind: fsm.MatchAbsent}}
	if cur != nil {
		cmd.Match = fsm.Match{Kind: fsm.MatchRev, Rev: l.Value.Rev}
	}
	if next != nil && len(next.Elems) == 0 {
		cmd.Value = nil
	}
	return cmd
}

// change computes a command's new value of a collection from its current one (nil when the key
// is missing) and records its reply. write false makes the command a read (nothing changed);
// errMsg, when set, is replied instead. It may run more than once (node.Eval): it must reset
// whatever it records.
type change func(cur *fsm.Collection) (next *fsm.Collection, write bool, errMsg string)

// update runs one change of key's collection of type t, replicated when it writes. It reports
// whether the caller may reply; otherwise it has replied an error (WRONGTYPE among them).
func (r *request) update(key []byte, t fsm.Type, fn change) bool {
	var wrong bool
	var msg string
	res, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		l, cur, w := lookupTyped(v, key, t)
		wrong, msg = w, ""
		if wrong {
			return nil
		}
		next, write, m := fn(cur)
		if msg = m; msg != "" || !write {
			return nil
		}
		if next != nil && next.Len() > r.s.cfg.MaxElements && (cur == nil || next.Len() > cur.Len()) {
			msg = r.errTooManyElements()
			return nil
		}
		return []fsm.Command{writeOf(key, l, cur, next)}
	})
	switch {
	case err != nil:
		r.replyError(err)
	case wrong:
		r.w.Error(errWrongType)
	case msg != "":
		r.w.Error(msg)
	case len(res) == 1 && res[0].Status != fsm.StatusWritten:
		// The key changed between the evaluation and the apply (a leadership change): nothing
		// was written.
		r.w.Error(errAborted)
	default:
		return true
	}
	return false
}

// readTyped reads key's collection of type t (nil when the key is missing). On an error
// (WRONGTYPE among them) it has replied and returns ok false. The collection is immutable: it
// may be read after the view is gone.
func (r *request) readTyped(key []byte, t fsm.Type) (c *fsm.Collection, ok bool) {
	var wrong bool
	_, err := r.exec([][]byte{key}, func(v node.View) []fsm.Command {
		_, c, wrong = lookupTyped(v, key, t)
		return nil
	})
	switch {
	case err != nil:
		r.replyError(err)
		return nil, false
	case wrong:
		r.w.Error(errWrongType)
		return nil, false
	}
	return c, true
}

// readString reads a string key for a command that fails on any other type (GET, GETRANGE).
func (r *request) readString(key []byte) (l fsm.Lock, held, ok bool) {
	l, _, held, ok = r.readKey(key)
	if ok && held && l.Value != nil {
		r.w.Error(errWrongType)
		return l, held, false
	}
	return l, held, ok
}
