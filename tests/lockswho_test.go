package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// pairs reads a RESP2 flat map (k1 v1 k2 v2 ...) into a map.
func pairs(v any) (map[string]any, error) {
	a, ok := v.([]any)
	if !ok || len(a)%2 != 0 {
		return nil, fmt.Errorf("%#v is not a flat map", v)
	}
	m := map[string]any{}
	for i := 0; i < len(a); i += 2 {
		k, ok := a[i].(string)
		if !ok {
			return nil, fmt.Errorf("field %#v", a[i])
		}
		m[k] = a[i+1]
	}
	return m, nil
}

// entryOf finds, in a LOCKS or LOCKWAITERS list read on addr, the entry whose field is value.
func entryOf(list any, field, value string) (map[string]any, error) {
	a, ok := list.([]any)
	if !ok {
		return nil, fmt.Errorf("%#v is not a list", list)
	}
	for _, e := range a {
		m, err := pairs(e)
		if err != nil {
			return nil, err
		}
		if m[field] == value {
			return m, nil
		}
	}
	return nil, fmt.Errorf("no entry with %s %s in %v", field, value, list)
}

// On three nodes, LOCKS names the node each holder's client is on, read on any node: a lock
// taken through a follower names that follower, one taken on the leader the leader; a waiter
// queued through a follower is named after it in LOCKWAITERS.
func TestClusterLocksNameTheClientsNode(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	fs := c.followers()
	before := time.Now().UnixMilli()
	if _, err := callInt(fs[0].addr, "LOCK", "via-follower", "60000", "OWNER", "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := callInt(l.addr, "LOCK", "via-leader", "60000", "OWNER", "bob"); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()
	for _, n := range c.nodes {
		testutil.WaitFor(t, 5*time.Second, func() error {
			page, err := call(n.addr, "LOCKS", "COUNT", "100")
			if err != nil {
				return err
			}
			list := page.([]any)[1]
			for owner, want := range map[string]string{"alice": fs[0].id, "bob": l.id} {
				e, err := entryOf(list, "owner", owner)
				if err != nil {
					return err
				}
				since, _ := e["since"].(int64)
				if e["node"] != want || since < before || since > after {
					return fmt.Errorf("LOCKS on %s: %s's lock since %v on %v, want a time in [%d, %d] on %s", n.id, owner, e["since"], e["node"], before, after, want)
				}
			}
			return nil
		})
	}

	w, err := dialRESP(fs[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.writeRaw([]byte("*7\r\n$4\r\nLOCK\r\n$12\r\nvia-follower\r\n$5\r\n60000\r\n$5\r\nOWNER\r\n$4\r\nwalt\r\n$4\r\nWAIT\r\n$5\r\n20000\r\n")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		list, err := call(l.addr, "LOCKWAITERS", "via-follower")
		if err != nil {
			return err
		}
		e, err := entryOf(list, "owner", "walt")
		if err == nil && e["node"] != fs[1].id {
			err = fmt.Errorf("the waiter is named after %v, want %s", e["node"], fs[1].id)
		}
		return err
	})
}
