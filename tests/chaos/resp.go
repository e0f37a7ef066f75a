package chaos

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// dialError is a failed connect: nothing was sent.
type dialError struct{ err error }

func (e dialError) Error() string { return "dial: " + e.err.Error() }

// certainFailure reports whether err guarantees nothing was done: a failed dial, or an error
// reply that says the request was not taken (no leader, not the leader, shutting down, or the
// follower could not reach the leader to forward it, or a disk fault refused it before it ran).
func certainFailure(err error) bool {
	if errors.As(err, new(dialError)) {
		return true
	}
	var re *resp.ReplyError
	if !errors.As(err, &re) {
		return false
	}
	if strings.HasPrefix(re.Msg, "MISCONF") {
		// A disk fault (docs/disk-faults.md): certain, unless the request was in flight when the
		// disk failed, which the reply says. Counting the others as certain makes the checks
		// catch a refused write that applied after all.
		return !strings.Contains(re.Msg, "outcome of this write is unknown")
	}
	return strings.HasPrefix(re.Msg, "CLUSTERDOWN") || strings.HasPrefix(re.Msg, "TRYAGAIN")
}

// client is the harness's connection to one node (a resp.Client), dialed on first use and
// again after any I/O error; each call is bounded by its own timeout.
type client struct {
	addr string
	rc   *resp.Client
}

func (c *client) close() {
	if c.rc != nil {
		c.rc.Close()
		c.rc = nil
	}
}

// do sends one command and reads its reply within timeout. The reply is nil, int64, string,
// []any (testutil.Plain), or an error (a *resp.ReplyError for an error reply, dialError when it
// could not connect, anything else for I/O).
func (c *client) do(timeout time.Duration, args ...string) (any, error) {
	vs, errs := c.pipe(timeout, nil, args)
	return vs[0], errs[0]
}

// pipe sends several commands in one write and reads their replies in order, all within
// timeout; after each reply but the last it calls between (if set), so the caller can time the
// replies one by one. An I/O error fails every reply not read yet.
func (c *client) pipe(timeout time.Duration, between func(i int), cmds ...[]string) ([]any, []error) {
	vs, errs := make([]any, len(cmds)), make([]error, len(cmds))
	fail := func(from int, err error) ([]any, []error) {
		c.close()
		for i := from; i < len(cmds); i++ {
			errs[i] = err
		}
		return vs, errs
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c.rc == nil {
		rc, err := resp.Dial(ctx, c.addr, 0)
		if err != nil {
			return fail(0, dialError{err})
		}
		c.rc = rc
	}
	for _, args := range cmds {
		c.rc.Send(args...)
	}
	if err := c.rc.Flush(ctx); err != nil {
		return fail(0, err)
	}
	for i := range cmds {
		v, err := c.rc.Receive(ctx)
		if err != nil && !errors.As(err, new(*resp.ReplyError)) {
			return fail(i, err)
		}
		if err == nil {
			vs[i] = testutil.Plain(v)
		}
		errs[i] = err
		if between != nil && i < len(cmds)-1 {
			between(i)
		}
	}
	return vs, errs
}
