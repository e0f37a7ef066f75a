package resp

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// ErrClosed is returned by a Client used after Close.
var ErrClosed = errors.New("resp: client closed")

// MaxClientReply bounds one reply a Client reads (64 MiB): a Client speaks to raftlock nodes and
// to Redis in tests, whose replies are far smaller; a larger one means a confused peer.
const MaxClientReply = 64 << 20

// Client is one RESP connection to a server: commands go out as multibulk arrays, replies come
// back decoded (ReadValue). Do sends one command and reads its reply; Send, Flush and Receive
// pipeline several. It is not safe for concurrent use.
//
// An I/O or framing error leaves the connection at an unknown point of the stream, so the
// Client closes it and returns that error from every later call; an error reply is only a reply
// (a *ReplyError), and the connection goes on.
type Client struct {
	nc      net.Conn
	br      *bufio.Reader
	timeout time.Duration
	// maxReply bounds one reply (SetMaxReply); zero means MaxClientReply.
	maxReply int
	out      []byte // commands sent but not yet flushed
	err      error  // sticky: why the connection is closed
}

// Dial connects to addr. timeout bounds the dial and then each call's I/O (each Do, Flush and
// Receive); zero means only ctx bounds them.
func Dial(ctx context.Context, addr string, timeout time.Duration) (*Client, error) {
	return DialTLS(ctx, addr, timeout, nil)
}

// DialTLS is Dial over TLS with config (nil: plain TCP, as Dial); the handshake is bounded as
// the dial is.
func DialTLS(ctx context.Context, addr string, timeout time.Duration, config *tls.Config) (*Client, error) {
	var nc net.Conn
	var err error
	if config == nil {
		d := net.Dialer{Timeout: timeout}
		nc, err = d.DialContext(ctx, "tcp", addr)
	} else {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: config}
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	return &Client{nc: nc, br: bufio.NewReader(nc), timeout: timeout}, nil
}

// DialAuth is DialTLS, then AUTH user password when password is not empty (user empty: the
// default user): how one node logs in on another's client port as the peer user. A refused
// AUTH closes the connection and is returned as an error naming addr.
func DialAuth(ctx context.Context, addr string, timeout time.Duration, config *tls.Config, user, password string) (*Client, error) {
	c, err := DialTLS(ctx, addr, timeout, config)
	if err != nil || password == "" {
		return c, err
	}
	if _, err := c.Do(ctx, "AUTH", cmp.Or(user, "default"), password); err != nil {
		c.Close()
		return nil, fmt.Errorf("authenticate to %s: %w", addr, err)
	}
	return c, nil
}

// Do sends args as one command and returns its reply. An error reply is returned as the Value
// and as a *ReplyError.
func (c *Client) Do(ctx context.Context, args ...string) (Value, error) {
	c.Send(args...)
	return c.roundTrip(ctx)
}

// DoArgs is Do for arguments held as bytes.
func (c *Client) DoArgs(ctx context.Context, args [][]byte) (Value, error) {
	c.SendArgs(args)
	return c.roundTrip(ctx)
}

func (c *Client) roundTrip(ctx context.Context) (Value, error) {
	if err := c.Flush(ctx); err != nil {
		return Value{}, err
	}
	return c.Receive(ctx)
}

// Send buffers args as one command; Flush sends what Send buffered.
func (c *Client) Send(args ...string) { c.out = AppendCommand(c.out, args...) }

// SendArgs is Send for arguments held as bytes.
func (c *Client) SendArgs(args [][]byte) { c.out = AppendCommand(c.out, args...) }

// Flush writes the buffered commands.
func (c *Client) Flush(ctx context.Context) error {
	if len(c.out) == 0 {
		return c.err
	}
	err := c.io(ctx, func() error {
		_, err := c.nc.Write(c.out)
		return err
	})
	c.out = c.out[:0]
	return err
}

// Receive reads the next reply, in the order the commands were sent. An error reply is returned
// as the Value and as a *ReplyError.
func (c *Client) Receive(ctx context.Context) (Value, error) {
	var v Value
	err := c.io(ctx, func() error {
		var err error
		v, err = ReadValue(c.br, cmp.Or(c.maxReply, MaxClientReply))
		return err
	})
	if err != nil {
		return Value{}, err
	}
	return v, v.Err()
}

// SetMaxReply bounds each later reply at n bytes instead of MaxClientReply: for a caller that
// expects one large reply (`raftlock backup` reading RAFT BACKUP).
func (c *Client) SetMaxReply(n int) { c.maxReply = n }

// Close closes the connection. It is idempotent.
func (c *Client) Close() error {
	if c.err != nil {
		return nil
	}
	c.err = ErrClosed
	return c.nc.Close()
}

// io runs op on the connection under the call's deadline: the Client's timeout from now, or
// ctx's deadline if sooner; ctx ending interrupts it. Any error closes the connection.
func (c *Client) io(ctx context.Context, op func() error) error {
	if c.err != nil {
		return c.err
	}
	var deadline time.Time
	if c.timeout > 0 {
		deadline = time.Now().Add(c.timeout)
	}
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline, ctxDeadline = d, true
	}
	err := c.nc.SetDeadline(deadline)
	if err == nil {
		stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(time.Unix(1, 0)) })
		err = op()
		stop()
	}
	if err != nil {
		if ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
			<-ctx.Done() // the socket's deadline was ctx's: ctx is done, or about to be
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
		}
		c.err = err
		c.nc.Close()
	}
	return err
}

// AppendCommand appends args to dst encoded as a RESP multibulk command, as clients send them.
func AppendCommand[S ~string | ~[]byte](dst []byte, args ...S) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, '\r', '\n')
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, '\r', '\n')
		dst = append(dst, a...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}
