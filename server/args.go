package server

import (
	"bytes"
	"strconv"
)

// parseInt parses a decimal int64 the way Redis's string2ll does: optional '-', digits, no
// spaces, no '+', no leading zeros, nothing that overflows.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}

// parseToken parses a fencing token: a positive integer.
func parseToken(b []byte) (fsm64 uint64, ok bool) {
	v, ok := parseInt(b)
	if !ok || v <= 0 {
		return 0, false
	}
	return uint64(v), true
}

// is reports whether arg equals the option name, ignoring ASCII case.
func is(arg []byte, name string) bool {
	return len(arg) == len(name) && bytes.EqualFold(arg, []byte(name))
}

// lower returns an ASCII-lowercased copy of b as a string, for command lookup.
func lower(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
