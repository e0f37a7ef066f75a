// Package proxy is a small TCP proxy for the client-compatibility tests: it forwards a client's
// connections to a server and can log every RESP command and reply it carries (what
// `redis-cli MONITOR` shows on Redis, which raftlock has not) and freeze traffic (a holder that
// stops answering, for lease-expiry tests).
package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Proxy forwards connections accepted on Addr to Target.
type Proxy struct {
	Addr   string // where clients dial (127.0.0.1, a free port)
	Target string

	ln     net.Listener
	logf   func(format string, args ...any)
	frozen atomic.Bool
	thaw   chan struct{}
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	nconn  atomic.Int64
}

// Start listens on 127.0.0.1 (a free port) and forwards to target. logf, when not nil, gets one
// line per RESP command (">") and reply ("<"), tagged with the connection number.
func Start(target string, logf func(format string, args ...any)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, ln: ln, logf: logf,
		thaw: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.Target)
		if err != nil {
			c.Close()
			continue
		}
		id := p.nconn.Add(1)
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, fmt.Sprintf("%s c%d >", p.Target, id))
		go p.pipe(s, c, fmt.Sprintf("%s c%d <", p.Target, id))
	}
}

// pipe copies src to dst; with logging on, it decodes the stream as RESP values as it goes.
func (p *Proxy) pipe(src, dst net.Conn, tag string) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	var tp *tap
	if p.logf != nil {
		tp = newTap(tag, p.logf)
		defer tp.close()
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			tp.feed(buf[:n])
			p.waitThawed()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// tap decodes a copy of one direction of a connection as RESP values and logs each one.
type tap struct {
	pw   *io.PipeWriter
	done chan struct{}
}

func newTap(tag string, logf func(format string, args ...any)) *tap {
	pr, pw := io.Pipe()
	t := &tap{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		br := bufio.NewReader(pr)
		for {
			v, err := readValue(br, 0)
			if err != nil {
				io.Copy(io.Discard, pr)
				return
			}
			logf("%s %s", tag, v)
		}
	}()
	return t
}

func (t *tap) feed(b []byte) {
	if t != nil {
		t.pw.Write(b)
	}
}

func (t *tap) close() {
	if t != nil {
		t.pw.Close()
		<-t.done
	}
}

var traceConns atomic.Int64

// Trace wraps a client's connection to addr so that every command it writes (">") and every
// reply it reads ("<") is logged: what MONITOR would show, for clients that take a dialer.
func Trace(c net.Conn, addr string, logf func(format string, args ...any)) net.Conn {
	tag := fmt.Sprintf("%s c%d", addr, traceConns.Add(1))
	return &tracedConn{Conn: c, out: newTap(tag+" >", logf), in: newTap(tag+" <", logf)}
}

type tracedConn struct {
	net.Conn
	out, in *tap
	once    sync.Once
}

func (c *tracedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.feed(b[:n])
	return n, err
}

func (c *tracedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.feed(b[:n])
	return n, err
}

func (c *tracedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.out.close(); c.in.close() })
	return err
}

func (p *Proxy) waitThawed() {
	for p.frozen.Load() {
		p.mu.Lock()
		ch := p.thaw
		p.mu.Unlock()
		if !p.frozen.Load() {
			return
		}
		<-ch
	}
}

// Freeze stops forwarding in both directions: the connections stay open, nothing gets through
// (a client that hangs, from the server's point of view, and a server that hangs, from the
// client's).
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if !p.frozen.Load() {
		p.thaw = make(chan struct{})
		p.frozen.Store(true)
	}
	p.mu.Unlock()
}

// Thaw resumes forwarding.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	if p.frozen.Load() {
		p.frozen.Store(false)
		close(p.thaw)
	}
	p.mu.Unlock()
}

// Close stops listening, closes every connection and waits for the copiers.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.Thaw()
	p.wg.Wait()
}

// readValue decodes one RESP2/RESP3 value into a short readable form.
func readValue(br *bufio.Reader, depth int) (string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return `""`, nil
	}
	if depth > 16 {
		return line, nil
	}
	typ, rest := line[0], line[1:]
	switch typ {
	case '+', '-', ':', ',', '#', '(', '_':
		return line, nil
	case '$', '=', '!':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return line, nil // $-1: RESP2 nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", err
		}
		s := string(b[:n])
		if len(s) > 200 {
			s = s[:200] + "..."
		}
		if typ == '$' {
			return strconv.Quote(s), nil
		}
		return string(typ) + strconv.Quote(s), nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(rest)
		if err != nil || n < 0 {
			return line, nil // *-1: RESP2 nil array
		}
		if typ == '%' || typ == '|' {
			n *= 2
		}
		parts := make([]string, 0, n)
		for i := 0; i < n; i++ {
			v, err := readValue(br, depth+1)
			if err != nil {
				return "", err
			}
			parts = append(parts, v)
		}
		open := map[byte]string{'*': "[", '~': "~[", '>': ">[", '%': "%[", '|': "|["}[typ]
		if typ == '|' {
			// An attribute precedes the value it annotates.
			v, err := readValue(br, depth+1)
			if err != nil {
				return "", err
			}
			return open + strings.Join(parts, " ") + "] " + v, nil
		}
		return open + strings.Join(parts, " ") + "]", nil
	default:
		return "inline " + strconv.Quote(line), nil
	}
}
