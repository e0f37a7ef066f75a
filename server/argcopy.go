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
)

// argArena hands out the memory the reader copies commands into; one reader's, not safe for
// concurrent use.
type argArena struct {
	bytes []byte   // the unused end of the current chunk of bytes
	lists [][]byte // the unused end of the current chunk of lists
}

// copy copies args (which alias the reader's buffer) into the arena's memory. buffered is how
// many bytes the reader holds past this command: a new chunk has room for their copies too (an
// argument takes at least 6 of them, "$0\r\n\r\n", and 3 list slots), and with none the arena
// lets go of its chunks.
//
// The copy leaves room for the command's table keys (db.go): a spare byte before each
// argument, for its database's, and past the list's length two more lists' worth of capacity:
// each argument with its spare byte (tableKeyRoom), then room for the list withDBKeys returns.
func (a *argArena) copy(args [][]byte, buffered int) [][]byte {
	size := len(args) // a spare byte before each argument
	for _, arg := range args {
		size += len(arg)
	}
	n := len(args)
	buf := take(&a.bytes, size, buffered, arenaBytes)
	list := take(&a.lists, 3*n, buffered/2, arenaLists)
	if buffered == 0 {
		a.bytes, a.lists = nil, nil
	}
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

// take returns n elements of zero length (and capacity n) cut from the unused end of the
// current chunk that nothing else will use. A new chunk has room for more elements after them,
// up to chunkMax. Past a quarter of chunkMax, n get memory of their own: a chunk never ends up
// mostly unused for one large command.
func take[T any](chunk *[]T, n, more, chunkMax int) []T {
	if n > chunkMax/4 {
		return make([]T, 0, n)
	}
	if cap(*chunk) < n {
		*chunk = make([]T, 0, n+min(more, chunkMax-n))
	}
	s := (*chunk)[:0:n]
	*chunk = (*chunk)[n:n:cap(*chunk)]
	return s
}
