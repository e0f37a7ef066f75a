package resp

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// serve accepts connections on a fresh listener until the test ends and hands each command
// (read with the package's Reader) to handle, which writes the reply; handle returning false
// stalls the connection (it reads on, never answers).
func serve(t *testing.T, handle func(w *Writer, args [][]byte) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := make(chan net.Conn, 16) // every connection a test opens, closed at its end
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		close(conns)
		for nc := range conns {
			nc.Close()
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- nc
			go func() {
				r, w := NewReader(nc, Limits{}), NewWriter(nc)
				answer := true
				for {
					args, err := r.ReadCommand()
					if err != nil {
						return
					}
					if answer = answer && handle(w, args); answer && r.Buffered() == 0 {
						w.Flush()
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// echoServer replies to PING with PONG, ECHO with its argument, ERRME with an error, STALL by
// never answering again, and anything else with its arguments as an array.
func echoServer(w *Writer, args [][]byte) bool {
	switch strings.ToUpper(string(args[0])) {
	case "PING":
		w.SimpleString("PONG")
	case "ECHO":
		w.Bulk(args[1])
	case "ERRME":
		w.Error("ERR you asked for it")
	case "STALL":
		return false
	default:
		w.Array(len(args))
		for _, a := range args {
			w.Bulk(a)
		}
	}
	return true
}

func dial(t *testing.T, addr string, timeout time.Duration) *Client {
	t.Helper()
	c, err := Dial(t.Context(), addr, timeout)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientDo(t *testing.T) {
	c := dial(t, serve(t, echoServer), 5*time.Second)
	ctx := t.Context()
	if v, err := c.Do(ctx, "PING"); err != nil || v.Kind != KindSimple || v.Text() != "PONG" {
		t.Fatalf("PING = %v, %v; want PONG", v, err)
	}
	// Binary arguments survive, CRLF and all.
	bin := []byte("a\r\n\x00b")
	if v, err := c.DoArgs(ctx, [][]byte{[]byte("ECHO"), bin}); err != nil || string(v.Str) != string(bin) {
		t.Fatalf("ECHO = %v, %v; want %q", v, err, bin)
	}
	// An error reply is a Value and a *ReplyError, and the connection goes on.
	v, err := c.Do(ctx, "ERRME")
	var re *ReplyError
	if !errors.As(err, &re) || re.Msg != "ERR you asked for it" || v.Kind != KindError {
		t.Fatalf("ERRME = %v, %#v; want an error reply", v, err)
	}
	if v, err := c.Do(ctx, "LIST", "a", ""); err != nil ||
		cmp.Diff(agg(KindArray, bulk("LIST"), bulk("a"), bulk("")), v, valueCmp) != "" {
		t.Fatalf("LIST a '' = %v, %v", v, err)
	}
}

func TestClientPipeline(t *testing.T) {
	c := dial(t, serve(t, echoServer), 5*time.Second)
	ctx := t.Context()
	c.Send("ECHO", "1")
	c.Send("ERRME")
	c.SendArgs([][]byte{[]byte("ECHO"), []byte("3")})
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	var got []string
	for range 3 {
		v, err := c.Receive(ctx)
		if err != nil && v.Err() == nil {
			t.Fatalf("Receive: %v", err)
		}
		got = append(got, v.String())
	}
	want := []string{`"1"`, `(error "ERR you asked for it")`, `"3"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pipelined replies (-want +got):\n%s", diff)
	}
}

func TestClientDeadlines(t *testing.T) {
	addr := serve(t, echoServer)
	t.Run("timeout", func(t *testing.T) {
		c := dial(t, addr, 100*time.Millisecond)
		start := time.Now()
		_, err := c.Do(t.Context(), "STALL")
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Do(STALL) = %v, want a deadline error", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Do(STALL) took %v, want about the 100ms timeout", d)
		}
		// The connection is at an unknown point of the stream: it stays failed.
		if _, err2 := c.Do(t.Context(), "PING"); !errors.Is(err2, os.ErrDeadlineExceeded) {
			t.Errorf("Do after a timeout = %v, want the same error %v", err2, err)
		}
	})
	t.Run("context deadline", func(t *testing.T) {
		c := dial(t, addr, time.Minute)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := c.Do(ctx, "STALL"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Do(STALL) = %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("context canceled", func(t *testing.T) {
		c := dial(t, addr, 0)
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel)
		if _, err := c.Do(ctx, "STALL"); !errors.Is(err, context.Canceled) {
			t.Errorf("Do(STALL) = %v, want context.Canceled", err)
		}
	})
}

func TestClientClose(t *testing.T) {
	c := dial(t, serve(t, echoServer), 5*time.Second)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if _, err := c.Do(t.Context(), "PING"); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
}

func TestClientServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		if nc, err := ln.Accept(); err == nil {
			nc.Close() // hang up at once
		}
	}()
	c := dial(t, ln.Addr().String(), 5*time.Second)
	<-accepted
	ln.Close()
	if _, err := c.Do(t.Context(), "PING"); err == nil || errors.As(err, new(*ReplyError)) {
		t.Errorf("Do on a closed connection = %v, want an I/O error", err)
	}
	if _, err := Dial(t.Context(), ln.Addr().String(), time.Second); err == nil {
		t.Error("Dial to a closed listener succeeded")
	}
}

func TestAppendCommand(t *testing.T) {
	if got, want := string(AppendCommand(nil, "SET", "k", "")), "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"; got != want {
		t.Errorf("AppendCommand = %q, want %q", got, want)
	}
	if got, want := string(AppendCommand([]byte("x"), []byte("a\r\n"))), "x*1\r\n$3\r\na\r\n\r\n"; got != want {
		t.Errorf("AppendCommand = %q, want %q", got, want)
	}
}
