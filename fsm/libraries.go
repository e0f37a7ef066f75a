package fsm

import (
	"maps"
	"slices"
)

// Libraries are the stored function libraries (FUNCTION LOAD): each library's name and
// source. A Libraries never changes once made: every change makes a new one, so a reader may
// keep it without a lock, a snapshot shares it, and a node's server keys what it derived from
// the sources (the functions they register) by its identity.
type Libraries struct {
	src   map[string]string
	bytes int
}

// emptyLibraries is every Machine's Libraries until one is stored.
var emptyLibraries = &Libraries{src: map[string]string{}}

// Get returns the source of the library name.
func (l *Libraries) Get(name string) (string, bool) {
	src, ok := l.src[name]
	return src, ok
}

// Len is the number of libraries.
func (l *Libraries) Len() int { return len(l.src) }

// Bytes is the bytes of the libraries' sources.
func (l *Libraries) Bytes() int { return l.bytes }

// Names returns the libraries' names in order.
func (l *Libraries) Names() []string { return slices.Sorted(maps.Keys(l.src)) }

// with returns l with library name stored as src.
func (l *Libraries) with(name, src string) *Libraries {
	c := &Libraries{src: maps.Clone(l.src), bytes: l.bytes + len(src)}
	if old, ok := c.src[name]; ok {
		c.bytes -= len(old)
	}
	c.src[name] = src
	return c
}

// without returns l without library name.
func (l *Libraries) without(name string) *Libraries {
	old, ok := l.src[name]
	if !ok {
		return l
	}
	c := &Libraries{src: maps.Clone(l.src), bytes: l.bytes - len(old)}
	delete(c.src, name)
	return c
}

// After returns the libraries as cmd leaves them: a library command's change, l itself for
// any other command. (A script's overlay shows its transaction's own library changes so.)
func (l *Libraries) After(cmd Command) *Libraries {
	switch cmd.Kind {
	case KindStoreLibrary:
		return l.with(string(cmd.Key), string(cmd.Owner))
	case KindDeleteLibrary:
		return l.without(string(cmd.Key))
	case KindFlushLibraries:
		return emptyLibraries
	}
	return l
}

// librariesOf returns the Libraries holding src (which it keeps).
func librariesOf(src map[string]string) *Libraries {
	if len(src) == 0 {
		return emptyLibraries
	}
	l := &Libraries{src: src}
	for _, s := range src {
		l.bytes += len(s)
	}
	return l
}

// Libraries returns the stored function libraries.
func (m *Machine) Libraries() *Libraries { return m.libraries }
