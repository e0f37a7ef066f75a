package server

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setUpInline readies the inline path (inline.go) for a connection on a plain TCP or Unix
// socket; on any other (TLS) it stays off.
func (c *conn) setUpInline() {
	var sc syscall.Conn
	switch nc := c.nc.(type) {
	case *net.TCPConn:
		sc = nc
	case *net.UnixConn:
		sc = nc
	default:
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	c.raw, c.pollFn = rc, c.pollGone
}

// peerGone reports whether the client has closed its end of the connection (or reset it),
// without blocking and without reading anything: a poll of the socket with no timeout.
// POLLRDHUP says the peer's FIN has arrived even while bytes it sent before are still unread
// (a next command, a QUIT), which a peek at the stream would show first. Only the reader
// goroutine asks (an inline command's grant), so the poll's function and result are the
// connection's own, made once (setUpInline).
func (c *conn) peerGone() bool {
	c.polledGone = false
	err := c.raw.Control(c.pollFn)
	return c.polledGone || err != nil
}

// pollGone is peerGone's poll of the socket fd; it sets c.polledGone.
func (c *conn) pollGone(fd uintptr) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	switch {
	case err != nil:
		// EINTR or worse: say present; the next read finds out.
	case n > 0:
		c.polledGone = fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}
