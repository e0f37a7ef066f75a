package server

import (
	"log/slog"
	"slices"

	"github.com/raftlock/raftlock/fsm"
)

// Pushes: what a connection is told outside the replies to its own commands, from the node's
// apply path (tracking.go's invalidations, pubsub.go's messages). They wait in the connection's
// bounded queue and its serve loop writes them between two replies, never inside one.

// pushQueue bounds the pushes waiting for one connection's writer. A client that does not read
// them is disconnected (Redis's client output buffer limit for pub/sub does the same), rather
// than let to keep a stale cache or lose messages silently.
const pushQueue = 1024

// push is one out-of-band message for a connection.
type push struct {
	kind pushKind
	// invalidate: key, or all (drop the whole cache). message/smessage: channel, body.
	// pmessage: pattern, channel, body.
	// lock-lost: key, token, body (the reason).
	key, pattern, channel, body []byte
	all                         bool
	token                       fsm.Token
}

type pushKind uint8

const (
	pushInvalidate pushKind = iota // RESP3 >2 invalidate [key] | null
	pushMessage                    // message channel body
	pushPMessage                   // pmessage pattern channel body
	pushSMessage                   // smessage channel body
	pushLockLost                   // RESP3 >4 lock-lost key token reason (lockwatch.go)
)

// invalidate is the push for a change to key (nil: every key).
func invalidate(key []byte) *push {
	if key == nil {
		return &push{kind: pushInvalidate, all: true}
	}
	return &push{kind: pushInvalidate, key: append([]byte{}, key...)}
}

// queuePush queues p for this connection's writer without blocking (it runs in the node's
// apply path, under the tracker's or the hub's lock). A queue past the connection's output
// limit (limits.go) adds c to full, for the caller to disconnect once the lock is released.
func (c *conn) queuePush(p *push, full []*conn) []*conn {
	n := pushSize(p)
	over := c.overOutputLimit(c.pushBytes.Add(n))
	if over == "" {
		select {
		case c.pushes <- p:
			return full
		default:
			over = "more than " + itoa(pushQueue) + " pushes queued"
		}
	}
	c.pushBytes.Add(-n)
	c.overflow.CompareAndSwap(nil, &over)
	if slices.Contains(full, c) {
		return full
	}
	return append(full, c)
}

// disconnectSlow closes the connections whose push queue overflowed. It runs with no lock held.
func disconnectSlow(log *slog.Logger, full []*conn, what string) {
	for _, c := range full {
		log.Warn("client output buffer limit reached; closing the connection", "client", c.id, "pushes", what, "reason", *c.overflow.Load())
		c.cancel()
		c.nc.Close()
	}
}

// writePush writes one push to the connection: RESP3 pushes (">"), or arrays in RESP2, as Redis
// sends pub/sub messages.
func (c *conn) writePush(p *push) {
	if c.pushBytes.Add(-pushSize(p)) <= int64(c.s.cfg.OutputLimit.Soft) {
		c.softSince.Store(0)
	}
	w := c.out
	switch p.kind {
	case pushInvalidate:
		w.Push(2)
		w.BulkString("invalidate")
		if p.all {
			w.Null()
			return
		}
		w.Array(1)
		w.Bulk(p.key)
	case pushMessage, pushSMessage:
		w.Push(3)
		w.BulkString(map[pushKind]string{pushMessage: "message", pushSMessage: "smessage"}[p.kind])
		w.Bulk(p.channel)
		w.Bulk(p.body)
	case pushPMessage:
		w.Push(4)
		w.BulkString("pmessage")
		w.Bulk(p.pattern)
		w.Bulk(p.channel)
		w.Bulk(p.body)
	case pushLockLost:
		if w.Protocol() != 3 {
			return // the client went back to RESP2 (HELLO 2) since it took the lock
		}
		w.Push(4)
		w.BulkString("lock-lost")
		w.Bulk(p.key)
		w.Int(int64(p.token))
		w.Bulk(p.body)
	}
}

// writeQueuedPushes writes every push already queued, for a command that must reply after them
// (an UNSUBSCRIBE after the messages published before it, as Redis orders them). The command
// runs alone, so its writer is the connection's.
func (c *conn) writeQueuedPushes() {
	for {
		select {
		case p := <-c.pushes:
			c.writePush(p)
		default:
			return
		}
	}
}
