package resp

import (
	"io"
	"math"
	"strconv"
)

const (
	// flushThreshold is how many buffered bytes make the Writer write them out before Flush,
	// so one large reply or a long pipeline does not pile up in memory.
	flushThreshold = 64 << 10
	// maxRetainedOut is the largest output buffer kept after a flush.
	maxRetainedOut = 256 << 10
)

// Writer encodes replies into a buffer in RESP2 or RESP3 and writes them to the connection on
// Flush (or when the buffer passes 64 KiB). It starts in RESP2, as every Redis connection does
// until HELLO 3. The first write error is kept: later replies are dropped and Flush returns it.
// It is not safe for concurrent use.
type Writer struct {
	w     io.Writer
	buf   []byte
	resp3 bool
	err   error
}

// NewWriter returns a RESP2 Writer to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: w}
}

// SetProtocol selects the protocol version of the following replies: 3 selects RESP3, any
// other value RESP2. Whether a version is supported is the caller's to decide (HELLO's NOPROTO).
func (w *Writer) SetProtocol(version int) { w.resp3 = version == 3 }

// Protocol returns the protocol version in use, 2 or 3.
func (w *Writer) Protocol() int {
	if w.resp3 {
		return 3
	}
	return 2
}

// Buffered returns the number of bytes written to the Writer but not yet to the connection.
func (w *Writer) Buffered() int { return len(w.buf) }

// Flush writes the buffered replies to the connection.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if len(w.buf) == 0 {
		return nil
	}
	n, err := w.w.Write(w.buf)
	if err == nil && n < len(w.buf) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
		w.buf = nil
		return err
	}
	if cap(w.buf) > maxRetainedOut {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	return nil
}

// SimpleString writes a status reply, "+s". CR and LF in s become spaces.
func (w *Writer) SimpleString(s string) {
	w.buf = append(w.buf, '+')
	w.appendLine(s)
	w.done()
}

// Error writes an error reply, "-s": s starts with the error code, as in "ERR wrong number of
// arguments for 'lock' command" or "NOSCRIPT No matching script.". CR and LF in s become spaces,
// as Redis does, so a message can never inject a reply. An empty s writes "-ERR"; a leading '-'
// in s is not doubled.
func (w *Writer) Error(s string) {
	switch {
	case s == "":
		s = "ERR"
	case s[0] == '-':
		s = s[1:]
	}
	w.buf = append(w.buf, '-')
	w.appendLine(s)
	w.done()
}

// Int writes an integer reply, ":n".
func (w *Writer) Int(n int64) {
	w.header(':', n)
	w.done()
}

// Bulk writes a bulk string reply. A nil b is an empty string, not a null: use Null for that.
func (w *Writer) Bulk(b []byte) {
	w.header('$', int64(len(b)))
	w.buf = append(w.buf, b...)
	w.buf = append(w.buf, '\r', '\n')
	w.done()
}

// BulkString writes a bulk string reply.
func (w *Writer) BulkString(s string) {
	w.header('$', int64(len(s)))
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
	w.done()
}

// Null writes a null reply, where a string was expected (GET of a missing key): "$-1" in RESP2,
// "_" in RESP3.
func (w *Writer) Null() {
	if w.resp3 {
		w.buf = append(w.buf, "_\r\n"...)
	} else {
		w.buf = append(w.buf, "$-1\r\n"...)
	}
	w.done()
}

// NullArray writes a null reply where an array was expected: "*-1" in RESP2, "_" in RESP3.
func (w *Writer) NullArray() {
	if w.resp3 {
		w.buf = append(w.buf, "_\r\n"...)
	} else {
		w.buf = append(w.buf, "*-1\r\n"...)
	}
	w.done()
}

// Array writes the header of an array of n elements; the caller writes the n elements next.
// A negative n writes NullArray.
func (w *Writer) Array(n int) {
	if n < 0 {
		w.NullArray()
		return
	}
	w.header('*', int64(n))
	w.done()
}

// Map writes the header of a map of n key/value pairs; the caller writes 2n elements next,
// key then value. RESP2 has no maps: there it is an array of 2n elements, as Redis sends.
// A negative n writes NullArray.
func (w *Writer) Map(n int) {
	switch {
	case n < 0:
		w.NullArray()
		return
	case w.resp3:
		w.header('%', int64(n))
	default:
		w.header('*', 2*int64(n))
	}
	w.done()
}

