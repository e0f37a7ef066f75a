package resp

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func str(k Kind, s string) Value { return Value{Kind: k, Str: []byte(s)} }
func bulk(s string) Value        { return str(KindBulk, s) }
func integer(n int64) Value      { return Value{Kind: KindInteger, Int: n} }
func agg(k Kind, elems ...Value) Value {
	return Value{Kind: k, Elems: elems}
}

// valueCases are replies of every kind with what they decode to.
var valueCases = []struct {
	name, in string
	want     Value
}{
	{"simple", "+OK\r\n", str(KindSimple, "OK")},
	{"simple empty", "+\r\n", str(KindSimple, "")},
	{"error", "-ERR no such key\r\n", str(KindError, "ERR no such key")},
	{"integer", ":42\r\n", integer(42)},
	{"integer negative", ":-9223372036854775808\r\n", integer(-9223372036854775808)},
	{"bulk", "$5\r\nhe\r\no\r\n", bulk("he\r\no")},
	{"bulk empty", "$0\r\n\r\n", bulk("")},
	{"null bulk", "$-1\r\n", Value{Kind: KindNull}},
	{"null array", "*-1\r\n", Value{Kind: KindNull}},
	{"array empty", "*0\r\n", agg(KindArray)},
	{"array", "*3\r\n$1\r\na\r\n:1\r\n$-1\r\n", agg(KindArray, bulk("a"), integer(1), Value{Kind: KindNull})},
	{"array nested", "*2\r\n*1\r\n+x\r\n*0\r\n", agg(KindArray, agg(KindArray, str(KindSimple, "x")), agg(KindArray))},
	{"array with error", "*2\r\n-ERR a\r\n:2\r\n", agg(KindArray, str(KindError, "ERR a"), integer(2))},
	{"null", "_\r\n", Value{Kind: KindNull}},
	{"true", "#t\r\n", Value{Kind: KindBool, Int: 1}},
	{"false", "#f\r\n", Value{Kind: KindBool}},
	{"double", ",1.5\r\n", str(KindDouble, "1.5")},
	{"double inf", ",-inf\r\n", str(KindDouble, "-inf")},
	{"big number", "(12345678901234567890\r\n", str(KindBigNumber, "12345678901234567890")},
	{"bulk error", "!8\r\nERR a\r\nb\r\n", str(KindBulkError, "ERR a\r\nb")},
	{"verbatim", "=7\r\ntxt:abc\r\n", str(KindVerbatim, "txt:abc")},
	{"map", "%2\r\n$1\r\nk\r\n*1\r\n+v\r\n+n\r\n:1\r\n",
		agg(KindMap, bulk("k"), agg(KindArray, str(KindSimple, "v")), str(KindSimple, "n"), integer(1))},
	{"map empty", "%0\r\n", agg(KindMap)},
	{"set", "~2\r\n:1\r\n:2\r\n", agg(KindSet, integer(1), integer(2))},
	{"push", ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n",
		agg(KindPush, bulk("invalidate"), agg(KindArray, bulk("k")))},
	{"attribute dropped", "|1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n", bulk("x")},
	{"attribute inside", "*2\r\n|1\r\n+a\r\n+b\r\n:1\r\n:2\r\n", agg(KindArray, integer(1), integer(2))},
}

var valueCmp = cmpopts.EquateEmpty()

