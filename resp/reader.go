package resp

import (
	"bytes"
	"errors"
	"io"
	"math"
)

// Protocol error texts, exactly as Redis words them (networking.c), except where noted.
const (
	msgInvalidMultibulkLength = "Protocol error: invalid multibulk length"
	msgInvalidBulkLength      = "Protocol error: invalid bulk length"
	msgTooBigMbulkCount       = "Protocol error: too big mbulk count string"
	msgTooBigBulkCount        = "Protocol error: too big bulk count string"
	msgTooBigInline           = "Protocol error: too big inline request"
	msgUnbalancedQuotes       = "Protocol error: unbalanced quotes in request"
	msgExpectedDollar         = "Protocol error: expected '$', got '"

	// Not in Redis: it skips the two bytes after bulk data whatever they are.
	msgBulkNoCRLF = "Protocol error: expected CRLF after bulk data"
	// Not in Redis: it bounds neither the total size of a command (beyond its 1 GiB query
	// buffer limit, which closes the connection without a reply) nor inline argument counts.
	msgTooBigMultibulk    = "Protocol error: too big multibulk request"
	msgTooManyInlineWords = "Protocol error: too many arguments in inline request"
)

// ProtocolError reports input that is not a valid command. Msg is the text Redis would send
// (after "-ERR "); the caller replies "-ERR " + Msg and closes the connection, because the
// Reader cannot tell where the next command would start.
type ProtocolError struct {
	Msg string
}

var _ error = (*ProtocolError)(nil)

func (e *ProtocolError) Error() string { return e.Msg }

// errInvalidRead reports an io.Reader that returned an impossible byte count.
var errInvalidRead = errors.New("resp: reader returned an invalid count")

const (
	// initialBufSize is the first read buffer's size; Redis reads 16 KiB at a time
	// (PROTO_IOBUF_LEN). The buffer doubles only when it is full of one unfinished command.
	initialBufSize = 16 << 10
	// maxRetainedBuf is the largest buffer kept once the command that needed it is done.
	maxRetainedBuf = 64 << 10
	// maxEmptyReads is how many (0, nil) reads in a row are tolerated, as in bufio.
	maxEmptyReads = 100
)

// Budget is charged for the memory a Reader's buffer holds past its first initialBufSize bytes
// (the part every connection has): a server bounds what all its connections hold at once with
// one Budget, before a byte of a large command is read into memory.
type Budget interface {
	// Grow is called before the buffer grows by n bytes. A non-nil message refuses it:
	// ReadCommand returns a *ProtocolError with it, for good.
	Grow(n int) (refused string)
	// Shrink is called once the buffer let go of n bytes that Grow was called for.
	Shrink(n int)
}

// span locates one argument of the command being parsed, relative to its first byte.
type span struct{ off, n int }

// Reader reads commands from a client connection. It is not safe for concurrent use.
type Reader struct {
	rd  io.Reader
	lim Limits

	buf  []byte
	r, w int   // buf[r:w] is read but not yet parsed; r is the start of the current command
	rerr error // error from rd held back until the bytes read with it are parsed
	err  error // sticky protocol error

	budget  Budget
	charged int // bytes of buf Budget.Grow was called for

	// State of the command being parsed, kept across reads so no byte is parsed twice.
	// Offsets are relative to r, so they survive compaction of buf.
	multibulk bool // its "*<count>" line was consumed
	pos       int  // where parsing resumes
	scan      int  // bytes of the current line, from its start, already searched for its end
	left      int  // multibulk arguments still to read
	bulk      int  // length of the argument being read; -1 before its "$<length>" line
	total     int  // sum of the lengths of the arguments read so far
	spans     []span
	args      [][]byte
}

// NewReader returns a Reader of commands from rd. Zero fields of lim take their defaults;
// configurations should be checked with Limits.Validate first, but NewReader never fails.
func NewReader(rd io.Reader, lim Limits) *Reader {
	return &Reader{rd: rd, lim: lim.usable(), bulk: -1}
}

// SetBudget makes the Reader charge b for its buffer past its first 16 KiB.
func (r *Reader) SetBudget(b Budget) { r.budget = b }

