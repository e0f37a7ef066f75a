package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrReplyTooLarge means a reply exceeded the caller's size or nesting bound.
var ErrReplyTooLarge = errors.New("resp: reply too large")

// maxReplyDepth bounds nested aggregates in a reply we relay.
const maxReplyDepth = 32

// ReadReply reads one complete RESP2 or RESP3 reply from br and returns its raw bytes, at most
// maxBytes of them. A server uses it to relay a leader's replies to a client byte for byte. A
// RESP3 attribute (|) is read together with the reply it annotates.
func ReadReply(br *bufio.Reader, maxBytes int) ([]byte, error) {
	rr := replyReader{br: br, max: maxBytes}
	if err := rr.read(0); err != nil {
		return nil, err
	}
	return rr.out, nil
}

type replyReader struct {
	br  *bufio.Reader
	max int
	out []byte
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

func (r *replyReader) read(depth int) error {
	if depth > maxReplyDepth {
		return ErrReplyTooLarge
	}
	start := len(r.out)
	body, err := r.line()
	if err != nil {
		return err
	}
	typ := r.out[start]
	switch typ {
	case '+', '-', ':', '_', '#', ',', '(':
		return nil
	case '$', '=', '!':
		n, ok := parseInt(body)
		if !ok {
			return fmt.Errorf("resp: bad length %q", body)
		}
		if n < 0 {
			return nil
		}
		if n > int64(r.max-len(r.out)-2) {
			return ErrReplyTooLarge
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r.br, buf); err != nil {
			return io.ErrUnexpectedEOF
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return errors.New("resp: bulk reply without CRLF")
		}
		r.out = append(r.out, buf...)
		return nil
	case '*', '~', '>', '%', '|':
		n, ok := parseInt(body)
		if !ok {
			return fmt.Errorf("resp: bad count %q", body)
		}
		if n < 0 {
			return nil
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		if n > int64(r.max) {
			return ErrReplyTooLarge
		}
		for i := int64(0); i < n; i++ {
			if err := r.read(depth + 1); err != nil {
				return err
			}
		}
		if typ == '|' {
			return r.read(depth + 1) // the reply the attribute annotates
		}
		return nil
	}
	return fmt.Errorf("resp: unknown reply type %q", typ)
}
