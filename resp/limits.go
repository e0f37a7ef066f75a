package resp

import "fmt"

// Default limits. A lock server's arguments are short: keys, owner values, tokens, TTLs, and at
// most a Lua script for EVAL or SCRIPT LOAD (the scripts Redlock clients send are a few hundred
// bytes). Redis allows 512 MiB per argument (proto-max-bulk-len) and 2^31-1 arguments; accepting
// that much from every connection would let a few clients exhaust a node's memory, so raftlock's
// defaults are far smaller and still leave room for every legitimate client.
const (
	// DefaultMaxArgs is the default Limits.MaxArgs: enough for DEL or EXISTS with many keys.
	DefaultMaxArgs = 1024
	// DefaultMaxBulk is the default Limits.MaxBulk (1 MiB).
	DefaultMaxBulk = 1 << 20
	// DefaultMaxInline is the default Limits.MaxInline, Redis's PROTO_INLINE_MAX_SIZE (64 KiB).
	DefaultMaxInline = 64 << 10
	// DefaultMaxCommandBytes is the default Limits.MaxCommandBytes (4 MiB).
	DefaultMaxCommandBytes = 4 << 20

	// minInline is the smallest MaxInline accepted: MaxInline also bounds the "*<count>" and
	// "$<length>" header lines, and the longest valid one ("$-9223372036854775808") must fit.
	minInline = 32
)

// Limits bounds what a Reader accepts from one connection. A zero field means its default.
//
// The memory a Reader holds for one command is at most about twice MaxCommandBytes plus the
// framing of MaxArgs arguments plus MaxInline, and only once the client has actually sent that
// many bytes.
type Limits struct {
	// MaxArgs is the most arguments one command may have (the multibulk count, or the words of
	// an inline command). Redis replies "invalid multibulk length" past 2^31-1; raftlock does
	// past MaxArgs.
	MaxArgs int
	// MaxBulk is the longest one multibulk argument may be, in bytes (Redis:
	// proto-max-bulk-len). Longer lengths get "Protocol error: invalid bulk length".
	MaxBulk int
	// MaxInline is the longest an inline command line may be, in bytes, not counting its '\n',
	// and the longest a "*<count>" or "$<length>" header line may grow without its '\r' (Redis:
	// PROTO_INLINE_MAX_SIZE, 64 KiB).
	MaxInline int
	// MaxCommandBytes bounds the total length of all arguments of one command; a multibulk
	// command that announces more gets "Protocol error: too big multibulk request" (not a
	// Redis text: Redis has no such limit short of its 1 GiB query buffer).
	MaxCommandBytes int
}

// DefaultLimits returns the limits raftlock uses unless configured otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxArgs:         DefaultMaxArgs,
		MaxBulk:         DefaultMaxBulk,
		MaxInline:       DefaultMaxInline,
		MaxCommandBytes: DefaultMaxCommandBytes,
	}
}

// Validate reports whether the limits make sense; zero fields stand for their defaults.
func (l Limits) Validate() error {
	switch {
	case l.MaxArgs < 0:
		return fmt.Errorf("resp: MaxArgs must not be negative, got %d", l.MaxArgs)
	case l.MaxBulk < 0:
		return fmt.Errorf("resp: MaxBulk must not be negative, got %d", l.MaxBulk)
	case l.MaxInline < 0:
		return fmt.Errorf("resp: MaxInline must not be negative, got %d", l.MaxInline)
	case l.MaxCommandBytes < 0:
		return fmt.Errorf("resp: MaxCommandBytes must not be negative, got %d", l.MaxCommandBytes)
	}
	d := l.withDefaults()
	switch {
	case d.MaxInline < minInline:
		return fmt.Errorf("resp: MaxInline must be at least %d, got %d", minInline, d.MaxInline)
	case d.MaxBulk > d.MaxCommandBytes:
		return fmt.Errorf("resp: MaxBulk (%d) must not exceed MaxCommandBytes (%d)",
			d.MaxBulk, d.MaxCommandBytes)
	case d.MaxInline > d.MaxCommandBytes:
		return fmt.Errorf("resp: MaxInline (%d) must not exceed MaxCommandBytes (%d)",
			d.MaxInline, d.MaxCommandBytes)
	}
	return nil
}

// withDefaults replaces zero (and, defensively, negative) fields with their defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxArgs <= 0 {
		l.MaxArgs = DefaultMaxArgs
	}
	if l.MaxBulk <= 0 {
		l.MaxBulk = DefaultMaxBulk
	}
	if l.MaxInline <= 0 {
		l.MaxInline = DefaultMaxInline
	}
	if l.MaxCommandBytes <= 0 {
		l.MaxCommandBytes = DefaultMaxCommandBytes
	}
	return l
}

// usable returns the limits a Reader applies: the defaults for zero or negative fields, and
// MaxInline raised to the minimum a header line needs, so a Reader works whatever it is given.
func (l Limits) usable() Limits {
	l = l.withDefaults()
	l.MaxInline = max(l.MaxInline, minInline)
	return l
}
