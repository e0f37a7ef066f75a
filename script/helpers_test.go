package script

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// keyspace is a Caller holding a few string keys, answering the handful of commands the tests
// use with Redis 7.0's replies (and the server's "not allowed from script" texts for the rest).
type keyspace struct {
	data  map[string][]byte
	calls [][]string
}

func newKeyspace() *keyspace { return &keyspace{data: make(map[string][]byte)} }

var errWrongArgs = Value{Kind: KindError, Str: []byte("ERR Wrong number of args calling Redis command from script")}

func (k *keyspace) Call(args [][]byte) (Value, error) {
	call := make([]string, len(args))
	for i, a := range args {
		call[i] = string(a)
	}
	k.calls = append(k.calls, call)
	arity := map[string]int{"get": 2, "set": -3, "del": -2, "incr": 2, "ping": -1, "mget": -2}
	name := strings.ToLower(call[0])
	n, ok := arity[name]
	switch {
	case !ok:
		return Value{Kind: KindError, Str: []byte("ERR Unknown Redis command called from script")}, nil
	case n > 0 && len(args) != n, n < 0 && len(args) < -n:
		return errWrongArgs, nil
	}
	switch name {
	case "get":
		if v, ok := k.data[call[1]]; ok {
			return Value{Kind: KindBulk, Str: v}, nil
		}
		return Value{Kind: KindNil}, nil
	case "set":
		k.data[call[1]] = bytes.Clone(args[2])
		return Value{Kind: KindStatus, Str: []byte("OK")}, nil
	case "del":
		n := 0
		for _, key := range call[1:] {
			if _, ok := k.data[key]; ok {
				delete(k.data, key)
				n++
			}
		}
		return Value{Kind: KindInt, Int: int64(n)}, nil
	case "incr":
		n := int64(0)
		if v, ok := k.data[call[1]]; ok {
			var err error
			if n, err = strconv.ParseInt(string(v), 10, 64); err != nil {
				return Value{Kind: KindError, Str: []byte("ERR value is not an integer or out of range")}, nil
			}
		}
		n++
		k.data[call[1]] = strconv.AppendInt(nil, n, 10)
		return Value{Kind: KindInt, Int: n}, nil
	case "mget":
		arr := make([]Value, len(call)-1)
		for i, key := range call[1:] {
			if v, ok := k.data[key]; ok {
				arr[i] = Value{Kind: KindBulk, Str: v}
			}
		}
		return Value{Kind: KindArray, Array: arr}, nil
	}
	return Value{Kind: KindStatus, Str: []byte("PONG")}, nil
}

// callerFunc adapts a function to Caller.
type callerFunc func(args [][]byte) (Value, error)

func (f callerFunc) Call(args [][]byte) (Value, error) { return f(args) }

func testEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := New(cfg)
	t.Cleanup(e.Close)
	return e
}

func bytesOf(s ...string) [][]byte {
	b := make([][]byte, len(s))
	for i, x := range s {
		b[i] = []byte(x)
	}
	return b
}

// reply renders Run's outcome as the RESP2 bytes the server would send.
func reply(v Value, err error) string {
	if err != nil {
		var se *Error
		if !errors.As(err, &se) {
			return "not an *Error: " + err.Error()
		}
		return "-" + se.Msg + "\r\n"
	}
	return v.String()
}

// run runs src on e with a fresh keyspace and returns the RESP2 reply.
func run(t testing.TB, e *Engine, src string, keys, argv []string) string {
	t.Helper()
	return reply(e.Run(context.Background(), []byte(src), bytesOf(keys...), bytesOf(argv...), newKeyspace()))
}
