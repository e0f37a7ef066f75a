package server

// fifoMap is a map that keeps the entries put last: past a bound, putting one forgets the entry
// put longest ago. A key put again counts as put now. The zero value is ready.
//
// It is the map, plus the keys in the order they were put, oldest first from head. A key
// deleted or put again leaves a stale element behind (its seq no longer matches the map's),
// skipped when it comes first and dropped when order is compacted, so that order stays within
// twice the map's size plus the bound.
type fifoMap[K comparable, V any] struct {
	m     map[K]fifoEntry[V]
	order []fifoKey[K]
	head  int
	seq   uint64
}

type fifoEntry[V any] struct {
	v   V
	seq uint64
}

type fifoKey[K comparable] struct {
	k   K
	seq uint64
}

// put enters k with v as the newest entry, forgetting the oldest past max entries: it returns
// the key it forgot, if any.
func (f *fifoMap[K, V]) put(k K, v V, max int) (forgot K, ok bool) {
	if f.m == nil {
		f.m = map[K]fifoEntry[V]{}
	}
	f.seq++
	f.m[k] = fifoEntry[V]{v: v, seq: f.seq}
	f.order = append(f.order, fifoKey[K]{k: k, seq: f.seq})
	for len(f.m) > max {
		o := f.order[f.head]
		f.order[f.head] = fifoKey[K]{}
		f.head++
		if cur, live := f.m[o.k]; live && cur.seq == o.seq {
			delete(f.m, o.k)
			forgot, ok = o.k, true
		}
	}
	if live := len(f.order) - f.head; live > len(f.m)+max || f.head > live {
		f.compact()
	}
	return forgot, ok
}

// compact drops order's stale elements and the room before head.
func (f *fifoMap[K, V]) compact() {
	kept := f.order[:0]
	for _, o := range f.order[f.head:] {
		if cur, ok := f.m[o.k]; ok && cur.seq == o.seq {
			kept = append(kept, o)
		}
	}
	clear(f.order[len(kept):])
	f.order, f.head = kept, 0
}

// get returns k's value.
func (f *fifoMap[K, V]) get(k K) (V, bool) {
	e, ok := f.m[k]
	return e.v, ok
}

// del forgets k.
func (f *fifoMap[K, V]) del(k K) { delete(f.m, k) }

// take returns k's value and forgets it.
func (f *fifoMap[K, V]) take(k K) (V, bool) {
	e, ok := f.m[k]
	delete(f.m, k)
	return e.v, ok
}

// len is the number of entries.
func (f *fifoMap[K, V]) len() int { return len(f.m) }