// Release lets go of a buffer that grew for a large command, if everything in it was returned
// as commands (ReadCommand does this too, but a caller that holds on to a copy of the last
// command can give the memory back before it reads the next).
func (r *Reader) Release() { r.release() }

// Discard drops the buffer and whatever it holds, giving its charge back to the budget: the
// connection is done.
func (r *Reader) Discard() {
	r.buf, r.r, r.w = nil, 0, 0
	r.charge(0)
}

// ReadCommand returns the arguments of the next command; it never returns an empty command
// (Redis skips "*0", negative counts and blank inline lines, and so does ReadCommand).
//
// The returned slice and the arguments in it alias the Reader's buffer and are valid only until
// the next call to ReadCommand; copy what must outlive it.
//
// Malformed input yields a *ProtocolError, and the Reader then returns that error forever.
// Errors from the underlying reader are returned as they are, except that io.EOF in the middle
// of a command becomes io.ErrUnexpectedEOF; such errors are not sticky (after a read deadline,
// say, reading may resume).
func (r *Reader) ReadCommand() ([][]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	r.release()
	for {
		args, ok, err := r.next()
		if err != nil {
			r.err = err
			return nil, err
		}
		if ok {
			if len(args) > 0 {
				return args, nil
			}
			continue // an empty command: skip it, as Redis does
		}
		if err := r.fill(); err != nil {
			if err == io.EOF && r.w > r.r {
				err = io.ErrUnexpectedEOF
			}
			if _, ok := err.(*ProtocolError); ok {
				r.err = err
			}
			return nil, err
		}
	}
}

// Buffered returns the number of bytes read from the connection but not yet returned as a
// command: when it is zero, no pipelined command is waiting and replies should be flushed.
// The bytes of a command that has only partly arrived count too.
func (r *Reader) Buffered() int { return r.w - r.r }

// release forgets the consumed buffer once nothing is pending, and drops a buffer that grew
// for a large command.
func (r *Reader) release() {
	if r.r != r.w {
		return
	}
	r.r, r.w = 0, 0
	if cap(r.buf) > maxRetainedBuf {
		r.buf = nil
		r.charge(0)
	}
}

// charge tells the budget the buffer now holds size bytes (they are allocated after a growth is
// accepted, and were let go of before a shrink is reported).
func (r *Reader) charge(size int) error {
	want := max(size-initialBufSize, 0)
	if r.budget == nil || want == r.charged {
		return nil
	}
	if want > r.charged {
		if msg := r.budget.Grow(want - r.charged); msg != "" {
			return &ProtocolError{Msg: msg}
		}
	} else {
		r.budget.Shrink(r.charged - want)
	}
	r.charged = want
	return nil
}

// fill reads more bytes, making room first: it compacts the buffer when it is full and grows
// it only when it is full of the unfinished command, so memory follows the bytes that arrived,
// never a length the client announced.
func (r *Reader) fill() error {
	if r.rerr != nil {
		err := r.rerr
		r.rerr = nil
		return err
	}
	if r.w == len(r.buf) {
		pending := r.w - r.r
		switch {
		case len(r.buf) > maxRetainedBuf && pending <= initialBufSize/2:
			nb := make([]byte, initialBufSize)
			copy(nb, r.buf[r.r:r.w])
			r.buf = nb
			r.charge(initialBufSize)
		case r.r > 0:
			copy(r.buf, r.buf[r.r:r.w])
		default:
			size := 2 * len(r.buf)
			if size < initialBufSize {
				size = initialBufSize
			}
			if err := r.charge(size); err != nil {
				return err
			}
			nb := make([]byte, size)
			copy(nb, r.buf[r.r:r.w])
			r.buf = nb
		}
		r.r, r.w = 0, pending
	}
	for range maxEmptyReads {
		n, err := r.rd.Read(r.buf[r.w:])
		if n < 0 || n > len(r.buf)-r.w {
			return errInvalidRead
		}
		r.w += n
		if n > 0 {
			r.rerr = err
			return nil
		}
		if err != nil {
			return err
		}
	}
	return io.ErrNoProgress
}

