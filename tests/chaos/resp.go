package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// respError is an error reply from the server.
type respError string

func (e respError) Error() string { return string(e) }

// dialError is a failed connect: nothing was sent.
type dialError struct{ err error }

func (e dialError) Error() string { return "dial: " + e.err.Error() }

// certainFailure reports whether err guarantees nothing was done: a failed dial, or an error
// reply that says the request was not taken (no leader, not the leader, shutting down, or the
// follower could not reach the leader to forward it).
func certainFailure(err error) bool {
	if errors.As(err, new(dialError)) {
		return true
	}
	var re respError
	if !errors.As(err, &re) {
		return false
	}
	s := string(re)
	return strings.HasPrefix(s, "CLUSTERDOWN") || strings.HasPrefix(s, "TRYAGAIN")
}

// client is a minimal RESP2 client: one connection, one request at a time, deadlines per call.
// Any I/O error closes the connection; the next call dials again.
type client struct {
	addr string
	nc   net.Conn
	br   *bufio.Reader
}

func (c *client) close() {
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

// do sends one command and reads its reply within timeout. The reply is nil, int64, string,
// []any, or an error (respError for an error reply, dialError when it could not connect,
// anything else for I/O).
func (c *client) do(timeout time.Duration, args ...string) (any, error) {
	vs, errs := c.pipe(timeout, nil, args)
	return vs[0], errs[0]
}

// pipe sends several commands in one write and reads their replies in order; after each reply
// but the last it calls between (if set), so the caller can time the replies one by one. An
// I/O error fails every reply not read yet.
func (c *client) pipe(timeout time.Duration, between func(i int), cmds ...[]string) ([]any, []error) {
	vs, errs := make([]any, len(cmds)), make([]error, len(cmds))
	fail := func(from int, err error) ([]any, []error) {
		c.close()
		for i := from; i < len(cmds); i++ {
			errs[i] = err
		}
		return vs, errs
	}
	if c.nc == nil {
		nc, err := net.DialTimeout("tcp", c.addr, timeout)
		if err != nil {
			return fail(0, dialError{err})
		}
		c.nc, c.br = nc, bufio.NewReader(nc)
	}
	c.nc.SetDeadline(time.Now().Add(timeout))
	var b []byte
	for _, args := range cmds {
		b = fmt.Appendf(b, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.nc.Write(b); err != nil {
		return fail(0, err)
	}
	for i := range cmds {
		vs[i], errs[i] = readReply(c.br)
		if errs[i] != nil && !errors.As(errs[i], new(respError)) {
			return fail(i, errs[i])
		}
		if between != nil && i < len(cmds)-1 {
			between(i)
		}
	}
	return vs, errs
}

func readReply(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return nil, fmt.Errorf("bad reply line %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, respError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			v, err := readReply(br)
			if err != nil {
				var re respError
				if !errors.As(err, &re) {
					return nil, err
				}
				v = err
			}
			out[i] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown reply type %q", line)
}

func ioReadFull(br *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := br.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
