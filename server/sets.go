package server

// Set commands: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS. A set keeps its members as
// Redis 7.0 does while they fit an intset (every member a canonical decimal int64, at most
// maxIntsetEntries of them): in numeric order. Past that, or once a member is not such an
// integer, Redis keeps a hash table whose order is not defined; ours is insertion order.

import (
	"slices"

	"github.com/raftlock/raftlock/fsm"
)

// maxIntsetEntries is Redis 7.0's default set-max-intset-entries: a set of more integers is a
// hash table.
const maxIntsetEntries = 512

// intMember parses a member the way Redis decides whether it fits an intset.
func intMember(m []byte) (int64, bool) { return parseInt(m) }

// isIntset reports whether s (nil: a new set) is in Redis's intset encoding: few enough members,
// every one an integer, in numeric order. A set that once left it (a non-integer added, then
// removed) may look like one again; Redis's hash table order is not defined, so either order
// is Redis's.
func isIntset(s *fsm.Collection) bool {
	if s == nil {
		return true
	}
	if len(s.Elems) > maxIntsetEntries {
		return false
	}
	prev := int64(0)
	for i, m := range s.Elems {
		v, ok := intMember(m)
		if !ok || i > 0 && v <= prev {
			return false
		}
		prev = v
	}
	return true
}

// addMembers returns s (nil: a new set) with members added in Redis's order, and how many
// were new. s is not changed.
func addMembers(s *fsm.Collection, members [][]byte) (*fsm.Collection, int64) {
	next := &fsm.Collection{Type: fsm.TypeSet}
	if s != nil {
		next.Elems = slices.Clone(s.Elems)
	}
	intset := isIntset(s)
	var added int64
	for _, m := range members {
		v, isInt := intMember(m)
		intset = intset && isInt && len(next.Elems) < maxIntsetEntries
		if intset {
			i, found := slices.BinarySearchFunc(next.Elems, v, func(e []byte, v int64) int {
				ev, _ := intMember(e)
				switch {
				case ev < v:
					return -1
				case ev > v:
					return 1
				}
				return 0
			})
			if !found {
				next.Elems = slices.Insert(next.Elems, i, m)
				added++
			}
			continue
		}
		if next.Index(m) < 0 {
			next.Elems = append(next.Elems, m)
			added++
		}
	}
	return next, added
}

// SADD key member [member ...] -> the number of members added.
func cmdSAdd(r *request) {
	if !r.checkKey(r.args[1]) || !r.checkValues(2) {
		return
	}
	members := r.args[2:]
	var added int64
	ok := r.update(r.args[1], fsm.TypeSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		var next *fsm.Collection
		next, added = addMembers(cur, members)
		return next, added > 0, ""
	})
	if ok {
		r.w.Int(added)
	}
}

// SREM key member [member ...] -> the number of members removed. Removing the last one deletes
// the key.
func cmdSRem(r *request) {
	members := r.args[2:]
	var removed int64
	ok := r.update(r.args[1], fsm.TypeSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		removed = 0
		if cur == nil {
			return nil, false, ""
		}
		next := &fsm.Collection{Type: fsm.TypeSet, Elems: make([][]byte, 0, len(cur.Elems))}
		for _, e := range cur.Elems {
			if slices.ContainsFunc(members, func(m []byte) bool { return string(m) == string(e) }) {
				removed++
				continue
			}
			next.Elems = append(next.Elems, e)
		}
		return next, removed > 0, ""
	})
	if ok {
		r.w.Int(removed)
	}
}

// isMember reports whether member is in s, a set that may be missing (nil).
func isMember(s *fsm.Collection, member []byte) bool {
	return s != nil && s.Index(member) >= 0
}

// SISMEMBER key member -> :1 or :0.
func cmdSIsMember(r *request) {
	if s, ok := r.readTyped(r.args[1], fsm.TypeSet); ok {
		r.w.Int(b2i(isMember(s, r.args[2])))
	}
}

// SMISMEMBER key member [member ...] -> :1 or :0 for each member.
func cmdSMIsMember(r *request) {
	s, ok := r.readTyped(r.args[1], fsm.TypeSet)
	if !ok {
		return
	}
	members := r.args[2:]
	r.w.Array(len(members))
	for _, m := range members {
		r.w.Int(b2i(isMember(s, m)))
	}
}

// SCARD key -> the number of members.
func cmdSCard(r *request) {
	if s, ok := r.readTyped(r.args[1], fsm.TypeSet); ok {
		r.w.Int(int64(collectionLen(s)))
	}
}

// SMEMBERS key -> the members (a set in RESP3).
func cmdSMembers(r *request) {
	s, ok := r.readTyped(r.args[1], fsm.TypeSet)
	if !ok {
		return
	}
	r.w.Set(collectionLen(s))
	if s != nil {
		for _, m := range s.Elems {
			r.w.Bulk(m)
		}
	}
}
