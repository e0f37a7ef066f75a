package server

// The reader's copies of the commands it reads. Its parser's arguments alias its buffer, which
// the next read overwrites, so each command is copied before it goes on. A pipeline of small
// commands would pay two allocations per command for that (its bytes and its argument list):
// argArena cuts both from chunks that the commands read with it share instead, each chunk sized
// for what the reader holds at the time. A chunk is never written again once handed out: the
// collector frees it when no command refers to it any more, so a command kept for long (a
// queued MULTI, a blocked pop) keeps at most a chunk alive, and the arena lets go of its chunks
// whenever the reader has read all it holds: an idle connection keeps none.

const (
	arenaBytes = 4 << 10 // the most bytes in a chunk
	arenaLists = 128     // the most argument slots in a chunk (a command takes 3 an argument)
	// A command that needs more than a quarter of a chunk gets memory of its own: a chunk
	// never ends up mostly unused for one large command.
	arenaBytesAlone = arenaBytes / 4
	arenaListsAlone = arenaLists / 4
)

// argArena hands out the memory copyArgs copies commands into; one reader's, not safe for
// concurrent use.
type argArena struct {
	bytes []byte   // the unused end of the current chunk of bytes
	lists [][]byte // the unused end of the current chunk of lists
}

// copy copies args (which alias the reader's buffer) into the arena's memory, laid out as
// copyArgs says. buffered is how many bytes the reader holds past this command: a new chunk
// has room for their copies too (an argument takes at least 6 of them, "$0\r\n\r\n", and 3
// list slots), and with none the arena lets go of its chunks.
func (a *argArena) copy(args [][]byte, buffered int) [][]byte {
	out := copyArgsInto(args, a.takeBytes(copySize(args), buffered), a.takeList(3*len(args), buffered/2))
	if buffered == 0 {
		a.bytes, a.lists = nil, nil
	}
	return out
}

// takeBytes returns n bytes of zero length (and capacity n) that nothing else will use; a new
// chunk has room for more bytes after them, up to arenaBytes.
func (a *argArena) takeBytes(n, more int) []byte {
	if n > arenaBytesAlone {
		return make([]byte, 0, n)
	}
	if cap(a.bytes) < n {
		a.bytes = make([]byte, 0, n+min(more, arenaBytes-n))
	}
	b := a.bytes[:0:n]
	a.bytes = a.bytes[n:n:cap(a.bytes)]
	return b
}

// takeList returns a list of n slots (length 0, capacity n) that nothing else will use; a new
// chunk has room for more slots after them, up to arenaLists.
func (a *argArena) takeList(n, more int) [][]byte {
	if n > arenaListsAlone {
		return make([][]byte, 0, n)
	}
	if cap(a.lists) < n {
		a.lists = make([][]byte, 0, n+min(more, arenaLists-n))
	}
	l := a.lists[:0:n]
	a.lists = a.lists[n:n:cap(a.lists)]
	return l
}

// copyArgs copies the reader's arguments into new memory of their own (the server's reader
// uses its arena instead, laid out the same). It leaves room for the command's table keys (db.go): a spare byte before each
// argument, for its database's, and past the list's length two more lists' worth of capacity:
// each argument with its spare byte (tableKeyRoom), then room for the list withDBKeys returns.
func copyArgs(args [][]byte) [][]byte {
	return copyArgsInto(args, make([]byte, 0, copySize(args)), make([][]byte, 0, 3*len(args)))
}

// copySize is the bytes a copy of args takes: theirs and a spare byte before each.
func copySize(args [][]byte) int {
	size := len(args)
	for _, arg := range args {
		size += len(arg)
	}
	return size
}

// copyArgsInto is copyArgs into buf (capacity: the arguments' bytes and one more for each)
// and list (capacity: three slots an argument).
func copyArgsInto(args [][]byte, buf []byte, list [][]byte) [][]byte {
	n := len(args)
	out := list[: n : 3*n]
	withSpare := list[n : 2*n : 2*n]
	for i, arg := range args {
		buf = append(buf, 0) // the spare byte
		start := len(buf)
		buf = append(buf, arg...)
		out[i] = buf[start:len(buf):len(buf)]
		withSpare[i] = buf[start-1 : len(buf) : len(buf)]
	}
	return out
}
