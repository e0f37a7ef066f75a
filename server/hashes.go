package server

// Hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HDEL, HEXISTS, HINCRBY, HLEN, HSTRLEN, HKEYS,
// HVALS, HGETALL. A hash keeps its fields in insertion order, as a small Redis hash (a
// listpack) does, so HGETALL answers in Redis's order. Redisson's locks are hashes.

import (
	"slices"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
)

// editHash returns a copy of h (a new hash when nil) to change.
func editHash(h *fsm.Collection) *fsm.Collection {
	if h == nil {
		return &fsm.Collection{Type: fsm.TypeHash}
	}
	return &fsm.Collection{Type: fsm.TypeHash, Elems: slices.Clone(h.Elems)}
}

// setField sets field to value in h (a copy being changed) and reports whether it is new.
func setField(h *fsm.Collection, field, value []byte) bool {
	if i := h.HashIndex(field); i >= 0 {
		h.Elems[i+1] = value
		return false
	}
	h.Elems = append(h.Elems, field, value)
	return true
}

// checkValues checks every argument from args[first] on against the value size limit.
func (r *request) checkValues(first int) bool {
	for _, a := range r.args[first:] {
		if !r.checkValue(a) {
			return false
		}
	}
	return true
}

// HSET key field value [field value ...] -> the number of fields added.
func cmdHSet(r *request) {
	if n, ok := hashSet(r); ok {
		r.w.Int(n)
	}
}

// HMSET key field value [field value ...] -> +OK.
func cmdHMSet(r *request) {
	if _, ok := hashSet(r); ok {
		r.w.SimpleString("OK")
	}
}

func hashSet(r *request) (added int64, ok bool) {
	if len(r.args)%2 != 0 {
		r.w.Error(wrongArity(r.cmd.name))
		return 0, false
	}
	if !r.checkKey(r.args[1]) || !r.checkValues(2) {
		return 0, false
	}
	pairs := r.args[2:]
	ok = r.update(r.args[1], fsm.TypeHash, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		next := editHash(cur)
		added = 0
		for i := 0; i < len(pairs); i += 2 {
			if setField(next, pairs[i], pairs[i+1]) {
				added++
			}
		}
		return next, true, ""
	})
	return added, ok
}

// HSETNX key field value -> :1 when the field was set, :0 when it existed.
func cmdHSetNX(r *request) {
	key, field, value := r.args[1], r.args[2], r.args[3]
	if !r.checkKey(key) || !r.checkValues(2) {
		return
	}
	var set bool
	ok := r.update(key, fsm.TypeHash, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		if set = cur == nil || cur.HashIndex(field) < 0; !set {
			return nil, false, ""
		}
		next := editHash(cur)
		next.Elems = append(next.Elems, field, value)
		return next, true, ""
	})
	if ok {
		r.w.Int(b2i(set))
	}
}

// HDEL key field [field ...] -> the number of fields removed.
func cmdHDel(r *request) {
	fields := r.args[2:]
	var removed int64
	ok := r.update(r.args[1], fsm.TypeHash, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		removed = 0
		if cur == nil {
			return nil, false, ""
		}
		next := &fsm.Collection{Type: fsm.TypeHash, Elems: make([][]byte, 0, len(cur.Elems))}
		for i := 0; i < len(cur.Elems); i += 2 {
			if slices.ContainsFunc(fields, func(f []byte) bool { return string(f) == string(cur.Elems[i]) }) {
				removed++
				continue
			}
			next.Elems = append(next.Elems, cur.Elems[i], cur.Elems[i+1])
		}
		return next, removed > 0, ""
	})
	if ok {
		r.w.Int(removed)
	}
}

// HINCRBY key field increment -> the field's new value (0 before, when missing).
func cmdHIncrBy(r *request) {
	key, field := r.args[1], r.args[2]
	by, ok := parseInt(r.args[3])
	if !ok {
		r.w.Error(errNotInt)
		return
	}
	if !r.checkKey(key) || !r.checkValue(field) {
		return
	}
	var result int64
	ok = r.update(key, fsm.TypeHash, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		var n int64
		if cur != nil {
			if v, found := cur.HashGet(field); found {
				var isInt bool
				if n, isInt = parseInt(v); !isInt {
					return nil, false, "ERR hash value is not an integer"
				}
			}
		}
		if by < 0 && n < 0 && by < -1<<63-n || by > 0 && n > 0 && by > 1<<63-1-n {
			return nil, false, "ERR increment or decrement would overflow"
		}
		result = n + by
		next := editHash(cur)
		setField(next, field, strconv.AppendInt(nil, result, 10))
		return next, true, ""
	})
	if ok {
		r.w.Int(result)
	}
}

// HGET key field -> the field's value, or nil.
func cmdHGet(r *request) {
	h, ok := r.readTyped(r.args[1], fsm.TypeHash)
	if !ok {
		return
	}
	if v, found := hashGet(h, r.args[2]); found {
		r.w.Bulk(v)
	} else {
		r.w.Null()
	}
}

// HMGET key field [field ...] -> each field's value, nil for a missing one.
func cmdHMGet(r *request) {
	h, ok := r.readTyped(r.args[1], fsm.TypeHash)
	if !ok {
		return
	}
	fields := r.args[2:]
	r.w.Array(len(fields))
	for _, f := range fields {
		if v, found := hashGet(h, f); found {
			r.w.Bulk(v)
		} else {
			r.w.Null()
		}
	}
}

// hashGet is HashGet on a hash that may be missing (nil).
func hashGet(h *fsm.Collection, field []byte) ([]byte, bool) {
	if h == nil {
		return nil, false
	}
	return h.HashGet(field)
}

// HEXISTS key field -> :1 or :0.
func cmdHExists(r *request) {
	if h, ok := r.readTyped(r.args[1], fsm.TypeHash); ok {
		_, found := hashGet(h, r.args[2])
		r.w.Int(b2i(found))
	}
}

// HSTRLEN key field -> the length of the field's value, 0 when missing.
func cmdHStrLen(r *request) {
	if h, ok := r.readTyped(r.args[1], fsm.TypeHash); ok {
		v, _ := hashGet(h, r.args[2])
		r.w.Int(int64(len(v)))
	}
}

// HLEN key -> the number of fields.
func cmdHLen(r *request) {
	if h, ok := r.readTyped(r.args[1], fsm.TypeHash); ok {
		r.w.Int(int64(collectionLen(h)))
	}
}

// collectionLen is the number of elements of a collection that may be missing (nil).
func collectionLen(c *fsm.Collection) int {
	if c == nil {
		return 0
	}
	return c.Len()
}

// HKEYS key, HVALS key -> the fields, the values, in the hash's order.
func cmdHKeys(r *request) { replyHashHalf(r, 0) }
func cmdHVals(r *request) { replyHashHalf(r, 1) }

func replyHashHalf(r *request, offset int) {
	h, ok := r.readTyped(r.args[1], fsm.TypeHash)
	if !ok {
		return
	}
	r.w.Array(collectionLen(h))
	if h != nil {
		for i := offset; i < len(h.Elems); i += 2 {
			r.w.Bulk(h.Elems[i])
		}
	}
}

// HGETALL key -> field, value, ... (a map in RESP3).
func cmdHGetAll(r *request) {
	h, ok := r.readTyped(r.args[1], fsm.TypeHash)
	if !ok {
		return
	}
	r.w.Map(collectionLen(h))
	if h != nil {
		for _, e := range h.Elems {
			r.w.Bulk(e)
		}
	}
}
