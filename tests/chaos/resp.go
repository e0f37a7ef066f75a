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

// certainFailure reports whether err is an error reply that guarantees nothing was done.
func certainFailure(err error) bool {
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
// []any, or an error (respError for an error reply, anything else for I/O).
func (c *client) do(timeout time.Duration, args ...string) (any, error) {
	if c.nc == nil {
		nc, err := net.DialTimeout("tcp", c.addr, timeout)
		if err != nil {
			return nil, err
		}
		c.nc, c.br = nc, bufio.NewReader(nc)
	}
	c.nc.SetDeadline(time.Now().Add(timeout))
	var b []byte
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.nc.Write(b); err != nil {
		c.close()
		return nil, err
	}
	v, err := readReply(c.br)
	if err != nil {
		var re respError
		if !errors.As(err, &re) {
			c.close()
		}
	}
	return v, err
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
