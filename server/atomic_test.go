package server

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
)

// TestMultiKeyEntriesAreAtomic: a DEL of several keys and a script's effects apply as one entry.
// When a key changes between the evaluation and the apply (interfereNext, standing in for a
// leader change), nothing of the request applies and the client is told so.
func TestMultiKeyEntriesAreAtomic(t *testing.T) {
	addr, f := startFake(t)
	r := dialRaw(t, addr)
	set := func(k, v string) {
		t.Helper()
		if got := r.do("SET", k, v); got != "+OK\r\n" {
			t.Fatalf("SET %s: %q", k, got)
		}
	}
	tokenOf := func(k string) fsm.Token {
		t.Helper()
		f.mu.Lock()
		defer f.mu.Unlock()
		l, ok := f.mu.table.Get(fsm.DBKey(0, []byte(k)))
		if !ok {
			t.Fatalf("%s not held", k)
		}
		return l.Token
	}
	release := func(k string) fsm.Command {
		return fsm.Command{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte(k)), Match: fsm.Match{Kind: fsm.MatchToken, Token: tokenOf(k)}}
	}
	steps := []struct {
		name      string
		interfere func() []fsm.Command // nil: none
		args      []string
		want      string
		after     map[string]string // key -> GET reply afterwards
	}{
		{"DEL of two keys", nil, []string{"DEL", "k1", "k2", "absent"}, ":2\r\n",
			map[string]string{"k1": "$-1\r\n", "k2": "$-1\r\n"}},
		{"DEL whose second key went meanwhile", func() []fsm.Command { return []fsm.Command{release("k2")} },
			[]string{"DEL", "k1", "k2"}, "-" + errAborted + "\r\n",
			map[string]string{"k1": "$2\r\nv1\r\n", "k2": "$-1\r\n"}},
		{"DEL of one key that went meanwhile", func() []fsm.Command { return []fsm.Command{release("k1")} },
			[]string{"DEL", "k1"}, ":0\r\n", map[string]string{"k1": "$-1\r\n"}},
		{"script whose second effect's key changed meanwhile", func() []fsm.Command {
			return []fsm.Command{locks.Grant(fsm.DBKey(0, []byte("k2")), []byte("other"), 0, fsm.Match{Kind: fsm.MatchAny})}
		}, []string{"EVAL", `redis.call('del', KEYS[1]); redis.call('set', KEYS[2], 'mine'); return 1`, "2", "k1", "k2"},
			"-" + errScriptAborted + "\r\n",
			map[string]string{"k1": "$2\r\nv1\r\n", "k2": "$5\r\nother\r\n"}},
		{"script that sets a key and deletes it", nil,
			[]string{"EVAL", `redis.call('set', KEYS[1], 'x'); redis.call('set', KEYS[2], 'y'); redis.call('del', KEYS[1]); return redis.call('exists', KEYS[1])`, "2", "k3", "k4"},
			":0\r\n", map[string]string{"k3": "$-1\r\n", "k4": "$1\r\ny\r\n"}},
	}
	for _, s := range steps {
		set("k1", "v1")
		set("k2", "v2")
		if s.interfere != nil {
			f.interfereNext(s.interfere()...)
		}
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%s: %.40q = %q, want %q", s.name, s.args, got, s.want)
		}
		for k, want := range s.after {
			if got := r.do("GET", k); got != want {
				t.Errorf("%s: GET %s afterwards = %q, want %q", s.name, k, got, want)
			}
		}
	}
}

// EXEC's commands apply as one entry too: when a key changes between EXEC's evaluation and its
// apply, none of the queued writes applies and the client is told to run it again.
func TestTransactionIsAtomic(t *testing.T) {
	addr, f := startFake(t)
	r := dialRaw(t, addr)
	for _, c := range [][]string{{"SET", "t1", "v1"}, {"SET", "t2", "v2"}, {"MULTI"}, {"DEL", "t1"}, {"SET", "t2", "mine", "XX"}} {
		r.do(c...)
	}
	f.mu.Lock()
	l, _ := f.mu.table.Get(fsm.DBKey(0, []byte("t2")))
	f.mu.Unlock()
	f.interfereNext(fsm.Command{Kind: fsm.KindRelease, Key: fsm.DBKey(0, []byte("t2")), Match: fsm.Match{Kind: fsm.MatchToken, Token: l.Token}})
	if got := r.do("EXEC"); !strings.HasPrefix(got, "-ERR the transaction's commands did not apply as they were evaluated") {
		t.Errorf("EXEC whose key changed meanwhile = %q", got)
	}
	if got := r.do("GET", "t1"); got != "$2\r\nv1\r\n" {
		t.Errorf("t1 after the aborted EXEC = %q, want v1 (not deleted)", got)
	}
	// Without interference the same transaction applies whole.
	r.do("SET", "t2", "v2")
	r.do("MULTI")
	r.do("DEL", "t1")
	r.do("SET", "t2", "mine", "XX")
	if got := r.do("EXEC"); got != "*2\r\n:1\r\n+OK\r\n" {
		t.Errorf("EXEC = %q", got)
	}
}

// A lock set by the same transaction or script has only a predicted token: LOCKINFO and
// VALIDATE on it are refused rather than hand out a number no grant will get.
func TestPredictedTokenIsNotShown(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	r.do("MULTI")
	r.do("SET", "pk", "me", "NX", "PX", "10000")
	r.do("LOCKINFO", "pk")
	got := r.do("EXEC")
	if !strings.HasPrefix(got, "*2\r\n+OK\r\n-ERR this lock is set by the same script or transaction") {
		t.Errorf("EXEC with LOCKINFO of its own lock = %q", got)
	}
	got = r.do("EVAL", "redis.call('set', KEYS[1], 'me', 'NX'); return redis.pcall('validate', KEYS[1], 1)", "1", "pk2")
	if !strings.HasPrefix(got, "-ERR this lock is set by the same script") {
		t.Errorf("VALIDATE of the script's own lock = %q", got)
	}
	if got := r.do("LOCKINFO", "pk"); !strings.Contains(got, "token") {
		t.Errorf("LOCKINFO after the EXEC = %q, want the real token", got)
	}
}
