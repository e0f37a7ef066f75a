package server

import (
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// fakeIndexBase is the log index a script's effects are predicted at: all of them, as they will
// apply as one entry. Real log indexes never get near it, so a lock whose LeaseRev is at or above
// it was set by the script itself. So is one whose Token is: the scratch table's token counter
// starts at the real tokens copied into it, far below, and a grant's token is never below its
// entry's index (fsm.Token), so every token the script's grants are predicted to get is at or
// above fakeIndexBase, one more for each.
const fakeIndexBase = 1 << 62

// overlay is the view a running script sees: the leader's view with the script's own effects
// applied on top, as they will apply through the log. It collects the commands to replicate and
// the results it predicted for them, so the server can check the prediction once they applied.
type overlay struct {
	base     node.View
	tbl      *scratchTable // nil until the first load
	delta    []dbDelta     // change in the number of keys, by database: in deltaBuf until a third database
	deltaBuf [2]dbDelta
	cmds     []fsm.Command
	want     []fsm.Result
	// libs are the libraries as the transaction's own FUNCTION commands left them, nil while
	// it has none.
	libs *fsm.Libraries
}

var _ node.View = (*overlay)(nil)

// scratchTable is where an overlay applies the script's effects: m holds the keys copied from
// the base (loaded, present or absent) with the effects on them. It is kept for the next
// overlay once one is released: making one for every script run (fsm.New's B-tree and maps,
// the set) would be a large share of the allocations of the compare-and-delete script Redlock
// libraries send.
type scratchTable struct {
	m      *fsm.Machine
	loaded map[string]bool
}

// has reports whether key was loaded into t (none: nil).
func (t *scratchTable) has(key string) bool { return t != nil && t.loaded[key] }

var scratchTables = sync.Pool{New: func() any { return &scratchTable{m: fsm.New(), loaded: map[string]bool{}} }}

// maxPooledKeys bounds the scratch tables kept: one that a script filled with more keys goes
// to the collector with its memory.
const maxPooledKeys = 256

func newOverlay(base node.View) *overlay {
	return &overlay{base: base}
}

// load copies key from base into the scratch table, once. Every use of the table follows a
// load, so the first takes it from the pool: a script that only reads (or never calls redis)
// takes none.
func (o *overlay) load(key []byte) {
	if o.tbl.has(string(key)) {
		return
	}
	if o.tbl == nil {
		o.tbl = scratchTables.Get().(*scratchTable)
	}
	o.tbl.loaded[string(key)] = true
	if l, _, held := o.base.Lookup(key); held {
		o.tbl.m.Put(key, l)
	}
}

// release gives the scratch table back once the script or transaction was evaluated. Only the
// overlay's cmds and want are read after that, and they hold nothing the reset changes (what
// they took from the scratch table, an owner's bytes, is immutable: fsm.Machine.Reset). Any
// other use of the overlay after it fails loudly (no base).
func (o *overlay) release() {
	st := o.tbl
	o.base, o.tbl = nil, nil
	if st == nil || len(st.loaded) > maxPooledKeys {
		return
	}
	st.m.Reset()
	clear(st.loaded)
	scratchTables.Put(st)
}

func (o *overlay) Lookup(key []byte) (fsm.Lock, time.Duration, bool) {
	if !o.tbl.has(string(key)) {
		return o.base.Lookup(key)
	}
	l, held := o.tbl.m.Get(key)
	switch {
	case !held:
		return fsm.Lock{}, 0, false
	case l.LeaseMs == 0:
		return l, 0, true
	case l.LeaseRev >= fakeIndexBase:
		return l, time.Duration(l.LeaseMs) * time.Millisecond, true // set by this script: full
	}
	_, rem, _ := o.base.Lookup(key)
	return l, rem, true
}

func (o *overlay) Len(db int) int {
	n := o.base.Len(db)
	for _, d := range o.delta {
		if d.db == byte(db) {
			n += d.n
		}
	}
	return n
}

// Kinds and Holders read the base: the lock kinds' commands do not run in scripts (noscript),
// so a script changes no holder.
func (o *overlay) Kinds(key []byte) (fsm.Kinds, time.Duration) { return o.base.Kinds(key) }

func (o *overlay) Slots() fsm.Slots { return o.base.Slots() }

func (o *overlay) Holders(key []byte, fn func(fsm.Lock, time.Duration) bool) { o.base.Holders(key, fn) }

func (o *overlay) Waiters(key []byte, fn func(fsm.Waiter, time.Duration) bool) {
	o.base.Waiters(key, fn)
}

func (o *overlay) QueuedKeys(fn func([]byte) bool) { o.base.QueuedKeys(fn) }

func (o *overlay) Script(sha string) (string, bool) { return o.base.Script(sha) }

func (o *overlay) ScriptCache() (scripts, bytes int) { return o.base.ScriptCache() }
func (o *overlay) User(name string) (string, bool)   { return o.base.User(name) }
func (o *overlay) Users() map[string]string          { return o.base.Users() }
func (o *overlay) Format() byte                      { return o.base.Format() }

func (o *overlay) Libraries() *fsm.Libraries {
	if o.libs != nil {
		return o.libs
	}
	return o.base.Libraries()
}

// apply records cmds as the script's effects and returns the results they will have if nothing
// else changes their keys first (the keys' pending marks see to that on a stable leader).
//
// A command predicted to fail its guard (fsm.Result.GuardFailed) changes nothing, so it is not
// replicated: in the script's entry it would abort every effect, those the script saw succeed
// included. The script still sees its result.
func (o *overlay) apply(cmds []fsm.Command) []fsm.Result {
	out := make([]fsm.Result, len(cmds))
	for i, c := range cmds {
		switch c.Kind {
		case fsm.KindStoreLibrary, fsm.KindDeleteLibrary, fsm.KindFlushLibraries:
			// Not the scratch table's (it starts with no libraries): the base's, changed.
			before := o.Libraries()
			_, existed := before.Get(string(c.Key))
			if c.Kind == fsm.KindFlushLibraries {
				existed = before.Len() > 0
			}
			o.libs = before.After(c)
			out[i] = fsm.Result{Status: fsm.StatusLibrary, Existed: existed}
			o.cmds = append(o.cmds, c)
			o.want = append(o.want, out[i])
			continue
		}
		o.load(c.Key)
		if c.Match.Kind == fsm.MatchToken && c.Match.Token >= fakeIndexBase {
			// The holder is a lock this script set: its real token is not known until it
			// applies, so guard by its owner instead.
			l, _ := o.tbl.m.Get(c.Key)
			c.Match = fsm.Match{Kind: fsm.MatchOwner, Owner: l.Owner}
		}
		if c.Match.Kind == fsm.MatchRev && c.Match.Rev >= fakeIndexBase {
			// The collection was written by this script: an earlier command of the same
			// entry, whose guard vouches for the state this one finds (an entry applies in
			// order, all or nothing), and whose real revision is not known until it applies.
			c.Match = fsm.Match{Kind: fsm.MatchAny}
		}
		_, before := o.tbl.m.Get(c.Key)
		out[i] = o.tbl.m.Apply(fakeIndexBase, c)
		if out[i].GuardFailed() {
			continue
		}
		_, after := o.tbl.m.Get(c.Key)
		switch {
		case before && !after:
			o.addDelta(c.Key, -1)
		case !before && after:
			o.addDelta(c.Key, 1)
		}
		o.cmds = append(o.cmds, c)
		o.want = append(o.want, out[i])
	}
	return out
}

// appliedAsPredicted reports whether the entry applied (it was not aborted) with the statuses
// the overlay predicted for its commands.
func (o *overlay) appliedAsPredicted(res []fsm.Result) bool {
	if fsm.Aborted(res) {
		return false
	}
	for i := range o.want {
		if i >= len(res) || res[i].Status != o.want[i].Status {
			return false
		}
	}
	return true
}

// dbDelta is the change a script made to the number of keys of one database.
type dbDelta struct {
	db byte
	n  int
}

func (o *overlay) addDelta(key []byte, d int) {
	for i := range o.delta {
		if o.delta[i].db == key[0] {
			o.delta[i].n += d
			return
		}
	}
	if o.delta == nil {
		o.delta = o.deltaBuf[:0]
	}
	o.delta = append(o.delta, dbDelta{db: key[0], n: d})
}

// Ascend lists the view's keys from from up, in key order: the base's, with the script's own
// changes over them (a key it deleted is gone, one it created appears).
func (o *overlay) Ascend(from []byte, fn func(key []byte, l fsm.Lock) bool) {
	if o.tbl == nil {
		o.base.Ascend(from, fn) // the script changed nothing
		return
	}
	var mine []string // keys the script loaded (and so may have changed), from from up, in order
	for k := range o.tbl.loaded {
		if k >= string(from) {
			mine = append(mine, k)
		}
	}
	slices.Sort(mine)
	i, stopped := 0, false
	// emit calls fn for the script's state of key, if it holds the key.
	emit := func(key string) bool {
		if l, held := o.tbl.m.Get([]byte(key)); held && !fn([]byte(key), l) {
			stopped = true
			return false
		}
		return true
	}
	o.base.Ascend(from, func(key []byte, l fsm.Lock) bool {
		k := string(key)
		for ; i < len(mine) && mine[i] < k; i++ {
			if !emit(mine[i]) {
				return false
			}
		}
		if o.tbl.loaded[k] {
			if i < len(mine) && mine[i] == k {
				i++
			}
			return emit(k)
		}
		if !fn(key, l) {
			stopped = true
			return false
		}
		return true
	})
	for ; !stopped && i < len(mine); i++ {
		emit(mine[i])
	}
}
