package node

import "context"

type hangupKey struct{}

// WithHangupCheck marks requests run with ctx as asked by a client whose hang-up ctx does not
// tell: gone reports, without blocking, whether the client has closed its connection. A
// connection that runs a lone command on the goroutine that reads its socket (the server's
// inline path) has nobody watching the socket while the command waits for its commit, so its
// context is not cancelled when the client leaves; ghost-lock cleanup asks gone instead (once
// a request's grant applied, through ClientGone), to release a lock granted to a client that
// will never hear of it.
func WithHangupCheck(ctx context.Context, gone func() bool) context.Context {
	return context.WithValue(ctx, hangupKey{}, gone)
}

// ClientGone reports whether the client of a request run with ctx is known to be gone: its
// context ended, or the check WithHangupCheck put on it says so.
func ClientGone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	gone, ok := ctx.Value(hangupKey{}).(func() bool)
	return ok && gone()
}