// next parses the next command from the buffered bytes. ok is false when more bytes are needed;
// ok with no args is an empty command.
func (r *Reader) next() (args [][]byte, ok bool, err error) {
	data := r.buf[r.r:r.w]
	if !r.multibulk {
		if len(data) == 0 {
			return nil, false, nil
		}
		if data[0] != '*' {
			return r.inline(data)
		}
		end, ok, err := r.line(data, 0, msgTooBigMbulkCount)
		if !ok {
			return nil, false, err
		}
		if data[end+1] != '\n' {
			return nil, false, &ProtocolError{Msg: msgInvalidMultibulkLength}
		}
		n, valid := parseInt(data[1:end])
		if !valid || n > int64(r.lim.MaxArgs) {
			return nil, false, &ProtocolError{Msg: msgInvalidMultibulkLength}
		}
		r.scan = 0
		if n <= 0 {
			r.r += end + 2
			return nil, true, nil
		}
		r.multibulk = true
		r.pos = end + 2
		r.left = int(n)
		r.bulk = -1
		r.total = 0
		r.spans = r.spans[:0]
	}
	for r.left > 0 {
		if r.bulk < 0 {
			end, ok, err := r.line(data, r.pos, msgTooBigBulkCount)
			if !ok {
				return nil, false, err
			}
			if c := data[r.pos]; c != '$' {
				return nil, false, expectedDollar(c)
			}
			if data[end+1] != '\n' {
				return nil, false, &ProtocolError{Msg: msgInvalidBulkLength}
			}
			n, valid := parseInt(data[r.pos+1 : end])
			if !valid || n < 0 || n > int64(r.lim.MaxBulk) {
				return nil, false, &ProtocolError{Msg: msgInvalidBulkLength}
			}
			if n > int64(r.lim.MaxCommandBytes-r.total) {
				return nil, false, &ProtocolError{Msg: msgTooBigMultibulk}
			}
			r.scan = 0
			r.bulk = int(n)
			r.pos = end + 2
		}
		if len(data)-r.pos-2 < r.bulk {
			return nil, false, nil
		}
		end := r.pos + r.bulk
		if data[end] != '\r' || data[end+1] != '\n' {
			return nil, false, &ProtocolError{Msg: msgBulkNoCRLF}
		}
		r.spans = append(r.spans, span{off: r.pos, n: r.bulk})
		r.total += r.bulk
		r.pos = end + 2
		r.bulk = -1
		r.left--
	}
	args = r.args[:0]
	for _, s := range r.spans {
		args = append(args, data[s.off:s.off+s.n:s.off+s.n])
	}
	r.args = args
	r.r += r.pos
	r.multibulk = false
	r.pos = 0
	return args, true, nil
}

// line finds the '\r' that ends the header line starting at data[from]. ok is false when more
// bytes are needed, or with err when the line grew past MaxInline without a '\r' (Redis waits for
// PROTO_INLINE_MAX_SIZE bytes too). The '\n' that should follow is the caller's to check; it is
// known to be in data.
func (r *Reader) line(data []byte, from int, tooBig string) (end int, ok bool, err error) {
	limit := len(data)
	if limit-from > r.lim.MaxInline {
		limit = from + r.lim.MaxInline + 1
	}
	if i := bytes.IndexByte(data[from+r.scan:limit], '\r'); i >= 0 {
		end = from + r.scan + i
		if end+1 >= len(data) {
			r.scan = end - from
			return 0, false, nil
		}
		return end, true, nil
	}
	if len(data)-from > r.lim.MaxInline {
		return 0, false, &ProtocolError{Msg: tooBig}
	}
	r.scan = limit - from
	return 0, false, nil
}

