package resp

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadReply(t *testing.T) {
	replies := []string{
		"+OK\r\n", "-ERR no\r\n", ":42\r\n", "$-1\r\n", "*-1\r\n", "_\r\n", "#t\r\n", ",1.5\r\n",
		"(12345678901234567890\r\n", "$5\r\nhe\r\no\r\n", "$0\r\n\r\n", "*0\r\n",
		"*2\r\n$1\r\na\r\n:1\r\n", "%1\r\n$1\r\nk\r\n*1\r\n+v\r\n", "~2\r\n:1\r\n:2\r\n",
		">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", "=7\r\ntxt:abc\r\n",
		"|1\r\n+ttl\r\n:3\r\n$1\r\nx\r\n",
	}
	all := strings.Join(replies, "")
	br := bufio.NewReaderSize(strings.NewReader(all), 16)
	for _, want := range replies {
		got, err := ReadReply(br, 1<<20)
		if err != nil || string(got) != want {
			t.Fatalf("ReadReply = %q, %v; want %q", got, err, want)
		}
	}
	if _, err := ReadReply(br, 1<<20); err != io.EOF {
		t.Errorf("at the end: %v, want EOF", err)
	}
	for _, bad := range []struct {
		in   string
		want error
	}{
		{"$100\r\nabc", ErrReplyTooLarge},
		{"$5\r\nab", io.ErrUnexpectedEOF},
		{"*3\r\n:1\r\n", io.ErrUnexpectedEOF}, // cut short between elements
		{strings.Repeat("*1\r\n", 40) + ":1\r\n", ErrReplyTooLarge},
		{"+" + strings.Repeat("x", 100) + "\r\n", ErrReplyTooLarge},
		{"*99999999999999\r\n", ErrReplyTooLarge},
		{"?\r\n", nil},
		{"$abc\r\n", nil},
	} {
		_, err := ReadReply(bufio.NewReaderSize(strings.NewReader(bad.in), 16), 64)
		if err == nil || bad.want != nil && !errors.Is(err, bad.want) {
			t.Errorf("ReadReply(%q) = %v, want %v", bad.in, err, bad.want)
		}
	}
}
