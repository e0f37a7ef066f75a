package tests

import (
	"fmt"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/resp"
)

// KEYS and a whole SCAN iteration list the same keys on redis-server and raftlock (as sets: the
// order is each server's), in the selected database, with MATCH, COUNT and TYPE; keys added and
// removed during a SCAN do not hide a key present throughout.
func TestRedisCompatKeysScan(t *testing.T) {
	rs := startRedis(t)
	n := startNode(t, t.TempDir())
	ctx := testContext(t, 30e9)
	for _, addr := range []string{rs.addr, n.addr} {
		c, err := resp.Dial(ctx, addr, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		do := func(args ...string) resp.Value {
			t.Helper()
			v, err := c.Do(ctx, args...)
			if err != nil {
				t.Fatalf("%s %q: %v", addr, args, err)
			}
			return v
		}
		do("SELECT", "4")
		for i := range 250 {
			do("SET", fmt.Sprintf("scan:%03d", i), "v")
		}
		do("SET", "other:x", "v")
		keys := func(args ...string) []string {
			var out []string
			for _, e := range do(args...).Elems {
				out = append(out, e.Text())
			}
			slices.Sort(out)
			return out
		}
		scanAll := func(opts ...string) []string {
			var out []string
			cursor := "0"
			for rounds := 0; ; rounds++ {
				if rounds > 1000 {
					t.Fatalf("%s: SCAN did not end", addr)
				}
				v := do(append([]string{"SCAN", cursor}, opts...)...)
				cursor = v.Elems[0].Text()
				for _, e := range v.Elems[1].Elems {
					out = append(out, e.Text())
				}
				if rounds == 2 {
					// Changes during the iteration: keys present throughout must still come.
					do("SET", "scan:new", "v")
					do("DEL", "scan:249")
				}
				if cursor == "0" {
					break
				}
			}
			slices.Sort(out)
			return slices.Compact(out)
		}
		allKeys := keys("KEYS", "*")
		if len(allKeys) != 251 {
			t.Errorf("%s: KEYS * = %d keys, want 251", addr, len(allKeys))
		}
		if got := keys("KEYS", "scan:1?[0-4]"); len(got) != 50 {
			t.Errorf("%s: KEYS scan:1?[0-4] = %d keys, want 50", addr, len(got))
		}
		got := scanAll("MATCH", "scan:*", "COUNT", "7")
		for i := range 249 { // scan:249 was deleted during the scan; scan:new may or may not come
			if k := fmt.Sprintf("scan:%03d", i); !slices.Contains(got, k) {
				t.Errorf("%s: SCAN missed %s, present throughout", addr, k)
			}
		}
		if slices.Contains(got, "other:x") {
			t.Errorf("%s: SCAN MATCH scan:* returned other:x", addr)
		}
		if got := scanAll("TYPE", "string", "COUNT", "1000"); len(got) < 250 {
			t.Errorf("%s: SCAN TYPE string = %d keys", addr, len(got))
		}
		do("SELECT", "0")
		if got := keys("KEYS", "scan:*"); len(got) != 0 {
			t.Errorf("%s: database 0 lists %d of database 4's keys", addr, len(got))
		}
	}
}

// `redis-cli -n 9 HINCRBY lock owner 1` through a follower, twice: redis-cli SELECTs database 9
// on each new connection, the follower forwards both to the leader, and the replies are 1 then
// 2 (a re-entrant lock's count). Every node then holds the hash in database 9 and none in 0.
func TestHIncrByInDatabase9ThroughFollower(t *testing.T) {
	c := newCluster(t, 3)
	f := c.followers()[0]
	for _, want := range []string{"1\n", "2\n"} {
		if got := redisCLI(t, f.addr, "", "-n", "9", "HINCRBY", "lock", "owner", "1"); got != want {
			t.Errorf("redis-cli -n 9 HINCRBY lock owner 1 through follower %s = %q, want %q", f.id, got, want)
		}
	}
	c.digests() // every node applied it
	for _, n := range c.live() {
		if got := redisCLI(t, n.addr, "READONLY\nHGET lock owner\nTYPE lock\n", "-n", "9"); got != "OK\n2\nhash\n" {
			t.Errorf("READONLY HGET and TYPE in database 9 on %s = %q, want OK, 2, hash", n.id, got)
		}
		if got := redisCLI(t, n.addr, "READONLY\nEXISTS lock\n"); got != "OK\n0\n" {
			t.Errorf("READONLY EXISTS lock in database 0 on %s = %q, want OK, 0", n.id, got)
		}
	}
}