// inline parses a command sent as one line of words (what telnet users type), as Redis's
// processInlineBuffer does. Unlike Redis, which only notices an over-long line while it waits
// for its '\n', a line longer than MaxInline is refused even when its '\n' came in the same
// read, so the outcome never depends on how the bytes were split into packets.
func (r *Reader) inline(data []byte) ([][]byte, bool, error) {
	maxLine := min(r.lim.MaxInline, r.lim.MaxCommandBytes)
	limit := len(data)
	if limit > maxLine {
		limit = maxLine + 1
	}
	i := bytes.IndexByte(data[r.scan:limit], '\n')
	if i < 0 {
		if len(data) > maxLine {
			return nil, false, &ProtocolError{Msg: msgTooBigInline}
		}
		r.scan = limit
		return nil, false, nil
	}
	nl := r.scan + i
	r.scan = 0
	line := data[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	args, err := splitArgs(line, r.args[:0], r.lim.MaxArgs)
	if err != nil {
		return nil, false, err
	}
	r.args = args
	r.r += nl + 1
	return args, true, nil
}

// splitArgs appends to args the words of line, split and unquoted the way Redis's sdssplitargs
// does: words are separated by white space; in "double quotes" \n \r \t \b \a and \xHH are
// escapes and a backslash keeps any other byte; in 'single quotes' only \' is an escape; a
// closing quote must be followed by white space or the end of the line. Quotes may start in the
// middle of a word (a"b c" is one word, `ab c`).
//
// Words are unescaped in place: a word is never longer than the bytes it was read from, so each
// is written over its own source and the results alias line. Unlike sdssplitargs, which works on
// C strings, a NUL byte is an ordinary byte.
func splitArgs(line []byte, args [][]byte, maxArgs int) ([][]byte, error) {
	n := len(line)
	i, w := 0, 0
	for {
		for i < n && isSpace(line[i]) {
			i++
		}
		if i == n {
			return args, nil
		}
		if len(args) == maxArgs {
			return nil, &ProtocolError{Msg: msgTooManyInlineWords}
		}
		start := w
		inDouble, inSingle := false, false
	word:
		for {
			switch {
			case inDouble:
				if i == n {
					return nil, &ProtocolError{Msg: msgUnbalancedQuotes}
				}
				c := line[i]
				switch {
				case c == '\\' && i+3 < n && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
					line[w] = unhex(line[i+2])<<4 | unhex(line[i+3])
					w++
					i += 4
				case c == '\\' && i+1 < n:
					line[w] = unescape(line[i+1])
					w++
					i += 2
				case c == '"':
					if i+1 < n && !isSpace(line[i+1]) {
						return nil, &ProtocolError{Msg: msgUnbalancedQuotes}
					}
					i++
					break word
				default:
					line[w] = c
					w++
					i++
				}
			case inSingle:
				if i == n {
					return nil, &ProtocolError{Msg: msgUnbalancedQuotes}
				}
				c := line[i]
				switch {
				case c == '\\' && i+1 < n && line[i+1] == '\'':
					line[w] = '\''
					w++
					i += 2
				case c == '\'':
					if i+1 < n && !isSpace(line[i+1]) {
						return nil, &ProtocolError{Msg: msgUnbalancedQuotes}
					}
					i++
					break word
				default:
					line[w] = c
					w++
					i++
				}
			default:
				if i == n {
					break word
				}
				switch c := line[i]; c {
				case ' ', '\n', '\r', '\t':
					i++
					break word
				case '"':
					inDouble = true
					i++
				case '\'':
					inSingle = true
					i++
				default:
					line[w] = c
					w++
					i++
				}
			}
		}
		args = append(args, line[start:w:w])
	}
}

// isSpace is C's isspace in the C locale, which sdssplitargs uses to skip blanks.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	default:
		return c - '0'
	}
}

// unescape returns the byte a backslash escape inside double quotes stands for.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	default:
		return c
	}
}

// expectedDollar builds Redis's error for a multibulk argument that does not start with '$'.
// Redis prints the byte raw but turns CR and LF into spaces so the reply stays one line.
func expectedDollar(c byte) *ProtocolError {
	if c == '\r' || c == '\n' {
		c = ' '
	}
	return &ProtocolError{Msg: msgExpectedDollar + string([]byte{c}) + "'"}
}

// ParseInt parses a decimal integer exactly as Redis's string2ll does; servers use it for
// numeric arguments so they accept and refuse the same spellings Redis does.
func ParseInt(b []byte) (int64, bool) { return parseInt(b) }

// parseInt parses a decimal integer exactly as Redis's string2ll does: an optional '-', then no
// leading zeros (only "0" itself), no '+', no spaces, at most 20 bytes, and no overflow.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return int64(-v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
