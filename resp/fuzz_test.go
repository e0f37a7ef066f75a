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

// fuzzLimits are small so the fuzzer reaches every limit. MaxInline <= MaxBulk, so an inline
// word always fits in a multibulk argument and every command re-encodes within the limits.
var fuzzLimits = Limits{MaxArgs: 8, MaxBulk: 64, MaxInline: 48, MaxCommandBytes: 128}

// fuzzSeeds returns inputs that put boundary integers in count and length positions.
func fuzzSeeds() []string {
	nums := []string{
		"0", "-0", "00", "01", "+1", "-1", "1", "2",
		"2147483647", "2147483648", "-2147483648", "-2147483649",
		"9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "99999999999999999999",
	}
	for _, lim := range []Limits{fuzzLimits, DefaultLimits()} {
		for _, n := range []int{lim.MaxArgs, lim.MaxBulk, lim.MaxInline, lim.MaxCommandBytes} {
			nums = append(nums, strconv.Itoa(n-1), strconv.Itoa(n), strconv.Itoa(n+1))
		}
	}
	seeds := []string{
		"",
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$4\r\nlock\r\n$6\r\nowner1\r\n*2\r\n$3\r\nGET\r\n$4\r\nlock\r\n",
		"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n",
		"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n",
		"*1\r\n$4\r\nPINGXX",
		"*1\r\nX\r\n",
		"*1\r\n\r\n",
		"*1\r",
		"PING\r\n",
		"SET k v\nGET k\n",
		"\r\n   \r\n\n",
		`SET "a b" 'c d' "\x41\n\q" 'e\'f'` + "\r\n",
		`ECHO a"b c"` + "\r\n",
		"PING \"a\r\n",
		"PING 'a'b\r\n",
		strings.Repeat("a ", 9) + "\r\n",
		strings.Repeat("A", fuzzLimits.MaxInline) + "\n",
		strings.Repeat("A", fuzzLimits.MaxInline+1) + "\n",
		"*" + strings.Repeat("1", fuzzLimits.MaxInline+1),
		"*2\r\n$4\r\nECHO\r\n$64\r\n" + strings.Repeat("x", 64) + "\r\n",
		"*3\r\n$64\r\n" + strings.Repeat("x", 64) + "\r\n$63\r\n" + strings.Repeat("y", 63) + "\r\n$1\r\n",
	}
	for _, n := range nums {
		seeds = append(seeds,
			"*"+n+"\r\n$4\r\nPING\r\n",
			"*"+n+"\r\n"+strings.Repeat("$1\r\na\r\n", 9),
			"*1\r\n$"+n+"\r\nPING\r\n",
			"*2\r\n$4\r\nECHO\r\n$"+n+"\r\n"+strings.Repeat("x", 65)+"\r\n",
		)
	}
	return seeds
}

// outcome is everything a Reader returned for one input.
type outcome struct {
	Cmds [][]string
	Err  string
}

func readOutcome(t *testing.T, r io.Reader, lim Limits) outcome {
	rd := NewReader(r, lim)
	l := rd.lim
	bound := initialBufSize + 2*(l.MaxCommandBytes+l.MaxArgs*25+l.MaxInline+64)
	var out outcome
	for {
		args, err := rd.ReadCommand()
		if c := cap(rd.buf); c > bound {
			t.Fatalf("buffer capacity %d exceeds the bound %d", c, bound)
		}
		if err != nil {
			var pe *ProtocolError
			switch {
			case errors.As(err, &pe):
				if !strings.HasPrefix(pe.Msg, "Protocol error: ") || strings.ContainsAny(pe.Msg, "\r\n") {
					t.Fatalf("malformed protocol error text %q", pe.Msg)
				}
			case err == io.EOF, err == io.ErrUnexpectedEOF:
			default:
				t.Fatalf("unexpected error type %T: %v", err, err)
			}
			out.Err = err.Error()
			return out
		}
		if len(args) == 0 || len(args) > l.MaxArgs {
			t.Fatalf("command with %d args; want 1..%d", len(args), l.MaxArgs)
		}
		total := 0
		cmd := make([]string, len(args))
		for i, a := range args {
			if len(a) > max(l.MaxBulk, l.MaxInline) {
				t.Fatalf("argument of %d bytes exceeds the limits", len(a))
			}
			total += len(a)
			cmd[i] = string(a)
		}
		if total > l.MaxCommandBytes {
			t.Fatalf("command of %d bytes exceeds MaxCommandBytes %d", total, l.MaxCommandBytes)
		}
		out.Cmds = append(out.Cmds, cmd)
	}
}

// encode returns cmd as a RESP multibulk command.
func encode(cmd []string) []byte {
	b := []byte("*" + strconv.Itoa(len(cmd)) + "\r\n")
	for _, a := range cmd {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, lim := range []Limits{fuzzLimits, DefaultLimits()} {
			want := readOutcome(t, bytes.NewReader(data), lim)
			// However the bytes are split, the outcome is the same.
			if got := readOutcome(t, iotest.OneByteReader(bytes.NewReader(data)), lim); !cmp.Equal(want, got) {
				t.Fatalf("byte by byte differs from whole (-whole +bytewise):\n%s", cmp.Diff(want, got))
			}
			// Every command re-encodes as multibulk and parses back to the same arguments.
			for _, cmd := range want.Cmds {
				back := readOutcome(t, bytes.NewReader(encode(cmd)), lim)
				if want := (outcome{Cmds: [][]string{cmd}, Err: io.EOF.Error()}); !cmp.Equal(want, back) {
					t.Fatalf("re-encoded command parsed differently (-want +got):\n%s", cmp.Diff(want, back))
				}
			}
		}
	})
}
