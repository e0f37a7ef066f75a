package server

import (
	"strings"
	"testing"
)

// A script may call INFO, COMMAND and PUBSUB, as on Redis 7.0, on a real node: they run under
// the view lock the script holds, so INFO leaves out the sections the node would have to answer
// under that lock (raft, locks, keyspace, and lock_waiters), and nothing deadlocks. Outside a
// script INFO keeps them.
func TestScriptCallsIntrospection(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	r.do("SET", "k", "v")
	info := func(args ...string) string {
		t.Helper()
		return r.do(append([]string{"EVAL", "return redis.call('info', unpack(ARGV))", "0"}, args...)...)
	}
	for _, sections := range [][]string{nil, {"everything"}, {"raft"}, {"locks"}, {"keyspace"}, {"clients"}, {"server", "raft"}} {
		got := info(sections...)
		if !strings.HasPrefix(got, "$") {
			t.Errorf("INFO %q in a script = %.80q, want a bulk string", sections, got)
		}
		for _, absent := range []string{"# Raft", "# Locks", "# Keyspace", "lock_waiters:"} {
			if strings.Contains(got, absent) {
				t.Errorf("INFO %q in a script holds %q, which needs the view lock", sections, absent)
			}
		}
	}
	if got := info("server"); !strings.Contains(got, "# Server\r\nredis_version:") {
		t.Errorf("INFO server in a script = %.80q", got)
	}
	if got := info("clients"); !strings.Contains(got, "connected_clients:") {
		t.Errorf("INFO clients in a script = %q", got)
	}
	if got := r.do("INFO"); !strings.Contains(got, "# Raft") || !strings.Contains(got, "lock_waiters:") || !strings.Contains(got, "db0:keys=1") {
		t.Errorf("INFO outside a script lost its node sections: %.200q", got)
	}
	for _, s := range []struct {
		script string
		want   string
	}{
		{"return redis.call('pubsub', 'numpat')", ":0\r\n"},
		{"return redis.call('pubsub', 'numsub', 'ch')", "*2\r\n$2\r\nch\r\n:0\r\n"},
		{"return redis.call('command', 'count') > 100", ":1\r\n"},
		{"return redis.call('command', 'getkeys', 'mset', 'a', '1', 'b', '2')", "*2\r\n$1\r\na\r\n$1\r\nb\r\n"},
		{"return redis.call('readonly')", "+OK\r\n"},
		{"return redis.pcall('cluster', 'info')", "-ERR This Redis command is not allowed from script\r\n"},
		{"return redis.pcall('raft', 'members')", "-ERR This Redis command is not allowed from script\r\n"},
		{"return redis.pcall('flushall')", "-ERR This Redis command is not allowed from script\r\n"},
	} {
		if got := r.do("EVAL", s.script, "0"); got != s.want {
			t.Errorf("EVAL %q = %q, want %q", s.script, got, s.want)
		}
	}
	if got := r.do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Errorf("GET after the scripts = %q (FLUSHALL must have been refused)", got)
	}
}

// EVAL_RO caches the script it ran, as EVAL does (Redis 7.0): EVALSHA_RO finds it after.
func TestEvalROCachesItsScript(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	r.do("SET", "k", "v")
	const sha = "4e6d8fc8bb01276962cce5371fa795a7763657ae" // sha1 of the script below
	if got := r.do("EVAL_RO", "return redis.call('get', KEYS[1])", "1", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("EVAL_RO = %q", got)
	}
	if got := r.do("EVALSHA_RO", sha, "1", "k"); got != "$1\r\nv\r\n" {
		t.Errorf("EVALSHA_RO of the script EVAL_RO ran = %q, want v", got)
	}
}
