package server

// Argument parsing and the size limits every command family checks.

import (
	"bytes"
	"strconv"

	"github.com/raftlock/raftlock/resp"
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

// checkKey replies with an error and returns false when key breaks the size limit.
func (r *request) checkKey(key []byte) bool {
	if len(key) > r.s.cfg.MaxKeyBytes {
		r.w.Error("ERR key is too long: raftlock keys are at most " + itoa(int64(r.s.cfg.MaxKeyBytes)) + " bytes")
		return false
	}
	return true
}

func (r *request) checkValue(v []byte) bool {
	if len(v) > r.s.cfg.MaxValueBytes {
		r.w.Error("ERR value is too long: raftlock values are at most " + itoa(int64(r.s.cfg.MaxValueBytes)) + " bytes")
		return false
	}
	return true
}

// leaseArg parses a relative lease in milliseconds for the named command.
func (r *request) leaseArg(arg []byte, cmd string) (uint64, bool) {
	ms, ok := parseInt(arg)
	if !ok {
		r.w.Error(errNotInt)
		return 0, false
	}
	if ms <= 0 || ms > r.s.cfg.MaxLeaseMs {
		r.w.Error("ERR invalid expire time in '" + cmd + "' command")
		return 0, false
	}
	return uint64(ms), true
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