// Set writes the header of a set of n elements ("~n"; an array in RESP2).
// A negative n writes NullArray.
func (w *Writer) Set(n int) {
	w.aggregate('~', n)
}

// Push writes the header of an out-of-band push message of n elements (">n"; an array in
// RESP2, as Redis sends pub/sub messages). A negative n writes NullArray.
func (w *Writer) Push(n int) {
	w.aggregate('>', n)
}

// Double writes a floating point reply: ",d" in RESP3, a bulk string in RESP2. The number is
// formatted as Redis 7.0 does (addReplyDouble): printf's "%.17g", with "inf" and "-inf", so 0.1
// is "0.10000000000000001" and 3 is "3". (Redis 7.2 switched to the shortest form; 7.0 is the
// baseline raftlock is compared with.)
func (w *Writer) Double(d float64) {
	var tmp [32]byte
	num := appendDouble(tmp[:0], d)
	if w.resp3 {
		w.buf = append(w.buf, ',')
		w.buf = append(w.buf, num...)
		w.buf = append(w.buf, '\r', '\n')
		w.done()
		return
	}
	w.Bulk(num)
}

// Bool writes a boolean reply: "#t"/"#f" in RESP3, ":1"/":0" in RESP2.
func (w *Writer) Bool(b bool) {
	switch {
	case w.resp3 && b:
		w.buf = append(w.buf, "#t\r\n"...)
	case w.resp3:
		w.buf = append(w.buf, "#f\r\n"...)
	case b:
		w.buf = append(w.buf, ":1\r\n"...)
	default:
		w.buf = append(w.buf, ":0\r\n"...)
	}
	w.done()
}

// Verbatim writes a verbatim string reply (what INFO and CLIENT INFO return): in RESP3
// "=<len>\r\n<format>:<s>\r\n", where format is a three-byte type such as "txt" or "mkd" (any
// other length becomes "txt"); in RESP2 a bulk string of s alone.
func (w *Writer) Verbatim(format, s string) {
	if !w.resp3 {
		w.BulkString(s)
		return
	}
	if len(format) != 3 {
		format = "txt"
	}
	w.header('=', int64(len(s)+4))
	w.buf = append(w.buf, format...)
	w.buf = append(w.buf, ':')
	w.buf = append(w.buf, s...)
	w.buf = append(w.buf, '\r', '\n')
	w.done()
}

// Raw writes b as it is: it must be complete, valid RESP for the connection's protocol.
func (w *Writer) Raw(b []byte) {
	w.buf = append(w.buf, b...)
	w.done()
}

// aggregate writes the header of a RESP3 aggregate type, an array in RESP2.
func (w *Writer) aggregate(typ byte, n int) {
	if n < 0 {
		w.NullArray()
		return
	}
	if !w.resp3 {
		typ = '*'
	}
	w.header(typ, int64(n))
	w.done()
}

// header appends "<typ><n>\r\n".
func (w *Writer) header(typ byte, n int64) {
	w.buf = append(w.buf, typ)
	w.buf = strconv.AppendInt(w.buf, n, 10)
	w.buf = append(w.buf, '\r', '\n')
}

// appendLine appends s with CR and LF turned into spaces, then CRLF.
func (w *Writer) appendLine(s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		w.buf = append(w.buf, c)
	}
	w.buf = append(w.buf, '\r', '\n')
}

// done ends a reply: after a write error it discards what was buffered, and it writes the
// buffer out once it grows past flushThreshold.
func (w *Writer) done() {
	switch {
	case w.err != nil:
		w.buf = w.buf[:0]
	case len(w.buf) >= flushThreshold:
		w.Flush() // the error is kept in w.err and returned by the caller's Flush
	}
}

// appendDouble formats d as C's printf("%.17g") does, with "inf", "-inf" and "nan".
func appendDouble(b []byte, d float64) []byte {
	switch {
	case math.IsNaN(d):
		return append(b, "nan"...)
	case math.IsInf(d, 1):
		return append(b, "inf"...)
	case math.IsInf(d, -1):
		return append(b, "-inf"...)
	}
	// Go's 'g' with a precision is C's %g: exponent notation (two digits at least) when the
	// exponent is below -4 or at least the precision, trailing zeros dropped.
	return strconv.AppendFloat(b, d, 'g', 17, 64)
}
