package server

// Keyspace notifications (notify-keyspace-events, set with CONFIG SET as in Redis): every node
// publishes, to its own subscribers, the deletions and expiries of the entries it applies, on
// __keyspace@<db>__:<key> (the event as the message) and __keyevent@<db>__:<event> (the key as
// the message). The setting is the node's own, like a Redis instance's: it is not replicated.

import (
	"strings"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// The event classes of notify-keyspace-events, Redis's letters in Redis's order.
const notifyClasses = "g$lshzxetd"

// Bits of a notify-keyspace-events setting: one per class letter (notifyClasses), then these.
const (
	notifyAll      = 1<<len(notifyClasses) - 1
	notifyNew      = 1 << len(notifyClasses) // n
	notifyKeyspace = notifyNew << 1          // K
	notifyKeyevent = notifyNew << 2          // E
	notifyKeyMiss  = notifyNew << 3          // m
)

// parseNotifyFlags parses a notify-keyspace-events value, as Redis's
// keyspaceEventsStringToFlags does; ok is false for an unknown letter.
func parseNotifyFlags(s []byte) (flags uint32, ok bool) {
	for _, ch := range s {
		switch {
		case ch == 'A':
			flags |= notifyAll
		case ch == 'n':
			flags |= notifyNew
		case ch == 'K':
			flags |= notifyKeyspace
		case ch == 'E':
			flags |= notifyKeyevent
		case ch == 'm':
			flags |= notifyKeyMiss
		default:
			i := strings.IndexByte(notifyClasses, ch)
			if i < 0 {
				return 0, false
			}
			flags |= 1 << i
		}
	}
	return flags, true
}

// formatNotifyFlags is CONFIG GET's form of a setting (Redis's keyspaceEventsFlagsToString).
func formatNotifyFlags(flags uint32) string {
	var b strings.Builder
	if flags&notifyAll == notifyAll {
		b.WriteByte('A')
	} else {
		for i := range len(notifyClasses) {
			if flags&(1<<i) != 0 {
				b.WriteByte(notifyClasses[i])
			}
		}
		if flags&notifyNew != 0 {
			b.WriteByte('n')
		}
	}
	for _, f := range []struct {
		bit uint32
		ch  byte
	}{{notifyKeyspace, 'K'}, {notifyKeyevent, 'E'}, {notifyKeyMiss, 'm'}} {
		if flags&f.bit != 0 {
			b.WriteByte(f.ch)
		}
	}
	return b.String()
}

// keyEvents are the events the node reports: their names and classes.
var keyEvents = map[node.KeyEvent]struct {
	name  string
	class uint32
}{
	node.KeyDeleted: {"del", 1 << strings.IndexByte(notifyClasses, 'g')},
	node.KeyExpired: {"expired", 1 << strings.IndexByte(notifyClasses, 'x')},
}

// setNotifyFlags changes the setting. The node's key event hook is registered only while some
// event is asked for: with notifications off (the default) the apply path records no events at
// all.
func (s *Server) setNotifyFlags(flags uint32) {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	s.notifyFlags.Store(flags)
	s.watch(flags&(notifyKeyspace|notifyKeyevent) != 0)
}

// notifyKey publishes a key event to this node's subscribers, as the setting asks. key is a
// table key. With notifications off (the default) it costs one atomic load.
func (s *Server) notifyKey(g int, at node.LogPosition, key []byte, ev node.KeyEvent) {
	flags := s.notifyFlags.Load()
	e, known := keyEvents[ev]
	if flags&(notifyKeyspace|notifyKeyevent) == 0 || !known || flags&e.class == 0 {
		return
	}
	db, k := fsm.SplitDBKey(key)
	prefix := func(kind string) []byte { return []byte("__key" + kind + "@" + itoa(int64(db)) + "__:") }
	if flags&notifyKeyspace != 0 {
		s.hub.deliver(g, at, append(prefix("space"), k...), []byte(e.name), false)
	}
	if flags&notifyKeyevent != 0 {
		s.hub.deliver(g, at, append(prefix("event"), e.name...), k, false)
	}
}
