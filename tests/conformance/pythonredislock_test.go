package conformance

import (
	"testing"
)

// python-redis-lock (github.com/ionelmc/python-redis-lock), src/redis_lock/__init__.py read at
// v4.0.1-5 (e448f12f):
//   - keys "lock:<name>" (value the lock's id) and the signal list "lock-signal:<name>";
//   - acquire: SET lock:<name> <id> NX EX <expire>; when busy and blocking, BLPOP the signal
//     list for timeout (or expire) seconds, then SET NX again;
//   - extend: a script, 1 not the holder, 2 no expiry, 0 EXPIREd to the new seconds;
//   - release: a script, 1 not the holder (NotAcquired), else DEL the signal list, LPUSH 1 to
//     it, PEXPIRE it signal_expire ms (1000), DEL the lock, 0;
//   - reset_all: a script that, for every KEYS lock:*, signals lock-signal:<name> the same way
//     (EXPIRE 1 s) and DELs the lock, returning how many;
//   - scripts go through redis-py's register_script: EVALSHA, and on NOSCRIPT SCRIPT LOAD and
//     EVALSHA again.
//
// The scripts are ours, equivalent to the library's.

// pyrlUnlock: KEYS[1] the lock, KEYS[2] the signal; ARGV[1] the id, ARGV[2] signal expiry ms.
const pyrlUnlock = `
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[2])
  redis.call('lpush', KEYS[2], 1)
  redis.call('pexpire', KEYS[2], ARGV[2])
  redis.call('del', KEYS[1])
  return 0
end
return 1`

// pyrlExtend: KEYS[1] the lock; ARGV[1] the id, ARGV[2] the new expiry in seconds.
const pyrlExtend = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 1
end
if redis.call('ttl', KEYS[1]) < 0 then
  return 2
end
redis.call('expire', KEYS[1], ARGV[2])
return 0`

// pyrlResetAll: no keys, no arguments.
const pyrlResetAll = `
local found = redis.call('keys', 'lock:*')
for i = 1, #found do
  local signal = 'lock-signal:' .. found[i]:sub(#'lock:' + 1)
  redis.call('del', signal)
  redis.call('lpush', signal, 1)
  redis.call('expire', signal, 1)
  redis.call('del', found[i])
end
return #found`

// TestPythonRedisLock: acquire, a blocked waiter woken by BLPOP on the signal list at release
// and acquiring, extend (held, not held, no expiry), release by a stranger refused, reset_all.
func TestPythonRedisLock(t *testing.T) {
	onBoth(t, testPythonRedisLock)
}

func testPythonRedisLock(t *testing.T, s server) {
	const (
		name   = "lock:pyrl-job"
		signal = "lock-signal:pyrl-job"
		idA    = "aGVsbG8td29ybGQtaWQtYQ=="
		idB    = "aGVsbG8td29ybGQtaWQtYg=="
	)
	a, b := dial(t, s.addr), dial(t, s.addr)

	// acquire(expire=60).
	a.want("OK", "SET", name, idA, "NX", "EX", "60")
	if s.raftlock {
		a.lockToken(name)
	}
	// register_script: EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA.
	unlock := script{sha: sha1hex(pyrlUnlock)}
	if got := a.evalsha(unlock, []string{name, signal}, idA, "1000"); !isErr(got, "NOSCRIPT") {
		t.Fatalf("EVALSHA of the unlock script: got %s, want NOSCRIPT", show(got))
	}
	unlock, extend := a.load(pyrlUnlock), a.load(pyrlExtend)

	// extend(30) by the holder; by a stranger: 1 (NotAcquired).
	a.want(int64(0), append([]string{"EVALSHA", extend.sha}, evalArgs([]string{name, signal}, idA, "30")...)...)
	a.pttlIn(name, 29000, 30000)
	b.want(int64(1), append([]string{"EVALSHA", extend.sha}, evalArgs([]string{name, signal}, idB, "30")...)...)

	// Another client, blocking: SET NX fails, so it BLPOPs the signal list (60 s, expire).
	b.want(nil, "SET", name, idB, "NX", "EX", "60")
	b.Send("BLPOP", signal, "60")
	if err := b.Flush(b.ctx); err != nil {
		t.Fatal(err)
	}
	// A stranger's release: 1 and no signal.
	dial(t, s.addr).want(int64(1), append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{name, signal}, idB, "1000")...)...)
	// The holder's release signals the waiter, which acquires.
	a.want(int64(0), append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{name, signal}, idA, "1000")...)...)
	if got, ok := b.receive(waitBound); !ok || !equal(got, []any{signal, "1"}) {
		t.Fatalf("BLPOP of the waiter: got %s (received %v), want [%s, 1]", show(got), ok, signal)
	}
	b.want("OK", "SET", name, idB, "NX", "EX", "60")
	// Its element taken, the signal list is gone.
	a.want(int64(0), "EXISTS", signal)

	// A lock without expiry: extend answers 2 (NotExpirable).
	a.want("OK", "SET", "lock:pyrl-forever", idA, "NX")
	a.want(int64(2), append([]string{"EVALSHA", extend.sha}, evalArgs([]string{"lock:pyrl-forever", "lock-signal:pyrl-forever"}, idA, "30")...)...)

	// release by the holder leaves a signal that expires after signal_expire.
	b.want(int64(0), append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{name, signal}, idB, "1000")...)...)
	a.want([]any{"1"}, "LRANGE", signal, "0", "-1")
	a.pttlIn(signal, 0, 1000)

	// reset_all: both remaining locks go (lock:pyrl-forever and a fresh one), each signalled.
	a.want("OK", "SET", name, idA, "NX", "EX", "60")
	a.want(int64(2), "EVAL", pyrlResetAll, "0")
	a.want(int64(0), "EXISTS", name, "lock:pyrl-forever")
	a.want([]any{"1"}, "LRANGE", "lock-signal:pyrl-forever", "0", "-1")
	a.pttlIn("lock-signal:pyrl-forever", 0, 1000)
}
