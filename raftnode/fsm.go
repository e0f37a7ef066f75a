package raftnode

import (
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// machineFSM adapts the lock table to raft. It applies batches under Replica.mu, tells the lock
// policy each result (its lease timers), and snapshots through the table's copy-on-write copy.
type machineFSM struct{ n *Replica }

var (
	_ raft.BatchingFSM = machineFSM{}
	_ raft.FSMSnapshot = (*tableSnapshot)(nil)
)

func (f machineFSM) Apply(l *raft.Log) interface{} { return f.ApplyBatch([]*raft.Log{l})[0] }

// maxApplyScratch is the most commands ApplyBatch's decoding buffer keeps room for between
// batches (about 150 bytes each).
const maxApplyScratch = 8192

// ApplyBatch applies committed entries in order; each entry is one request's commands and its
// response is an *entryResponse with their results (none for an entry that does not decode).
// The results of the whole batch share one array, and the responses another, so an entry of one
// command costs no allocation of its own (raft's interface{} holds the pointer). The apply time
// is read once per batch: it is after every client in the batch sent its request, which is all
// a lease timer needs. The change hook is told the changed keys after the view lock is
// released; raft resolves the batch's futures only once ApplyBatch returns, so every hook runs
// before its reply goes out.
func (f machineFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	n := f.n
	n.stats.batch.Observe(uint64(len(logs)))
	out := make([]interface{}, len(logs))
	var (
		changed [][]byte
		bad     []badEntry
		members bool                               // the member table changed
		users   bool                               // the ACL users changed
		flushed bool                               // a FLUSHDB or FLUSHALL deleted keys: any key may have changed
		moved   bool                               // a slot move's command applied
		planned bool                               // a groups plan applied
		configs []*raft.Log                        // committed configurations, for membership
		publish = n.publishScratch[:0]             // reused: the messages to deliver
		cmds    = n.applyScratch[:0]               // reused: one entry's commands, decoded
		used    int                                // the most of cmds any entry used, cleared at the end
		ends    []int                              // reused: where each request's commands end in cmds
		results = make([]fsm.Result, 0, len(logs)) // handed out to the requests: fresh for every batch
		resps   = make([]entryResponse, len(logs))
	)
	now := n.cfg.Now()
	w := n.watchers()
	notify := w.KeyEvent     // nil: nobody listens, record no key events
	lockEnded := w.LockEnded // nil: record no lock ends
	var flushes []flushedAt  // the locks each of an entry's flushes removes, found before it applied
	n.mu.Lock()
	n.mu.machine.SetLeaseClock(n.leaseClock(now)) // every lease this batch sets ends LeaseMs after now
	for i, l := range logs {
		if l.Type != raft.LogCommand {
			if l.Type == raft.LogConfiguration {
				configs = append(configs, l)
			}
			n.mu.machine.Advance(l.Index)
			continue
		}
		out[i] = &resps[i]
		at := node.LogPosition{Index: l.Index, Term: l.Term} // where its messages come from
		var err error
		cmds, ends, err = fsm.DecodeEntries(cmds[:0], ends[:0], l.Data)
		if err != nil {
			// Only our own encoder writes the log, so this is a bug or disk corruption that the
			// store's checks missed. Every node sees the same bytes and skips them the same way.
			// It is logged once mu is released.
			bad = append(bad, badEntry{l.Index, err})
			n.mu.machine.Advance(l.Index)
			continue
		}
		used = max(used, len(cmds))
		results = slices.Grow(results, len(cmds)) // one allocation for the entry's requests
		n.mu.machine.NoteFormat(fsm.FormatOf(l.Data))
		// Each request's commands, applied whole or not at all (a failed guard aborts them). A
		// batch's requests share its index; the leader's pending marks keep two requests on one
		// key out of one batch (an expiry round or a FLUSHDB aside, whose commands the guards'
		// tokens and revisions keep apart just the same).
		start, from := len(results), 0
		for _, end := range ends {
			if lockEnded != nil {
				flushed := flushedLocks(n.mu.machine, at, cmds[from:end], w.LocksWatched)
				if flushed != nil {
					flushes = append(flushes, flushedAt{at: from, locks: flushed})
				}
			}
			results = n.mu.machine.ApplyEntry(results, l.Index, cmds[from:end])
			from = end
		}
		res := results[start:len(results):len(results)]
		if len(ends) > 1 {
			resps[i].ends = slices.Clone(ends)
		}
		for j, c := range cmds {
			n.locks.Applied(n.mu.machine, fsm.LeaseKey(c, res[j]), l.Index, res[j])
			if changesLock(res[j]) {
				changed = append(changed, changedKey(c, res[j]))
			}
			if w.Waited != nil {
				if seq, granted, ok := waiterEnd(c, res[j]); ok {
					publish = append(publish, message{channel: fsm.BaseKey(c.Key), waiter: seq, token: res[j].Token, granted: granted})
				}
			}
			flushed = flushed || res[j].Status == fsm.StatusFlushed && res[j].Existed
			moved = moved || res[j].Status == fsm.StatusSlots
			planned = planned || res[j].Status == fsm.StatusGroupsPlanned
			members = members || res[j].Status == fsm.StatusMember
			users = users || res[j].Status == fsm.StatusUser
			if res[j].Status == fsm.StatusPublished {
				publish = append(publish, message{at: at, res: &res[j], channel: c.Key, body: c.Owner, shard: c.Kind == fsm.KindShardPublish})
			} else if ev := node.KeyEventOf(c, res[j]); ev != 0 && notify != nil {
				publish = append(publish, message{at: at, channel: c.Key, event: ev})
			}
			if lockEnded == nil {
				continue
			}
			if res[j].Ended != 0 {
				publish = append(publish, message{at: at, channel: c.Key, token: res[j].Ended, end: node.LockEndOf(c)})
			}
			if c.Kind != fsm.KindFlush {
				continue
			}
			var walked []message
			if len(flushes) > 0 && flushes[0].at <= j {
				walked, flushes = flushes[0].locks, flushes[1:]
			}
			if res[j].Status == fsm.StatusFlushed {
				publish = append(publish, walked...)
				publish = append(publish, message{channel: c.Key, end: node.LockFlushed}) // LocksFlushed
			}
		}
		flushes = flushes[:0]
		resps[i].results = res
	}
	n.keys.Store(int64(n.mu.machine.Len()))
	formatChanged := n.noteFormatLocked()
	if planned {
		n.notePlanLocked()
	}
	if moved {
		n.noteSlotsLocked()
		n.notePlanLocked()
		// Keys came or went whole: every waiter's queue and every client's cache may have changed.
		flushed = true
	}
	// The decoded commands alias the entries' bytes: cleared, so the buffer kept for the next
	// batch holds on to none of them. A buffer a huge batch grew is not kept.
	clear(cmds[:used])
	if cap(cmds) <= maxApplyScratch {
		n.applyScratch = cmds[:0]
	}
	if flushed {
		n.locks.Changed(n.mu.machine, nil, true)
	} else if len(changed) > 0 {
		n.locks.Changed(n.mu.machine, changed, false)
	}
	var cluster string
	if members {
		cluster = n.mu.machine.ClusterID()
	}
	n.mu.Unlock()
	if members || formatChanged {
		n.cluster.Changed(cluster) // the cluster ID, and the announces that wait for the format
	}
	for _, b := range bad {
		n.log.Error("undecodable log entry", "index", b.index, "err", b.err)
	}
	for _, l := range configs {
		n.cluster.Configured(l.Index, raft.DecodeConfiguration(l.Data))
	}
	if members {
		n.leaderChange.notify() // the leader's client address may be known now
	}
	if w.UsersChanged != nil && users {
		w.UsersChanged() // before anyone hears back: an ACL SETUSER's reply finds its rules in force
	}
	if flushed {
		changed = nil // nil: every key
	}
	if w.Changed != nil && (len(changed) > 0 || flushed) {
		w.Changed(visibleKeys(changed))
	}
	// In log order, after every change of the batch and before anyone hears back: a subscriber
	// told "released" finds the key free on this node.
	deliver := w.Published
	for _, m := range publish {
		switch {
		case m.waiter != 0:
			token := m.token
			if !m.granted {
				token = 0
			}
			w.Waited(m.waiter, m.channel, token)
		case m.end == node.LockFlushed && m.token == 0:
			if w.LocksFlushed != nil {
				w.LocksFlushed(m.channel)
			}
		case m.end != 0:
			lockEnded(m.at, m.channel, m.token, m.end)
		case m.event != 0 && notify != nil:
			notify(m.at, m.channel, m.event)
		case m.event == 0 && deliver != nil:
			m.res.Receivers = deliver(m.at, m.channel, m.body, m.shard)
		}
	}
	// The messages alias the entries' bytes and the results: cleared, as the commands are.
	clear(publish)
	if cap(publish) <= maxApplyScratch {
		n.publishScratch = publish[:0]
	}
	// Every hook has run: the leader's own group commits are answered now, not after raft
	// hands their futures to another goroutine.
	n.answerApplied(logs, out)
	return out
}

// entryResponse is what ApplyBatch answers for an entry: one result per command, none when the
// entry did not decode. For a batch of requests (group commit), ends says where each request's
// results end.
type entryResponse struct {
	results []fsm.Result
	ends    []int
}

// request returns the results of request i of an entry that carried n requests, or nil when
// the entry is not what the proposer sent.
func (r *entryResponse) request(i, n int) []fsm.Result {
	switch {
	case r.ends == nil && n == 1:
		return r.results
	case len(r.ends) != n || i >= n:
		return nil
	case i == 0:
		return r.results[:r.ends[0]:r.ends[0]]
	}
	return r.results[r.ends[i-1]:r.ends[i]:r.ends[i]]
}

// message is one applied PUBLISH or SPUBLISH, or with event a key's deletion or expiry, or with
// end a lock's end (channel is then the key; token the lock's) or, with end LockFlushed and no
// token, a flush (channel is its database, empty for all), for delivery once the batch is
// applied. Its bytes alias the log entry's. An aborted entry's messages are not delivered: they
// were not applied.
type message struct {
	at            node.LogPosition // its entry, for the hooks that filter subscribers by it
	res           *fsm.Result      // its result, where the receivers on this node are counted
	channel, body []byte
	shard         bool
	event         node.KeyEvent
	token         fsm.Token
	end           node.LockEnd
	// waiter: a waiter's end (node.Watchers.Waited): its place; token is its lock's when granted.
	waiter  fsm.Token
	granted bool
}

// flushedAt are the locks a request's flush (its commands start at cmds[at]) removes.
type flushedAt struct {
	at    int
	locks []message
}

// flushedLocks returns the lock ends of the locks a FLUSHDB or FLUSHALL among cmds (of the entry
// at at) removes, read from m before they apply: nil when cmds has no flush or nobody on this node listens
// (watched). A flush walks the database it empties (FLUSHALL: every one) here, on the apply
// path, only while someone does.
func flushedLocks(m *fsm.Machine, at node.LogPosition, cmds []fsm.Command, watched func() bool) []message {
	if watched == nil || !watched() { // a read of a counter, for every request applied
		return nil
	}
	i := slices.IndexFunc(cmds, func(c fsm.Command) bool { return c.Kind == fsm.KindFlush })
	if i < 0 {
		return nil
	}
	db := cmds[i].Key
	out := []message{}
	collect := func(key string, l fsm.Lock) {
		if l.Value == nil && fsm.IsLockKey(key) {
			out = append(out, message{at: at, channel: []byte(key), token: l.Token, end: node.LockFlushed})
		}
	}
	if len(db) == 0 {
		m.Scan(func(key string, l fsm.Lock) bool { collect(key, l); return true })
		return out
	}
	m.Ascend(string(db), func(key string, l fsm.Lock) bool {
		if key[0] != db[0] {
			return false
		}
		collect(key, l)
		return true
	})
	m.Ascend(fsm.KindsFrom(db[0]), func(key string, l fsm.Lock) bool { // its shares and permits
		if !fsm.Hidden([]byte(key)) || key[1] != db[0] {
			return false
		}
		collect(key, l)
		return true
	})
	return out
}

// visibleKeys is keys without the lock kinds' hidden keys (fsm.Hidden), which no watcher, tracker
// or blocked command names: keys itself when it has none.
func visibleKeys(keys [][]byte) [][]byte {
	if !slices.ContainsFunc(keys, fsm.Hidden) {
		return keys
	}
	return slices.DeleteFunc(slices.Clone(keys), fsm.Hidden)
}

// badEntry is a log entry ApplyBatch could not decode (and skipped).
type badEntry struct {
	index uint64
	err   error
}

// Snapshot takes an O(1) copy of the table; Persist serializes it while applies go on.
func (f machineFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	return &tableSnapshot{snap: f.n.mu.machine.Snapshot()}, nil
}

// takeStaleSnapshots is set only by a deliberately broken build (staleinstall_chaos.go).
var takeStaleSnapshots bool

// Restore replaces the table with a snapshot and arms a full lease for every held key: this
// node cannot know how much of each lease had run, so it ends late, never early.
//
// It refuses a snapshot older than what the table has applied, when raft knows that much of
// its log committed. hashicorp/raft (v1.7.2) installs whatever snapshot a leader of the current
// term sends; a replication goroutine the leader stopped when it removed this node can still
// deliver an install begun before, after the node was added back and caught up past it, which
// would take the table back in time and leave raft applying from past the older snapshot
// (tests/powerloss found it). A node whose applied entries no leader has confirmed (after a
// restart raft's commit index is 0: a survivor of an offline recovery may hold entries that
// never committed) takes an older snapshot, as a follower whose log conflicts with its
// leader's must. Refused, the install fails and its sender hears an error; raft keeps its
// state, but its snapshot store keeps the refused snapshot too (it was written before the
// restore), until newer ones retire it.
func (f machineFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	n := f.n
	now := n.cfg.Now()
	m, err := fsm.RestoreAt(rc, n.leaseClock(now))
	if err != nil {
		return fmt.Errorf("restore lock table: %w", err)
	}
	m.SetGroup(n.cfg.Group, n.cfg.Groups, n.cfg.Layout)
	var committed uint64 // what raft knows committed; 0 while it starts (a fresh table then)
	if r := n.fsmRaft.Load(); r != nil {
		committed = r.CommitIndex()
	}
	n.mu.Lock()
	if applied := n.mu.machine.Applied(); m.Applied() < applied && applied <= committed {
		if takeStaleSnapshots {
			n.log.Warn("took a snapshot older than the committed table (a deliberately broken build)", "snapshot_applied", m.Applied(), "applied", applied, "committed", committed)
		} else {
			n.mu.Unlock()
			n.stats.staleInstalls.Add(1)
			n.log.Warn("refused a snapshot older than the committed table", "snapshot_applied", m.Applied(), "applied", applied, "committed", committed)
			return fmt.Errorf("restore lock table: the snapshot ends at index %d, before the %d already applied and committed: a stale install", m.Applied(), applied)
		}
	}
	n.mu.machine = m
	n.noteSlotsLocked()
	n.notePlanLocked()
	n.locks.Restored(m)
	n.keys.Store(int64(m.Len()))
	n.noteFormatLocked()
	n.mu.Unlock()
	n.cluster.Restored(m.ClusterID())
	n.leaderChange.notify() // the member table may name the leader's client address now
	w := n.watchers()
	if w.Changed != nil {
		w.Changed(nil) // any key may have changed
	}
	if w.UsersChanged != nil {
		w.UsersChanged() // the snapshot's users replace this node's
	}
	if w.Restored != nil {
		w.Restored() // the messages of the entries the snapshot covers will never be delivered here
	}
	n.log.Info("restored snapshot", "locks", m.Len(), "applied", m.Applied())
	return nil
}

type tableSnapshot struct{ snap *fsm.Snapshot }

// TableSnapshot is raft's snapshot of a table as this core persists it: offline recovery and
// restore (package cluster) write their tables through it, so a core reads them back.
func TableSnapshot(snap *fsm.Snapshot) raft.FSMSnapshot { return &tableSnapshot{snap: snap} }

func (s *tableSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.snap.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *tableSnapshot) Release() {}

// changesLock reports whether an applied result changed a lock (its holder, value or lease).
// changedKey is the key a command's change is told for: a Serve's grant is its lock's (a plain
// lock's key, which watchers and trackers know), an Enqueue's its waiter's; others their own.
func changedKey(c fsm.Command, r fsm.Result) []byte {
	if c.Kind == fsm.KindServe || c.Kind == fsm.KindEnqueue {
		return fsm.LeaseKey(c, r)
	}
	return c.Key
}

// waiterEnd reports whether c, with result r, ended a waiter (node.Watchers.Waited): a Serve that
// granted it, or a release or an expiry of its entry (it gave up, or its client left).
func waiterEnd(c fsm.Command, r fsm.Result) (seq fsm.Token, granted, ok bool) {
	switch {
	case c.Kind == fsm.KindServe && r.Status == fsm.StatusGranted:
		return r.Served, true, true
	case !fsm.Hidden(c.Key):
		// A plain key's release or expiry, the common case: no waiter, and nothing to parse.
	case c.Kind == fsm.KindRelease && r.Status == fsm.StatusReleased, c.Kind == fsm.KindExpire && r.Existed:
		if _, seq, isWaiter := fsm.WaiterOf(c.Key); isWaiter {
			return seq, false, true
		}
	}
	return 0, false, false
}

func changesLock(r fsm.Result) bool {
	switch r.Status {
	case fsm.StatusGranted, fsm.StatusReleased, fsm.StatusRenewed, fsm.StatusWritten, fsm.StatusQueued:
		return true
	case fsm.StatusExpired:
		return r.Existed
	}
	return false
}