func TestReadValue(t *testing.T) {
	var all strings.Builder
	for _, tc := range valueCases {
		all.WriteString(tc.in)
	}
	for _, size := range []int{16, 4096} { // 16: lines and bulks cross bufio's buffer
		br := bufio.NewReaderSize(strings.NewReader(all.String()), size)
		for _, tc := range valueCases {
			got, err := ReadValue(br, 1<<20)
			if err != nil {
				t.Fatalf("size %d, %s: ReadValue(%q) = %v", size, tc.name, tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got, valueCmp); diff != "" {
				t.Errorf("size %d, %s: ReadValue(%q) (-want +got):\n%s", size, tc.name, tc.in, diff)
			}
		}
		if _, err := ReadValue(br, 1<<20); err != io.EOF {
			t.Errorf("size %d: at the end: %v, want EOF", size, err)
		}
	}
}

func TestParseValue(t *testing.T) {
	for _, tc := range valueCases {
		t.Run(tc.name, func(t *testing.T) {
			got, rest, err := ParseValue([]byte(tc.in + "+next\r\n"))
			if err != nil {
				t.Fatalf("ParseValue(%q) = %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got, valueCmp); diff != "" {
				t.Errorf("ParseValue(%q) (-want +got):\n%s", tc.in, diff)
			}
			if string(rest) != "+next\r\n" {
				t.Errorf("ParseValue(%q) left %q, want %q", tc.in, rest, "+next\r\n")
			}
			// Every proper prefix is a reply cut short.
			for i := range len(tc.in) {
				_, _, err := ParseValue([]byte(tc.in[:i]))
				want := io.ErrUnexpectedEOF
				if i == 0 {
					want = io.EOF
				}
				if !errors.Is(err, want) {
					t.Errorf("ParseValue(%q) = %v, want %v", tc.in[:i], err, want)
				}
			}
		})
	}
}

// TestReadValueReadsWhatReadReplyReads checks the two share one reader: the same bytes taken
// from the stream, under the same bounds.
func TestReadValueReadsWhatReadReplyReads(t *testing.T) {
	for _, tc := range valueCases {
		raw, err := ReadReply(bufio.NewReader(strings.NewReader(tc.in+"+next\r\n")), 1<<20)
		if err != nil || string(raw) != tc.in {
			t.Errorf("ReadReply(%q) = %q, %v; want all of it", tc.in, raw, err)
		}
		br := bufio.NewReader(strings.NewReader(tc.in + "+next\r\n"))
		if _, err := ReadValue(br, 1<<20); err != nil {
			t.Fatalf("ReadValue(%q) = %v", tc.in, err)
		}
		if next, err := ReadValue(br, 1<<20); err != nil || string(next.Str) != "next" {
			t.Errorf("after ReadValue(%q): next reply %v, %v; want +next", tc.in, next, err)
		}
		// One byte short of the reply's length is over the bound.
		if _, err := ReadValue(bufio.NewReader(strings.NewReader(tc.in)), len(tc.in)-1); err == nil {
			t.Errorf("ReadValue(%q, %d) = nil error, want one", tc.in, len(tc.in)-1)
		}
	}
}

func TestReadValueBounds(t *testing.T) {
	deep := strings.Repeat("*1\r\n", maxReplyDepth+1) + ":1\r\n"
	for _, tc := range []struct {
		name, in string
		max      int
		want     error // nil: any error
	}{
		{"bulk too large", "$100\r\nabc", 64, ErrReplyTooLarge},
		{"line too large", "+" + strings.Repeat("x", 100) + "\r\n", 64, ErrReplyTooLarge},
		{"count too large", "*99999999999999\r\n", 64, ErrReplyTooLarge},
		{"count more than bytes left", "*30\r\n", 64, ErrReplyTooLarge},
		{"map count overflows when doubled", "%9223372036854775807\r\n", 1 << 20, ErrReplyTooLarge},
		{"too deep", deep, 1 << 20, ErrReplyTooLarge},
		{"deep enough", strings.Repeat("*1\r\n", maxReplyDepth) + ":1\r\n", 1 << 20, nil},
		{"bulk truncated", "$5\r\nab", 64, io.ErrUnexpectedEOF},
		{"line truncated", "+OK", 64, io.ErrUnexpectedEOF},
		{"array truncated", "*3\r\n:1\r\n", 64, io.ErrUnexpectedEOF},
		{"bulk without CRLF", "$1\r\nabc\r\n", 64, nil},
		{"line without CR", "+OK\n", 64, nil},
		{"unknown type", "?\r\n", 64, nil},
		{"bad length", "$abc\r\n", 64, nil},
		{"bad integer", ":1.5\r\n", 64, nil},
		{"bad boolean", "#x\r\n", 64, nil},
		{"bad null", "_x\r\n", 64, nil},
		{"verbatim without format", "=2\r\nab\r\n", 64, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadValue(bufio.NewReaderSize(strings.NewReader(tc.in), 16), tc.max)
			if tc.name == "deep enough" {
				if err != nil {
					t.Errorf("ReadValue = %v, want no error", err)
				}
				return
			}
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("ReadValue(%.40q) = %v, want %v", tc.in, err, tc.want)
			}
		})
	}
	// ParseValue keeps "too deep" apart from "cut short".
	if _, _, err := ParseValue([]byte(deep)); !errors.Is(err, ErrReplyTooLarge) {
		t.Errorf("ParseValue(too deep) = %v, want ErrReplyTooLarge", err)
	}
}

