package server

import (
	"bytes"
	"strconv"

	"github.com/raftlock/raftlock/server/resp"
)

// parseInt parses a decimal int64 the way Redis's string2ll does.
func parseInt(b []byte) (int64, bool) { return resp.ParseInt(b) }

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
