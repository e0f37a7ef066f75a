package tests

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// queued is one waiter LOCKWAITERS listed.
type queued struct {
	owner, kind string
	place       int64
}

// lockWaitersOf is LOCKWAITERS key on addr: its queue in the order listed. Fields are read by
// name; those it does not know are skipped.
func lockWaitersOf(addr, key string) ([]queued, error) {
	v, err := call(addr, "LOCKWAITERS", key)
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("LOCKWAITERS %s = %#v, want an array", key, v)
	}
	var out []queued
	for _, x := range a {
		f, ok := x.([]any)
		if !ok || len(f)%2 != 0 {
			return nil, fmt.Errorf("LOCKWAITERS %s: waiter %#v", key, x)
		}
		var w queued
		for i := 0; i < len(f); i += 2 {
			switch f[i] {
			case "owner":
				w.owner, _ = f[i+1].(string)
			case "kind":
				w.kind, _ = f[i+1].(string)
			case "place":
				w.place, _ = f[i+1].(int64)
			}
		}
		if w.owner == "" || w.place <= 0 {
			return nil, fmt.Errorf("LOCKWAITERS %s: waiter %#v", key, x)
		}
		out = append(out, w)
	}
	return out, nil
}

// waitQueue waits until key's queue on addr lists exactly owners, in that order, and returns it.
func waitQueue(t *testing.T, addr, key string, owners ...string) []queued {
	t.Helper()
	var ws []queued
	testutil.WaitFor(t, 10*time.Second, func() error {
		var err error
		if ws, err = lockWaitersOf(addr, key); err != nil {
			return err
		}
		got := make([]string, len(ws))
		for i, w := range ws {
			got[i] = w.owner
		}
		if !slices.Equal(got, owners) {
			return fmt.Errorf("LOCKWAITERS %s lists %v, want %v", key, got, owners)
		}
		return nil
	})
	return ws
}

// sendWait sends args on a connection of its own, allowed to wait 30 s, and returns where the
// decoded reply comes (an error for a read error) and the connection, to hang up on.
func sendWait(t *testing.T, addr string, args ...string) (<-chan any, *respConn) {
	t.Helper()
	wc, err := dialRESP(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	wc.timeout = 30 * time.Second
	reply := make(chan any, 1)
	go func() {
		raw, err := wc.do(args...)
		if err != nil {
			reply <- err
			return
		}
		v, err := parseReply(raw)
		if err != nil {
			reply <- err
			return
		}
		reply <- v
	}()
	return reply, wc
}

// replyWithin is the reply sent on ch within 10 s.
func replyWithin(t *testing.T, ch <-chan any, what string) any {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no reply in 10 s", what)
		return nil
	}
}

// MLOCK ... WAIT queues as one waiter (docs/locks.md, "Waiting"): behind a plain lock held on
// k2 and an earlier LOCK ... WAIT on k2, at one place in the queues of both its keys, holding
// neither meanwhile (k1 stays free, and a LOCK k1 that does not wait is refused: someone waits
// on it); it is granted both keys, a token each above its place, once the earlier waiter has had
// k2 and let it go; and a waiter whose client hangs up leaves both queues.
func TestMLockWaitQueuesAsOne(t *testing.T) {
	n := startNode(t, t.TempDir())
	holder, err := callInt(n.addr, "LOCK", "k2", "60000", "OWNER", "holder")
	if err != nil {
		t.Fatalf("LOCK k2: %v", err)
	}
	early, _ := sendWait(t, n.addr, "LOCK", "k2", "60000", "OWNER", "early", "WAIT", "30000")
	waitQueue(t, n.addr, "k2", "early")
	mlock, _ := sendWait(t, n.addr, "MLOCK", "60000", "k1", "k2", "OWNER", "m", "WAIT", "30000")
	q2 := waitQueue(t, n.addr, "k2", "early", "m")
	q1 := waitQueue(t, n.addr, "k1", "m")
	m := q1[0]
	if m != q2[1] || m.kind != "mlock" || q2[0].place >= m.place {
		t.Fatalf("LOCKWAITERS k1 = %v, k2 = %v: want the MLOCK at one place in both, kind mlock, after early", q1, q2)
	}
	if v, err := call(n.addr, "LOCKINFO", "k1"); err != nil || v != nil {
		t.Fatalf("LOCKINFO k1 while the MLOCK waits = %#v, %v: want it free", v, err)
	}
	if v, err := call(n.addr, "LOCK", "k1", "1000"); err != nil || v != nil {
		t.Fatalf("LOCK k1 while the MLOCK waits on it = %#v, %v: want nil", v, err)
	}

	if ok, err := callInt(n.addr, "UNLOCK", "k2", strconv.FormatInt(holder, 10)); err != nil || ok != 1 {
		t.Fatalf("holder's UNLOCK k2 = %d, %v", ok, err)
	}
	v := replyWithin(t, early, "early's LOCK WAIT")
	et, ok := v.(int64)
	if !ok || et <= q2[0].place {
		t.Fatalf("early's LOCK WAIT = %#v, want a token above its place %d", v, q2[0].place)
	}
	// early holds k2: the MLOCK still waits, on both keys
	waitQueue(t, n.addr, "k2", "m")
	waitQueue(t, n.addr, "k1", "m")
	select {
	case v := <-mlock:
		t.Fatalf("MLOCK granted while early holds k2: %#v", v)
	default:
	}
	if ok, err := callInt(n.addr, "UNLOCK", "k2", strconv.FormatInt(et, 10)); err != nil || ok != 1 {
		t.Fatalf("early's UNLOCK k2 = %d, %v", ok, err)
	}
	v = replyWithin(t, mlock, "MLOCK WAIT")
	toks, ok := v.([]any)
	if !ok || len(toks) != 2 {
		t.Fatalf("MLOCK WAIT = %#v, want two tokens", v)
	}
	for i, k := range []string{"k1", "k2"} {
		tok, ok := toks[i].(int64)
		if !ok || tok <= m.place || tok <= et {
			t.Fatalf("MLOCK's token of %s = %#v, want one above its place %d and early's token %d", k, toks[i], m.place, et)
		}
		if ok, err := callInt(n.addr, "UNLOCK", k, strconv.FormatInt(tok, 10)); err != nil || ok != 1 {
			t.Fatalf("UNLOCK %s of the MLOCK = %d, %v", k, ok, err)
		}
	}

	// A waiter whose client hangs up is taken out of both queues.
	holder, err = callInt(n.addr, "LOCK", "k2", "60000", "OWNER", "holder2")
	if err != nil {
		t.Fatalf("LOCK k2 again: %v", err)
	}
	_, gone := sendWait(t, n.addr, "MLOCK", "60000", "k1", "k2", "OWNER", "gone", "WAIT", "30000")
	waitQueue(t, n.addr, "k1", "gone")
	waitQueue(t, n.addr, "k2", "gone")
	gone.Close()
	waitQueue(t, n.addr, "k1")
	waitQueue(t, n.addr, "k2")
	if _, err := callInt(n.addr, "LOCK", "k1", "1000"); err != nil {
		t.Fatalf("LOCK k1 once nobody waits on it: %v", err)
	}
	if ok, err := callInt(n.addr, "UNLOCK", "k2", strconv.FormatInt(holder, 10)); err != nil || ok != 1 {
		t.Fatalf("UNLOCK k2 = %d, %v", ok, err)
	}
}