func TestValueHelpers(t *testing.T) {
	for _, tc := range []struct {
		v         Value
		text, str string
		err       string // "": Err() is nil
		null      bool
	}{
		{v: str(KindSimple, "OK"), text: "OK", str: `"OK"`},
		{v: bulk("a b"), text: "a b", str: `"a b"`},
		{v: integer(-7), text: "-7", str: "-7"},
		{v: Value{Kind: KindBool, Int: 1}, text: "1", str: "true"},
		{v: str(KindDouble, "1.5"), text: "1.5", str: "1.5"},
		{v: str(KindVerbatim, "txt:hello"), text: "hello", str: `"hello"`},
		{v: Value{Kind: KindNull}, text: "", str: "nil", null: true},
		{v: str(KindError, "MOVED 1 a:1"), text: "MOVED 1 a:1", str: `(error "MOVED 1 a:1")`, err: "MOVED 1 a:1"},
		{v: str(KindBulkError, "ERR x"), text: "ERR x", str: `(error "ERR x")`, err: "ERR x"},
		{v: agg(KindArray, bulk("a"), integer(1), agg(KindSet, integer(2))), str: `["a" 1 {2}]`},
		{v: agg(KindMap, bulk("k"), integer(1), bulk("j"), Value{Kind: KindNull}), str: `map["k": 1 "j": nil]`},
		{v: agg(KindPush, bulk("invalidate")), str: `>["invalidate"]`},
	} {
		if got := tc.v.Text(); got != tc.text {
			t.Errorf("%v.Text() = %q, want %q", tc.v, got, tc.text)
		}
		if got := tc.v.String(); got != tc.str {
			t.Errorf("String() = %s, want %s", got, tc.str)
		}
		if got := tc.v.IsNull(); got != tc.null {
			t.Errorf("%v.IsNull() = %v, want %v", tc.v, got, tc.null)
		}
		err := tc.v.Err()
		if tc.err == "" {
			if err != nil {
				t.Errorf("%v.Err() = %v, want nil", tc.v, err)
			}
			continue
		}
		var re *ReplyError
		if !errors.As(err, &re) || re.Msg != tc.err {
			t.Errorf("%v.Err() = %#v, want a *ReplyError %q", tc.v, err, tc.err)
		}
	}
	if code := (&ReplyError{Msg: "CLUSTERDOWN no leader"}).Code(); code != "CLUSTERDOWN" {
		t.Errorf("Code() = %q, want CLUSTERDOWN", code)
	}
}

// FuzzParseValue checks that decoding never panics, and that whatever ParseValue decodes
// ReadReply frames too, ending at the same byte (the decoder checks more: integers, booleans).
func FuzzParseValue(f *testing.F) {
	for _, tc := range valueCases {
		f.Add([]byte(tc.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, rest, err := ParseValue(b)
		raw, rawErr := ReadReply(bufio.NewReader(strings.NewReader(string(b))), len(b))
		if err == nil && rawErr != nil {
			t.Fatalf("ParseValue: %v; ReadReply: %v", err, rawErr)
		}
		if err == nil && len(raw)+len(rest) != len(b) {
			t.Fatalf("ParseValue left %d bytes, ReadReply read %d of %d", len(rest), len(raw), len(b))
		}
		_ = v.String()
	})
}
