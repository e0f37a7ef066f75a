package resp

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// readAll reads commands until an error, copying each (ReadCommand's results are only valid
// until the next call).
func readAll(rd *Reader) ([][]string, error) {
	var cmds [][]string
	for {
		args, err := rd.ReadCommand()
		if err != nil {
			return cmds, err
		}
		cmd := make([]string, len(args))
		for i, a := range args {
			cmd[i] = string(a)
		}
		cmds = append(cmds, cmd)
	}
}

// readers feeds the same input in different splits: the result must never depend on them.
var readers = []struct {
	name string
	wrap func(io.Reader) io.Reader
}{
	{"whole", func(r io.Reader) io.Reader { return r }},
	{"onebyte", iotest.OneByteReader},
	{"half", iotest.HalfReader},
	{"dataerr", iotest.DataErrReader},
}

func cmds(c ...[]string) [][]string { return c }

func TestReadCommand(t *testing.T) {
	const (
		maxBulk1 = DefaultMaxBulk + 1
		maxArgs1 = DefaultMaxArgs + 1
	)
	big := strings.Repeat
	tests := []struct {
		name string
		in   string
		lim  Limits
		want [][]string
		err  string // a protocol error's text; "" means io.EOF after want
		eof  error  // when err is "": the error expected at the end (default io.EOF)
	}{
		// Multibulk.
		{name: "multibulk", in: "*1\r\n$4\r\nPING\r\n", want: cmds([]string{"PING"})},
		{name: "binary arg", in: "*2\r\n$4\r\nECHO\r\n$6\r\na\r\nb\x00\xff\r\n",
			want: cmds([]string{"ECHO", "a\r\nb\x00\xff"})},
		{name: "empty arg", in: "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", want: cmds([]string{"ECHO", ""})},
		{name: "pipelined", in: "*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
			want: cmds([]string{"PING"}, []string{"SET", "k", "v"}, []string{"GET", "k"})},
		{name: "count 0 skipped", in: "*0\r\n*1\r\n$4\r\nPING\r\n", want: cmds([]string{"PING"})},
		{name: "count -1 skipped", in: "*-1\r\n*1\r\n$4\r\nPING\r\n", want: cmds([]string{"PING"})},
		{name: "count min int64 skipped", in: "*-9223372036854775808\r\n*1\r\n$4\r\nPING\r\n",
			want: cmds([]string{"PING"})},
		{name: "only empty commands", in: "*0\r\n*-1\r\n\r\n  \r\n"},
		{name: "max args", in: "*1024\r\n" + big("$1\r\na\r\n", 1024), want: cmds(strings.Split(big("a", 1024), ""))},
		{name: "max bulk", in: "*1\r\n$1048576\r\n" + big("x", DefaultMaxBulk) + "\r\n",
			want: cmds([]string{big("x", DefaultMaxBulk)})},

		// Inline.
		{name: "inline crlf", in: "PING\r\n", want: cmds([]string{"PING"})},
		{name: "inline lf", in: "PING\nPING\n", want: cmds([]string{"PING"}, []string{"PING"})},
		{name: "inline blanks", in: " \t SET\tk  v \r\n", want: cmds([]string{"SET", "k", "v"})},
		{name: "inline vertical tab skipped", in: "\v\fPING\r\n", want: cmds([]string{"PING"})},
		{name: "inline vertical tab inside word", in: "a\vb\r\n", want: cmds([]string{"a\vb"})},
		{name: "inline stray CR splits", in: "a\rb\r\n", want: cmds([]string{"a", "b"})},
		{name: "inline empty lines skipped", in: "\r\n\n   \r\nPING\r\n", want: cmds([]string{"PING"})},
		{name: "inline quotes", in: `SET "a b" 'c d'` + "\r\n", want: cmds([]string{"SET", "a b", "c d"})},
		{name: "inline empty quotes", in: `ECHO "" ''` + "\r\n", want: cmds([]string{"ECHO", "", ""})},
		{name: "inline double escapes", in: `ECHO "a\x41\n\q"` + "\r\n", want: cmds([]string{"ECHO", "aA\nq"})},
		{name: "inline all escapes", in: `ECHO "\n\r\t\b\a\\\"\xfF\x4"` + "\r\n",
			want: cmds([]string{"ECHO", "\n\r\t\b\a\\\"\xffx4"})},
		{name: "inline single escapes", in: `ECHO 'a\'b\n'` + "\r\n", want: cmds([]string{"ECHO", `a'b\n`})},
		{name: "inline quote mid word", in: `ECHO a"b c"` + "\r\n", want: cmds([]string{"ECHO", "ab c"})},
		{name: "inline quote then tab", in: "ECHO \"a\"\tb\r\n", want: cmds([]string{"ECHO", "a", "b"})},
		{name: "inline quote then vertical tab", in: "ECHO \"a\"\vb\r\n", want: cmds([]string{"ECHO", "a", "b"})},
		{name: "inline NUL is a byte", in: "EC\x00HO\r\n", want: cmds([]string{"EC\x00HO"})},
		{name: "inline max line", in: big("A", DefaultMaxInline) + "\n", want: cmds([]string{big("A", DefaultMaxInline)})},
		{name: "mixed", in: "PING\r\n*1\r\n$4\r\nPING\r\nPING\n", want: cmds([]string{"PING"}, []string{"PING"}, []string{"PING"})},

		// Incomplete input.
		{name: "empty input"},
		{name: "partial multibulk", in: "*1\r\n$4\r\nPI", eof: io.ErrUnexpectedEOF},
		{name: "partial inline", in: "PING", eof: io.ErrUnexpectedEOF},
		{name: "count waits for LF", in: "*1\r", eof: io.ErrUnexpectedEOF},
		{name: "max args waits", in: "*1024\r\n", eof: io.ErrUnexpectedEOF},
		{name: "count 2^31-1 over max args", in: "*2147483647\r\n", err: msgInvalidMultibulkLength},
		{name: "max bulk waits", in: "*1\r\n$1048576\r\n", eof: io.ErrUnexpectedEOF},
		{name: "inline at limit waits", in: big("A", DefaultMaxInline), eof: io.ErrUnexpectedEOF},
		{name: "count line at limit waits", in: "*" + big("1", DefaultMaxInline-1), eof: io.ErrUnexpectedEOF},

		// Invalid multibulk counts.
		{name: "count not a number", in: "*x\r\n", err: msgInvalidMultibulkLength},
		{name: "count empty", in: "*\r\n", err: msgInvalidMultibulkLength},
		{name: "count plus", in: "*+1\r\n", err: msgInvalidMultibulkLength},
		{name: "count space", in: "* 1\r\n", err: msgInvalidMultibulkLength},
		{name: "count trailing space", in: "*1 \r\n", err: msgInvalidMultibulkLength},
		{name: "count leading zero", in: "*01\r\n", err: msgInvalidMultibulkLength},
		{name: "count minus zero", in: "*-0\r\n", err: msgInvalidMultibulkLength},
		{name: "count minus", in: "*-\r\n", err: msgInvalidMultibulkLength},
		{name: "count max args+1", in: "*" + strconv.Itoa(maxArgs1) + "\r\n", err: msgInvalidMultibulkLength},
		{name: "count 2^31", in: "*2147483648\r\n", err: msgInvalidMultibulkLength},
		{name: "count max int64", in: "*9223372036854775807\r\n", err: msgInvalidMultibulkLength},
		{name: "count max int64+1", in: "*9223372036854775808\r\n", err: msgInvalidMultibulkLength},
		{name: "count min int64-1", in: "*-9223372036854775809\r\n", err: msgInvalidMultibulkLength},
		{name: "count 20 nines", in: "*99999999999999999999\r\n", err: msgInvalidMultibulkLength},
		{name: "count CR without LF", in: "*1\rX$4\r\nPING\r\n", err: msgInvalidMultibulkLength},
		{name: "count line too big", in: "*" + big("1", DefaultMaxInline), err: msgTooBigMbulkCount},

		// Invalid bulk lengths.
		{name: "bulk not a number", in: "*1\r\n$x\r\n", err: msgInvalidBulkLength},
		{name: "bulk empty", in: "*1\r\n$\r\n", err: msgInvalidBulkLength},
		{name: "bulk -1", in: "*1\r\n$-1\r\n", err: msgInvalidBulkLength},
		{name: "bulk plus", in: "*1\r\n$+4\r\nPING\r\n", err: msgInvalidBulkLength},
		{name: "bulk leading zero", in: "*1\r\n$04\r\nPING\r\n", err: msgInvalidBulkLength},
		{name: "bulk max bulk+1", in: "*1\r\n$" + strconv.Itoa(maxBulk1) + "\r\n", err: msgInvalidBulkLength},
		{name: "bulk 2^31-1", in: "*1\r\n$2147483647\r\n", err: msgInvalidBulkLength},
		{name: "bulk max int64", in: "*1\r\n$9223372036854775807\r\n", err: msgInvalidBulkLength},
		{name: "bulk max int64+1", in: "*1\r\n$9223372036854775808\r\n", err: msgInvalidBulkLength},
		{name: "bulk min int64", in: "*1\r\n$-9223372036854775808\r\n", err: msgInvalidBulkLength},
		{name: "bulk 20 nines", in: "*1\r\n$99999999999999999999\r\n", err: msgInvalidBulkLength},
		{name: "bulk CR without LF", in: "*1\r\n$4\rXPING\r\n", err: msgInvalidBulkLength},
		{name: "bulk line too big", in: "*1\r\n$" + big("1", DefaultMaxInline), err: msgTooBigBulkCount},
		{name: "bulk line too big without dollar", in: "*1\r\nX" + big("1", DefaultMaxInline), err: msgTooBigBulkCount},
		{name: "bulk no CRLF after data", in: "*1\r\n$4\r\nPINGXX*1\r\n$4\r\nPING\r\n", err: msgBulkNoCRLF},
		{name: "bulk CR only after data", in: "*1\r\n$4\r\nPING\rX", err: msgBulkNoCRLF},
		{name: "first command fine, second bad", in: "*1\r\n$4\r\nPING\r\n*x\r\n",
			want: cmds([]string{"PING"}), err: msgInvalidMultibulkLength},

		// Wrong type byte.
		{name: "expected dollar", in: "*1\r\nX\r\n", err: "Protocol error: expected '$', got 'X'"},
		{name: "expected dollar colon", in: "*1\r\n:4\r\n", err: "Protocol error: expected '$', got ':'"},
		{name: "expected dollar CR", in: "*1\r\n\r\n", err: "Protocol error: expected '$', got ' '"},
		{name: "expected dollar LF", in: "*1\r\n\n\r\n", err: "Protocol error: expected '$', got ' '"},
		{name: "expected dollar second arg", in: "*2\r\n$4\r\nECHO\r\n*1\r\n", err: "Protocol error: expected '$', got '*'"},

		// Inline errors.
		{name: "unbalanced double", in: "PING \"a\r\n", err: msgUnbalancedQuotes},
		{name: "unbalanced single", in: "PING 'a\r\n", err: msgUnbalancedQuotes},
		{name: "double quote then byte", in: "PING \"a\"b\r\n", err: msgUnbalancedQuotes},
		{name: "single quote then byte", in: "PING 'a'b\r\n", err: msgUnbalancedQuotes},
		{name: "escaped closing quote", in: `PING "a\"` + "\r\n", err: msgUnbalancedQuotes},
		{name: "backslash at end", in: `PING "a\` + "\r\n", err: msgUnbalancedQuotes},
		{name: "inline too big", in: big("A", DefaultMaxInline+1), err: msgTooBigInline},
		{name: "inline too big with newline", in: "ECHO " + big("A", DefaultMaxInline-5) + "\r\n", err: msgTooBigInline},

		// Configured limits.
		{name: "bulk over configured max", lim: Limits{MaxBulk: 8, MaxCommandBytes: 64, MaxInline: 32},
			in: "*2\r\n$8\r\n12345678\r\n$9\r\n", err: msgInvalidBulkLength},
		{name: "args over configured max", lim: Limits{MaxArgs: 2}, in: "*3\r\n", err: msgInvalidMultibulkLength},
		{name: "too big multibulk", lim: Limits{MaxBulk: 8, MaxCommandBytes: 10, MaxInline: 32},
			in: "*2\r\n$8\r\n12345678\r\n$3\r\n", err: msgTooBigMultibulk},
		{name: "command bytes exactly", lim: Limits{MaxBulk: 8, MaxCommandBytes: 10, MaxInline: 32},
			in: "*2\r\n$8\r\n12345678\r\n$2\r\nab\r\n", want: cmds([]string{"12345678", "ab"})},
		{name: "inline words", lim: Limits{MaxArgs: 2}, in: "a b\r\na b c\r\n",
			want: cmds([]string{"a", "b"}), err: msgTooManyInlineWords},
		{name: "inline bounded by command bytes", lim: Limits{MaxBulk: 32, MaxInline: 64, MaxCommandBytes: 40},
			in: big("a ", 21), err: msgTooBigInline},
		{name: "inline limit raised to minimum", lim: Limits{MaxInline: 1}, in: big("A", 31) + "\n",
			want: cmds([]string{big("A", 31)})},
	}
	for _, tt := range tests {
		for _, rr := range readers {
			t.Run(tt.name+"/"+rr.name, func(t *testing.T) {
				rd := NewReader(rr.wrap(strings.NewReader(tt.in)), tt.lim)
				got, err := readAll(rd)
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("commands (-want +got):\n%s", diff)
				}
				if tt.err != "" {
					var pe *ProtocolError
					if !errors.As(err, &pe) || pe.Msg != tt.err {
						t.Fatalf("error = %v, want protocol error %q", err, tt.err)
					}
					// Sticky.
					if _, err2 := rd.ReadCommand(); err2 != err {
						t.Errorf("second ReadCommand error = %v, want %v", err2, err)
					}
					return
				}
				want := tt.eof
				if want == nil {
					want = io.EOF
				}
				if err != want {
					t.Fatalf("error = %v, want %v", err, want)
				}
			})
		}
	}
}

func TestBuffered(t *testing.T) {
	first := "*1\r\n$4\r\nPING\r\n"
	second := "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
	rd := NewReader(strings.NewReader(first+second), Limits{})
	if got := rd.Buffered(); got != 0 {
		t.Fatalf("Buffered before reading = %d, want 0", got)
	}
	if _, err := rd.ReadCommand(); err != nil {
		t.Fatal(err)
	}
	if got, want := rd.Buffered(), len(second); got != want {
		t.Fatalf("Buffered after first command = %d, want %d", got, want)
	}
	if _, err := rd.ReadCommand(); err != nil {
		t.Fatal(err)
	}
	if got := rd.Buffered(); got != 0 {
		t.Fatalf("Buffered after second command = %d, want 0", got)
	}
}

func TestArgsDoNotOverlap(t *testing.T) {
	for _, in := range []string{"*2\r\n$1\r\na\r\n$1\r\nb\r\n", "a b\r\n"} {
		rd := NewReader(strings.NewReader(in), Limits{})
		args, err := rd.ReadCommand()
		if err != nil {
			t.Fatal(err)
		}
		_ = append(args[0], 'X', 'Y', 'Z')
		if got := string(args[1]); got != "b" {
			t.Errorf("%q: appending to args[0] changed args[1] to %q", in, got)
		}
	}
}

// chunkReader returns the header once, then chunk-sized pieces of filler, forever.
type chunkReader struct {
	head  []byte
	chunk int
	sent  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	n := min(len(p), c.chunk)
	for i := range p[:n] {
		p[i] = 'x'
	}
	c.sent += n
	return n, nil
}

func TestAnnouncedLengthCostsNothing(t *testing.T) {
	lim := Limits{MaxBulk: 1 << 30, MaxCommandBytes: 1 << 30}
	rd := NewReader(iotest.TimeoutReader(strings.NewReader("*1\r\n$1000000000\r\n")), lim)
	if _, err := rd.ReadCommand(); err != iotest.ErrTimeout {
		t.Fatalf("error = %v, want %v", err, iotest.ErrTimeout)
	}
	if got := cap(rd.buf); got > initialBufSize {
		t.Fatalf("buffer capacity = %d after a bare length, want <= %d", got, initialBufSize)
	}
}

func TestBufferFollowsData(t *testing.T) {
	lim := Limits{MaxBulk: 1 << 30, MaxCommandBytes: 1 << 30}
	src := &chunkReader{head: []byte("*1\r\n$1000000000\r\n"), chunk: 4096}
	rd := NewReader(src, lim)
	for range 256 { // 1 MiB of the announced 1 GB
		if err := rd.fill(); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := rd.next(); ok || err != nil {
			t.Fatalf("next() = ok %v, err %v before the data arrived", ok, err)
		}
		if got, limit := cap(rd.buf), 2*(src.sent+64)+initialBufSize; got > limit {
			t.Fatalf("buffer capacity = %d after %d bytes, want <= %d", got, src.sent, limit)
		}
	}
}

func TestBufferShrinksAfterLargeCommand(t *testing.T) {
	arg := strings.Repeat("x", 512<<10)
	in := "*1\r\n$" + strconv.Itoa(len(arg)) + "\r\n" + arg + "\r\nPING\r\nPING\r\n"
	rd := NewReader(strings.NewReader(in), Limits{})
	args, err := rd.ReadCommand()
	if err != nil || len(args) != 1 || string(args[0]) != arg {
		t.Fatalf("ReadCommand = %d args, %v; want the large argument", len(args), err)
	}
	for range 2 {
		args, err = rd.ReadCommand()
		if err != nil || len(args) != 1 || string(args[0]) != "PING" {
			t.Fatalf("ReadCommand = %q, %v; want PING", args, err)
		}
	}
	if _, err := rd.ReadCommand(); err != io.EOF {
		t.Fatalf("error = %v, want EOF", err)
	}
	if got := cap(rd.buf); got > maxRetainedBuf {
		t.Fatalf("buffer capacity = %d after the large command, want <= %d", got, maxRetainedBuf)
	}
}

func TestReadErrorsAreNotSticky(t *testing.T) {
	// TimeoutReader fails the second read once, as a read deadline would.
	rd := NewReader(iotest.TimeoutReader(iotest.OneByteReader(strings.NewReader("*1\r\n$4\r\nPING\r\n"))), Limits{})
	if _, err := rd.ReadCommand(); err != iotest.ErrTimeout {
		t.Fatalf("error = %v, want %v", err, iotest.ErrTimeout)
	}
	args, err := rd.ReadCommand()
	if err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Fatalf("ReadCommand = %q, %v; want PING", args, err)
	}
}

func TestReadErrorAfterData(t *testing.T) {
	boom := errors.New("boom")
	rd := NewReader(io.MultiReader(strings.NewReader("PING\r\n"), iotest.ErrReader(boom)), Limits{})
	if args, err := rd.ReadCommand(); err != nil || string(args[0]) != "PING" {
		t.Fatalf("ReadCommand = %q, %v; want PING", args, err)
	}
	if _, err := rd.ReadCommand(); err != boom {
		t.Fatalf("error = %v, want %v", err, boom)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

type liarReader struct{}

func (liarReader) Read(p []byte) (int, error) { return len(p) + 1, nil }

func TestMisbehavingReaders(t *testing.T) {
	if _, err := NewReader(zeroReader{}, Limits{}).ReadCommand(); err != io.ErrNoProgress {
		t.Errorf("zero reads: error = %v, want %v", err, io.ErrNoProgress)
	}
	if _, err := NewReader(liarReader{}, Limits{}).ReadCommand(); err != errInvalidRead {
		t.Errorf("oversized count: error = %v, want %v", err, errInvalidRead)
	}
}

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"-1", -1, true},
		{"10", 10, true},
		{"2147483647", 2147483647, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"18446744073709551615", 0, false},
		{"18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"000000000000000000001", 0, false},
		{"", 0, false},
		{"-", 0, false},
		{"-0", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"+1", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1a", 0, false},
		{"0x10", 0, false},
		{"1e3", 0, false},
		{"--1", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseInt([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseInt(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name string
		lim  Limits
		err  string // substring; "" means valid
	}{
		{name: "zero", lim: Limits{}},
		{name: "defaults", lim: DefaultLimits()},
		{name: "negative args", lim: Limits{MaxArgs: -1}, err: "MaxArgs"},
		{name: "negative bulk", lim: Limits{MaxBulk: -1}, err: "MaxBulk"},
		{name: "negative inline", lim: Limits{MaxInline: -1}, err: "MaxInline"},
		{name: "negative command", lim: Limits{MaxCommandBytes: -1}, err: "MaxCommandBytes"},
		{name: "tiny inline", lim: Limits{MaxInline: 31}, err: "MaxInline must be at least"},
		{name: "bulk over command", lim: Limits{MaxBulk: 8 << 20}, err: "MaxBulk (8388608) must not exceed MaxCommandBytes"},
		{name: "inline over command", lim: Limits{MaxBulk: 100, MaxCommandBytes: 100}, err: "MaxInline (65536)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.lim.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.err)
			}
		})
	}
}

func BenchmarkReadCommand(b *testing.B) {
	cmd := []byte("*5\r\n$3\r\nSET\r\n$4\r\nlock\r\n$16\r\n0123456789abcdef\r\n$2\r\nNX\r\n$2\r\nPX\r\n")
	in := bytes.Repeat(cmd, 1000)
	src := bytes.NewReader(in)
	rd := NewReader(src, Limits{})
	b.ReportAllocs()
	b.SetBytes(int64(len(cmd)))
	for i := 0; b.Loop(); i++ {
		if i%1000 == 0 {
			src.Reset(in)
		}
		if _, err := rd.ReadCommand(); err != nil {
			b.Fatal(err)
		}
	}
}
