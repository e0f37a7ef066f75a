// Package resp owns raftlock's Redis wire codec: a Reader that turns the bytes a client sends
// (RESP multibulk or Redis "inline" commands) into command arguments, and a Writer that encodes
// replies as RESP2 or RESP3, chosen per connection.
//
// The Reader is written for hostile input. It parses the way Redis's own server does
// (networking.c: processMultibulkBuffer, processInlineBuffer; util.c: string2ll; sds.c:
// sdssplitargs) and reports malformed input with Redis's exact error texts, but it never trusts a
// length prefix: buffers grow only as bytes actually arrive, and every command is bounded by
// Limits. A *ProtocolError means the connection is beyond repair; the caller replies
// "-ERR <text>" and closes it, as Redis does.
//
// The other direction, what a client of a Redis server needs: ReadReply reads one reply's raw
// bytes (a follower relays its leader's replies byte for byte), ReadValue and ParseValue decode
// one into a Value, on the same bounded, depth-limited reader; Client is a small pipelining
// client built on them, for tests and for a node that talks to its cluster.
//
// The package knows nothing about commands, locks or connections; the server package decides
// what arguments mean and which protocol version a connection speaks (HELLO).
package resp
