package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ErrReplyTooLarge means a reply exceeded the caller's size or nesting bound.
var ErrReplyTooLarge = errors.New("resp: reply too large")

// maxReplyDepth bounds nested aggregates in a reply we relay or decode.
const maxReplyDepth = 32

// minElemBytes is the fewest bytes one element of an aggregate takes ("_\r\n"): an aggregate
// that announces more elements than the bytes left could hold is too large before any arrives.
const minElemBytes = 3

// ReadReply reads one complete RESP2 or RESP3 reply from br and returns its raw bytes, at most
// maxBytes of them. A server uses it to relay a leader's replies to a client byte for byte. A
// RESP3 attribute (|) is read together with the reply it annotates.
func ReadReply(br *bufio.Reader, maxBytes int) ([]byte, error) {
	rr := replyReader{br: br, max: maxBytes}
	if _, err := rr.read(0); err != nil {
		return nil, err
	}
	return rr.out, nil
}

// ReadValue reads one complete RESP2 or RESP3 reply from br, at most maxBytes of it, and
// decodes it. It reads exactly what ReadReply reads, under the same bounds. A RESP3 attribute
// is read and dropped: the Value is the reply it annotates. The Value's byte slices share one
// buffer, which the caller owns.
func ReadValue(br *bufio.Reader, maxBytes int) (Value, error) {
	rr := replyReader{br: br, max: maxBytes, decode: true}
	return rr.read(0)
}

// ParseValue decodes the first reply in b and returns it with the bytes that follow it. The
// Value's byte slices alias b. A reply cut short yields io.ErrUnexpectedEOF (io.EOF for an
// empty b).
func ParseValue(b []byte) (Value, []byte, error) {
	pr := parsers.Get().(*parser)
	pr.r.Reset(b)
	pr.br.Reset(&pr.r)
	rr := replyReader{br: pr.br, max: len(b), decode: true, in: b}
	v, err := rr.read(0)
	pr.r.Reset(nil)
	pr.br.Reset(&pr.r)
	parsers.Put(pr) // the Value aliases b, never the reader's buffer
	if errors.Is(err, ErrReplyTooLarge) && rr.depth <= maxReplyDepth {
		err = io.ErrUnexpectedEOF // it announced more than b holds: b is cut short
	}
	if err != nil {
		return Value{}, b, err
	}
	return v, b[len(rr.out):], nil
}

// parser is a reader over a byte slice that ParseValue reuses: a script's redis.call parses
// a reply per call, and a fresh bufio.Reader would allocate 4 KiB for each.
type parser struct {
	r  bytes.Reader
	br *bufio.Reader
}

var parsers = sync.Pool{New: func() any {
	pr := &parser{}
	pr.br = bufio.NewReader(&pr.r)
	return pr
}}

// replyReader reads one reply, keeping its raw bytes in out and, when decode is set, building
// its Value too.
type replyReader struct {
	br     *bufio.Reader
	max    int
	out    []byte
	decode bool
	// in, when set, is the buffer br reads from (ParseValue): values alias it instead of out.
	in []byte
	// depth is the deepest nesting reached, so ParseValue tells "too deep" from "cut short".
	depth int
}

// bytes returns out[from:to] as a Value's payload: from in when the reply is parsed in memory,
// else from out with its capacity capped, so later appends never write into it.
func (r *replyReader) bytes(from, to int) []byte {
	if r.in != nil {
		return r.in[from:to:to]
	}
	return r.out[from:to:to]
}

func (r *replyReader) line() ([]byte, error) {
	start := len(r.out)
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(r.out)+len(frag) > r.max {
			return nil, ErrReplyTooLarge
		}
		r.out = append(r.out, frag...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(r.out) > start {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	l := r.out[start:]
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("resp: malformed reply line %q", l)
	}
	return l[1 : len(l)-2], nil
}

// read reads one reply at the given nesting depth; its Value is the zero Value unless r.decode.
func (r *replyReader) read(depth int) (Value, error) {
	r.depth = max(r.depth, depth)
	if depth > maxReplyDepth {
		return Value{}, ErrReplyTooLarge
	}
	start := len(r.out)
	body, err := r.line()
	if err != nil {
		return Value{}, err
	}
	bodyStart := start + 1
	kind := Kind(r.out[start])
	switch kind {
	case KindSimple, KindError, KindInteger, KindNull, KindBool, KindDouble, KindBigNumber:
		if !r.decode {
			return Value{}, nil
		}
		return r.scalar(kind, body, bodyStart)
	case KindBulk, KindVerbatim, KindBulkError:
		n, ok := parseInt(body)
		if !ok {
			return Value{}, fmt.Errorf("resp: bad length %q", body)
		}
		if n < 0 {
			return Value{Kind: KindNull}, nil
		}
		if n > int64(r.max-len(r.out)-2) {
			return Value{}, ErrReplyTooLarge
		}
		from := len(r.out)
		r.out = append(r.out, make([]byte, n+2)...)
		buf := r.out[from:]
		if _, err := io.ReadFull(r.br, buf); err != nil {
			return Value{}, io.ErrUnexpectedEOF
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Value{}, errors.New("resp: bulk reply without CRLF")
		}
		if kind == KindVerbatim && n < 4 {
			return Value{}, fmt.Errorf("resp: verbatim string without a format: %q", buf[:n])
		}
		return Value{Kind: kind, Str: r.bytes(from, from+int(n))}, nil
	case KindArray, KindSet, KindPush, KindMap, kindAttribute:
		n, ok := parseInt(body)
		if !ok {
			return Value{}, fmt.Errorf("resp: bad count %q", body)
		}
		if n < 0 {
			return Value{Kind: KindNull}, nil
		}
		// Bound the count before doubling a map's, so no count overflows.
		limit := int64((r.max - len(r.out)) / minElemBytes)
		pairs := kind == KindMap || kind == kindAttribute
		if pairs {
			limit /= 2
		}
		if n > limit {
			return Value{}, ErrReplyTooLarge
		}
		if pairs {
			n *= 2
		}
		v := Value{Kind: kind}
		if r.decode {
			v.Elems = make([]Value, 0, min(n, 64)) // grown as elements arrive, not as announced
		}
		for range n {
			e, err := r.read(depth + 1)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // the aggregate has begun
			}
			if err != nil {
				return Value{}, err
			}
			if r.decode {
				v.Elems = append(v.Elems, e)
			}
		}
		if kind == kindAttribute {
			v, err := r.read(depth + 1) // the reply the attribute annotates
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return v, err
		}
		return v, nil
	}
	return Value{}, fmt.Errorf("resp: unknown reply type %q", byte(kind))
}

// scalar decodes a one-line reply whose body starts at out[bodyStart].
func (r *replyReader) scalar(kind Kind, body []byte, bodyStart int) (Value, error) {
	v := Value{Kind: kind}
	switch kind {
	case KindInteger:
		n, ok := parseInt(body)
		if !ok {
			return Value{}, fmt.Errorf("resp: bad integer %q", body)
		}
		v.Int = n
	case KindBool:
		switch string(body) {
		case "t":
			v.Int = 1
		case "f":
		default:
			return Value{}, fmt.Errorf("resp: bad boolean %q", body)
		}
	case KindNull:
		if len(body) != 0 {
			return Value{}, fmt.Errorf("resp: bad null %q", body)
		}
	default:
		v.Str = r.bytes(bodyStart, bodyStart+len(body))
	}
	return v, nil
}
