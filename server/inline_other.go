//go:build !linux

package server

// setUpInline leaves the inline path (inline.go) off: peerGone needs Linux's POLLRDHUP to see
// a hang-up behind unread bytes.
func (c *conn) setUpInline() {}

// peerGone is never asked without the inline path.
func (c *conn) peerGone() bool { return false }
