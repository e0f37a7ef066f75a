package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A cluster's log format is the entry and snapshot layout every member can read. A rolling
// upgrade runs old and new binaries side by side, so a node never writes what an older member
// would fail to decode: until the leader has seen every member run a binary that reads the
// current layout, the cluster stays in the format of the older version, and commands that
// need the current one (typed values, ACL users, the cluster ID) wait or are refused. The
// leader switches the cluster by committing one entry in the current layout (a no-op); every
// node that applies it, and every snapshot taken after it, is in the current format from then
// on. There is no way back: once switched, a binary of the older version cannot rejoin.
const (
	// FormatKeyed is the newest format raftlock v0.1.0 reads: entries of keyedVersion,
	// snapshots of snapshotV3, command kinds up to KindFlush, matches up to MatchLease.
	FormatKeyed byte = keyedVersion
	// FormatTyped is the newest format v0.2.0 reads and writes: entryVersion entries (typed
	// values, ACL users, the cluster ID) and snapshotV5 snapshots.
	FormatTyped byte = entryVersion
	// FormatBatch, v0.3.0's, adds batchVersion entries: several requests in one log entry
	// (group commit). Snapshots are as in FormatTyped. docs/upgrades.md's table lists every
	// version's formats.
	FormatBatch byte = batchVersion
	// FormatFunctions, v0.4.0's, adds the function library commands (KindStoreLibrary,
	// KindDeleteLibrary, KindFlushLibraries), the lock kinds (KindAcquire, Command.Permits and
	// Delay, Since, Origin) and snapshotV8 snapshots, which carry the libraries, lock-delays,
	// grant times and origins. Its entries are FormatBatch's; the entry that switches a cluster to it is a
	// batch of functionsVersion, so every node that applies it notes the switch.
	FormatFunctions byte = functionsVersion
	// FormatCurrent is the newest format this binary writes once every member reads it.
	FormatCurrent = FormatFunctions
)

// ErrNeedsFormat means commands cannot be written in the cluster's format: they need a newer
// one than an older member reads.
var ErrNeedsFormat = errors.New("fsm: the cluster's log format is older than these commands need")

// FormatOf returns the format an entry is written in (its version byte), for Machine.NoteFormat.
func FormatOf(entry []byte) byte {
	if len(entry) == 0 {
		return 0
	}
	return entry[0]
}

// NeedsFormat returns the oldest format that can carry cmds.
func NeedsFormat(cmds []Command) byte {
	need := FormatKeyed
	for _, c := range cmds {
		switch {
		case c.Kind == KindStoreLibrary || c.Kind == KindDeleteLibrary || c.Kind == KindFlushLibraries,
			c.Kind == KindAcquire || c.Kind == KindEnqueue || c.Kind == KindServe || c.hasKindsFields() || c.hasHeldFields(),
			isMoveKind(c.Kind), c.Kind == KindPlanGroups:
			// Added with FormatFunctions: v0.3.0 (FormatBatch) cannot decode them.
			return FormatFunctions
		case c.Kind == KindForgetUser:
			// Added with FormatBatch: v0.2.0 (FormatTyped) cannot decode it.
			need = max(need, FormatBatch)
		case c.Match.Kind == MatchFree:
			// Every format carries it: ForFormat makes it MatchAbsent for one older than
			// FormatFunctions (the proposer's part, before it encodes).
		case c.Kind > KindFlush || c.Match.Kind > MatchLease || c.Match.Rev != 0 || c.Value != nil:
			need = max(need, FormatTyped)
		}
	}
	return need
}

// ForFormat rewrites, in place, what cmds say differently in format: a cluster older than
// FormatFunctions has no lock kinds, so MatchFree is MatchAbsent there (which every format
// reads), and keeps no grant times or origins. A proposer calls it before NeedsFormat.
func ForFormat(cmds []Command, format byte) {
	if format >= FormatFunctions {
		return
	}
	for i := range cmds {
		if cmds[i].Match.Kind == MatchFree {
			cmds[i].Match.Kind = MatchAbsent
		}
		cmds[i].Since, cmds[i].Origin = 0, nil // shown only, and not in the older layout
	}
}

// StampHeld records, on the commands of cmds that take a lock or queue for one, when the
// leader proposed them (now, Unix ms) and the node their client is on (origin): a Serve gets
// the time alone, since its holder's origin is the one its waiter queued through. now and
// origin are asked once, and only if a command takes a lock: most requests take none. A cluster
// older than FormatFunctions keeps neither. The proposer calls it after ForFormat.
func StampHeld(cmds []Command, format byte, now func() int64, originOf func() []byte) {
	if format < FormatFunctions {
		return
	}
	var since int64
	var origin []byte
	for i := range cmds {
		c := &cmds[i]
		stamp := c.Acquire || c.Kind == KindAcquire || c.Kind == KindEnqueue || c.Kind == KindServe ||
			c.Kind == KindGrant && c.Match.Kind == MatchFree
		if !stamp {
			continue
		}
		if since == 0 {
			since = max(now(), 1) // a clock before 1970 must not make the command invalid
			if origin = originOf(); len(origin) > MaxOrigin {
				origin = nil // longer than any node ID (ValidNodeID): not recorded rather than refused
			}
		}
		c.Since = since
		if c.Kind != KindServe {
			c.Origin = origin
		}
	}
}

// EncodeEntryIn appends the log entry of cmds in format (FormatKeyed or later). It refuses,
// with ErrNeedsFormat, commands that format cannot carry.
func EncodeEntryIn(dst []byte, cmds []Command, format byte) ([]byte, error) {
	switch {
	case format >= FormatTyped:
		return EncodeEntry(dst, cmds), nil
	case format != FormatKeyed:
		return dst, fmt.Errorf("fsm: unknown log format %d", format)
	case NeedsFormat(cmds) > format:
		return dst, ErrNeedsFormat
	}
	dst = append(dst, keyedVersion)
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for _, c := range cmds {
		dst = c.appendBody(dst)
	}
	return dst, nil
}

// Format is the log format the cluster is in, as far as this table has applied: the newest of
// the layouts of the entries applied, FormatTyped after a snapshot of that format or later was
// restored (a snapshot does not say whether batches were in use: the leader switches again).
func (m *Machine) Format() byte { return m.format }

// NoteFormat records that an entry of format applied.
func (m *Machine) NoteFormat(format byte) {
	if format > m.format && format <= FormatCurrent {
		m.format = format
	}
}
