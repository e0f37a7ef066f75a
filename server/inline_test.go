package server

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// A command read while the one before it is on its way to the serve goroutine must not run on
// the reader ahead of it (inline.go: handedOver). Each round writes two or three commands in one
// write, so that the last is read alone while the serve goroutine has just been handed the
// first: replies must come in order, and each command must see what the one before it did.
// Before the count of handed-over commands, every round of these failed.
func TestLoneCommandKeepsItsPlaceBehindHandedOverOnes(t *testing.T) {
	addr, _ := startFake(t)
	c := dialRaw(t, addr)
	read := func() string {
		t.Helper()
		r, err := readReply(c.br)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for i := range 200 {
		v := fmt.Sprint(i)
		c.nc.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c.nc, pipelineOf([][]string{{"SET", "k", v}, {"GET", "k"}}))
		if a, b := read(), read(); a != "+OK\r\n" || b != fmt.Sprintf("$%d\r\n%s\r\n", len(v), v) {
			t.Fatalf("round %d: SET then GET in one write answered %q, %q; want +OK, then the value set", i, a, b)
		}
		io.WriteString(c.nc, pipelineOf([][]string{{"LOCK", "l", "10000"}, {"UNLOCK", "l"}}))
		if a, b := read(), read(); !strings.HasPrefix(a, ":") || b != ":1\r\n" {
			t.Fatalf("round %d: LOCK then UNLOCK in one write answered %q, %q; want a token, then :1", i, a, b)
		}
		io.WriteString(c.nc, pipelineOf([][]string{{"MULTI"}, {"SET", "m", v}, {"EXEC"}}))
		if a, b, e := read(), read(), read(); a != "+OK\r\n" || b != "+QUEUED\r\n" || e != "*1\r\n+OK\r\n" {
			t.Fatalf("round %d: MULTI, SET, EXEC in one write answered %q, %q, %q; want the SET queued", i, a, b, e)
		}
		io.WriteString(c.nc, pipelineOf([][]string{{"SELECT", "1"}, {"GET", "k"}, {"SELECT", "0"}}))
		if a, b, e := read(), read(), read(); a != "+OK\r\n" || b != "$-1\r\n" || e != "+OK\r\n" {
			t.Fatalf("round %d: SELECT 1, GET k, SELECT 0 answered %q, %q, %q; want the GET in database 1 (nil)", i, a, b, e)
		}
	}
}
