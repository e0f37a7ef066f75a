package fsm

import (
	"encoding/binary"
	"io"
)

// EncodeKeyedEntry is the log entry of cmds as a binary before collections wrote it (version 3,
// no Match.Rev or Value), for tests of older logs.
func EncodeKeyedEntry(dst []byte, cmds []Command) []byte {
	dst = append(dst, keyedVersion)
	dst = binary.AppendUvarint(dst, uint64(len(cmds)))
	for _, c := range cmds {
		dst = c.appendBody(dst)
	}
	return dst
}

// EntrySize is entrySize, for the codec's tests.
var EntrySize = entrySize

// WriteVersion writes s in the layout of an older snapshot version, as an older build wrote it.
func (s *Snapshot) WriteVersion(w io.Writer, version byte) (int64, error) {
	return s.writeVersion(w, version)
}
