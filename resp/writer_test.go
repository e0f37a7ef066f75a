package resp

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestWriterGolden(t *testing.T) {
	tests := []struct {
		name  string
		write func(w *Writer)
		resp2 string
		resp3 string
	}{
		{"simple string", func(w *Writer) { w.SimpleString("OK") }, "+OK\r\n", "+OK\r\n"},
		{"simple string CRLF", func(w *Writer) { w.SimpleString("a\r\nb") }, "+a  b\r\n", "+a  b\r\n"},
		{"error", func(w *Writer) { w.Error("ERR wrong number of arguments for 'lock' command") },
			"-ERR wrong number of arguments for 'lock' command\r\n",
			"-ERR wrong number of arguments for 'lock' command\r\n"},
		{"error injection", func(w *Writer) { w.Error("ERR x\r\n+OK") }, "-ERR x  +OK\r\n", "-ERR x  +OK\r\n"},
		{"error empty", func(w *Writer) { w.Error("") }, "-ERR\r\n", "-ERR\r\n"},
		{"error dash", func(w *Writer) { w.Error("-NOSCRIPT No matching script.") },
			"-NOSCRIPT No matching script.\r\n", "-NOSCRIPT No matching script.\r\n"},
		{"protocol error", func(w *Writer) { w.Error("ERR " + expectedDollar('\r').Msg) },
			"-ERR Protocol error: expected '$', got ' '\r\n", "-ERR Protocol error: expected '$', got ' '\r\n"},
		{"int", func(w *Writer) { w.Int(42) }, ":42\r\n", ":42\r\n"},
		{"int min", func(w *Writer) { w.Int(math.MinInt64) }, ":-9223372036854775808\r\n", ":-9223372036854775808\r\n"},
		{"int max", func(w *Writer) { w.Int(math.MaxInt64) }, ":9223372036854775807\r\n", ":9223372036854775807\r\n"},
		{"bulk", func(w *Writer) { w.Bulk([]byte("a\r\nb")) }, "$4\r\na\r\nb\r\n", "$4\r\na\r\nb\r\n"},
		{"bulk nil", func(w *Writer) { w.Bulk(nil) }, "$0\r\n\r\n", "$0\r\n\r\n"},
		{"bulk string", func(w *Writer) { w.BulkString("owner-1") }, "$7\r\nowner-1\r\n", "$7\r\nowner-1\r\n"},
		{"null", func(w *Writer) { w.Null() }, "$-1\r\n", "_\r\n"},
		{"null array", func(w *Writer) { w.NullArray() }, "*-1\r\n", "_\r\n"},
		{"array", func(w *Writer) { w.Array(2); w.Int(1); w.BulkString("a") },
			"*2\r\n:1\r\n$1\r\na\r\n", "*2\r\n:1\r\n$1\r\na\r\n"},
		{"array empty", func(w *Writer) { w.Array(0) }, "*0\r\n", "*0\r\n"},
		{"array negative", func(w *Writer) { w.Array(-1) }, "*-1\r\n", "_\r\n"},
		{"map", func(w *Writer) { w.Map(1); w.BulkString("proto"); w.Int(3) },
			"*2\r\n$5\r\nproto\r\n:3\r\n", "%1\r\n$5\r\nproto\r\n:3\r\n"},
		{"map negative", func(w *Writer) { w.Map(-1) }, "*-1\r\n", "_\r\n"},
		{"set", func(w *Writer) { w.Set(1); w.BulkString("a") }, "*1\r\n$1\r\na\r\n", "~1\r\n$1\r\na\r\n"},
		{"push", func(w *Writer) { w.Push(2); w.BulkString("invalidate"); w.NullArray() },
			"*2\r\n$10\r\ninvalidate\r\n*-1\r\n", ">2\r\n$10\r\ninvalidate\r\n_\r\n"},
		{"bool true", func(w *Writer) { w.Bool(true) }, ":1\r\n", "#t\r\n"},
		{"bool false", func(w *Writer) { w.Bool(false) }, ":0\r\n", "#f\r\n"},
		{"double", func(w *Writer) { w.Double(1.5) }, "$3\r\n1.5\r\n", ",1.5\r\n"},
		{"double inf", func(w *Writer) { w.Double(math.Inf(-1)) }, "$4\r\n-inf\r\n", ",-inf\r\n"},
		{"verbatim", func(w *Writer) { w.Verbatim("txt", "Some string") },
			"$11\r\nSome string\r\n", "=15\r\ntxt:Some string\r\n"},
		{"verbatim bad format", func(w *Writer) { w.Verbatim("markdown", "x") }, "$1\r\nx\r\n", "=5\r\ntxt:x\r\n"},
		{"raw", func(w *Writer) { w.Raw([]byte("+PONG\r\n")) }, "+PONG\r\n", "+PONG\r\n"},
	}
	for _, tt := range tests {
		for _, proto := range []int{2, 3} {
			want := tt.resp2
			if proto == 3 {
				want = tt.resp3
			}
			t.Run(tt.name+"/resp"+string(rune('0'+proto)), func(t *testing.T) {
				var out bytes.Buffer
				w := NewWriter(&out)
				w.SetProtocol(proto)
				if got := w.Protocol(); got != proto {
					t.Fatalf("Protocol() = %d, want %d", got, proto)
				}
				tt.write(w)
				if got := w.Buffered(); got != len(want) {
					t.Errorf("Buffered() = %d, want %d", got, len(want))
				}
				if out.Len() != 0 {
					t.Errorf("wrote %q before Flush", out.String())
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				if got := out.String(); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
				if got := w.Buffered(); got != 0 {
					t.Errorf("Buffered() after Flush = %d, want 0", got)
				}
			})
		}
	}
}

func TestWriterDefaultsToRESP2(t *testing.T) {
	w := NewWriter(nil)
	if got := w.Protocol(); got != 2 {
		t.Fatalf("Protocol() = %d, want 2", got)
	}
	w.SetProtocol(3)
	w.SetProtocol(4)
	if got := w.Protocol(); got != 2 {
		t.Fatalf("Protocol() after SetProtocol(4) = %d, want 2", got)
	}
}

func TestAppendDouble(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{math.Copysign(0, -1), "-0"},
		{1, "1"},
		{-1, "-1"},
		{1.5, "1.5"},
		{0.1, "0.10000000000000001"},
		{1.1, "1.1000000000000001"},
		{3.14159, "3.1415899999999999"},
		{-2.5, "-2.5"},
		{0.0001, "0.0001"},
		{0.00001, "1.0000000000000001e-05"},
		{1.5e-7, "1.4999999999999999e-07"},
		{123456789.125, "123456789.125"},
		{1e16, "10000000000000000"},
		{1e17, "1e+17"},
		{1 << 62, "4.6116860184273879e+18"},
		{1e19, "1e+19"},
		{1.5e300, "1.5000000000000001e+300"},
		{12345678901234567.5, "12345678901234568"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.SmallestNonzeroFloat64, "4.9406564584124654e-324"},
		{math.Inf(1), "inf"},
		{math.Inf(-1), "-inf"},
		{math.NaN(), "nan"},
	}
	for _, tt := range tests {
		if got := string(appendDouble(nil, tt.in)); got != tt.want {
			t.Errorf("appendDouble(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// failWriter fails every write.
type failWriter struct{ n int }

var errWrite = errors.New("write failed")

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, errWrite
}

func TestWriterErrorIsSticky(t *testing.T) {
	fw := &failWriter{}
	w := NewWriter(fw)
	w.SimpleString("OK")
	if err := w.Flush(); err != errWrite {
		t.Fatalf("Flush() = %v, want %v", err, errWrite)
	}
	w.SimpleString("OK")
	if got := w.Buffered(); got != 0 {
		t.Errorf("Buffered() after a write error = %d, want 0", got)
	}
	if err := w.Flush(); err != errWrite {
		t.Fatalf("second Flush() = %v, want %v", err, errWrite)
	}
	if fw.n != 1 {
		t.Errorf("underlying writes = %d, want 1", fw.n)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) - 1, nil }

func TestWriterShortWrite(t *testing.T) {
	w := NewWriter(shortWriter{})
	w.SimpleString("OK")
	if err := w.Flush(); err == nil {
		t.Fatal("Flush() = nil after a short write")
	}
}

func TestWriterFlushesLargeReplies(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	big := strings.Repeat("x", flushThreshold)
	w.BulkString(big)
	if w.Buffered() != 0 || out.Len() == 0 {
		t.Fatalf("Buffered() = %d, written %d: a reply past the threshold must be written", w.Buffered(), out.Len())
	}
	w.SimpleString("OK")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if want := "$65536\r\n" + big + "\r\n+OK\r\n"; out.String() != want {
		t.Fatalf("output of %d bytes differs from the %d expected", out.Len(), len(want))
	}
	if cap(w.buf) > maxRetainedOut {
		t.Errorf("buffer capacity %d retained, want <= %d", cap(w.buf), maxRetainedOut)
	}
}

func TestWriterAllocs(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	w.SetProtocol(3)
	payload := []byte("owner-1")
	allocs := testing.AllocsPerRun(100, func() {
		out.Reset()
		w.Array(6)
		w.Int(12345)
		w.Bulk(payload)
		w.BulkString("k")
		w.Null()
		w.Double(1.25)
		w.Bool(true)
		w.Map(1)
		w.SimpleString("OK")
		w.Error("ERR x")
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("allocations per reply batch = %v, want 0", allocs)
	}
}

func BenchmarkWriter(b *testing.B) {
	var out bytes.Buffer
	w := NewWriter(&out)
	payload := []byte("0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		out.Reset()
		w.Int(1234567)
		w.Bulk(payload)
		w.Null()
		_ = w.Flush()
	}
}
