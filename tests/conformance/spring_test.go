package conformance

import (
	"strings"
	"testing"

	"github.com/raftlock/raftlock/tests/testutil"
)

// Spring Integration's RedisLockRegistry (github.com/spring-projects/spring-integration), file
// spring-integration-redis/src/main/java/org/springframework/integration/redis/util/
// RedisLockRegistry.java, read at v6.5.10 (5624e08f) and at v7.2.0-M1-3 (f369e899), with
// spring-data-redis 4.2.0-M1-1 (a1bd5674) for how its scripts and CAS/CAD calls go out:
//   - the key is "<registryKey>:<path>", the value the registry's clientId (a UUID);
//   - obtain (both versions): a script that PEXPIREs the key when it holds the clientId, SETs it
//     PX expireAfter when absent, and returns true (1) or false (nil); spin mode retries it every
//     idleBetweenTries (100 ms);
//   - renew: 6.x a script (GET equals clientId -> PEXPIRE); 7.x first tries Redis 8.4's
//     SET key clientId IFEQ clientId PX ms and falls back to the 6.x script for good when the
//     reply contains "ERR syntax error" or "ERR unknown command" (isCasCadNotSupportedError);
//   - unlock, spin mode: 6.x a script (GET equals clientId -> UNLINK, or DEL once UNLINK has
//     failed); 7.x first DELEX key IFEQ clientId, with the same fallback; false (the key
//     expired meanwhile) is thrown as ConcurrentModificationException;
//   - pub/sub mode: the registry PSUBSCRIBEs "<registryKey>-channel:*"; unlock is a script that
//     UNLINKs the key it holds and PUBLISHes the lock key to "<registryKey>-channel:<lock key>";
//     a waiter that failed to obtain waits for that message and tries again;
//   - spring-data-redis DefaultScriptExecutor sends EVALSHA and, on NOSCRIPT, EVAL.
//
// The scripts are ours, equivalent to the registry's.

// springObtain: KEYS[1] the lock key; ARGV[1] clientId, ARGV[2] expireAfter ms.
const springObtain = `
local holder = redis.call('GET', KEYS[1])
if holder == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return true
end
if holder ~= ARGV[1] then
  return false
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return true`

// springRenew: KEYS[1] the lock key; ARGV[1] clientId, ARGV[2] expireAfter ms.
const springRenew = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return true`

// springUnlockSpin is the spin lock's unlock; the 6.x registry has a DEL twin for servers
// without UNLINK. KEYS[1] the lock key; ARGV[1] clientId.
const springUnlockSpin = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
redis.call('UNLINK', KEYS[1])
return true`

const springUnlockSpinDel = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return false
end
redis.call('DEL', KEYS[1])
return true`

// springUnlockPubSub: KEYS[1] the lock key; ARGV[1] clientId, ARGV[2] the unlock channel.
const springUnlockPubSub = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] or redis.call('UNLINK', KEYS[1]) ~= 1 then
  return false
end
redis.call('PUBLISH', ARGV[2], KEYS[1])
return true`

// TestSpringRedisLockRegistry: obtain through EVALSHA then EVAL after NOSCRIPT, re-obtain,
// a second registry refused and spinning until the release, renew, 7.x's CAS/CAD probes and
// their fallback, unlock finding its lease expired, and pub/sub mode's unlock message waking a
// pattern-subscribed waiter.
func TestSpringRedisLockRegistry(t *testing.T) {
	onBoth(t, testSpringRedisLockRegistry)
}

func testSpringRedisLockRegistry(t *testing.T, s server) {
	const (
		key      = "spring-locks:orders" // registryKey "spring-locks", path "orders"
		clientA  = "6f1d3c2e-7a54-4b8e-9c01-3e2f5a6b7c8d"
		clientB  = "0b9e8d7c-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
		expireMs = "60000"
	)
	a, b := dial(t, s.addr), dial(t, s.addr)

	// obtain: EVALSHA answers NOSCRIPT on a fresh server, then EVAL.
	if got := a.do(append([]string{"EVALSHA", sha1hex(springObtain)}, evalArgs([]string{key}, clientA, expireMs)...)...); !isErr(got, "NOSCRIPT") {
		t.Fatalf("EVALSHA of the obtain script: got %s, want NOSCRIPT", show(got))
	}
	a.want(int64(1), append([]string{"EVAL", springObtain}, evalArgs([]string{key}, clientA, expireMs)...)...)
	// Now the script is cached: EVALSHA works.
	obtain := script{src: springObtain, sha: sha1hex(springObtain)}
	a.want(int64(1), append([]string{"EVALSHA", obtain.sha}, evalArgs([]string{key}, clientA, expireMs)...)...)
	a.want(clientA, "GET", key)
	a.pttlIn(key, 50000, 60000)
	if s.raftlock {
		a.lockToken(key)
	}

	// Another registry is refused (false is a nil reply) and spins every 100 ms.
	b.want(nil, append([]string{"EVAL", springObtain}, evalArgs([]string{key}, clientB, expireMs)...)...)

	// renew, 7.x: SET IFEQ first. Redis before 8.4 refuses it with a text the registry takes
	// as "not supported" and falls back to the script; a server that supports it renews.
	got := a.do("SET", key, clientA, "IFEQ", clientA, "PX", expireMs)
	t.Logf("SET IFEQ: %s", show(got))
	switch {
	case got == "OK":
	case casCadUnsupported(got):
		a.want(int64(1), append([]string{"EVAL", springRenew}, evalArgs([]string{key}, clientA, expireMs)...)...)
	default:
		t.Fatalf("SET IFEQ (7.x renew): got %s, want OK or an error the registry falls back on", show(got))
	}
	a.want(clientA, "GET", key)
	b.want(nil, append([]string{"EVAL", springRenew}, evalArgs([]string{key}, clientB, expireMs)...)...)

	// unlock, spin mode, 7.x: DELEX first, the script after the same fallback.
	b.want(nil, append([]string{"EVAL", springUnlockSpin}, evalArgs([]string{key}, clientB)...)...)
	got = a.do("DELEX", key, "IFEQ", clientA)
	t.Logf("DELEX IFEQ: %s", show(got))
	switch {
	case got == int64(1):
	case casCadUnsupported(got):
		a.want(int64(1), append([]string{"EVAL", springUnlockSpin}, evalArgs([]string{key}, clientA)...)...)
	default:
		t.Fatalf("DELEX IFEQ (7.x unlock): got %s, want 1 or an error the registry falls back on", show(got))
	}
	a.want(int64(0), "EXISTS", key)

	// The spinning registry gets it on its next try.
	testutil.WaitFor(t, waitBound, func() error {
		if got := b.do(append([]string{"EVAL", springObtain}, evalArgs([]string{key}, clientB, expireMs)...)...); got != int64(1) {
			return errorf("obtain by the spinning registry: %s", show(got))
		}
		return nil
	})
	// 6.x unlock (DEL form): done.
	b.want(int64(1), append([]string{"EVAL", springUnlockSpinDel}, evalArgs([]string{key}, clientB)...)...)

	// A lease that ran out before unlock: the script answers false (nil), which the registry
	// throws as ConcurrentModificationException.
	a.want(int64(1), append([]string{"EVAL", springObtain}, evalArgs([]string{key}, clientA, "150")...)...)
	testutil.WaitFor(t, waitBound, func() error {
		if got := a.do("PTTL", key); got != int64(-2) {
			return errorf("PTTL of an expiring lock: %s", show(got))
		}
		return nil
	})
	a.want(nil, append([]string{"EVAL", springUnlockSpin}, evalArgs([]string{key}, clientA)...)...)

	// pub/sub mode.
	const (
		psKey   = "spring-locks:invoices"
		pattern = "spring-locks-channel:*"
		channel = "spring-locks-channel:spring-locks:invoices"
	)
	listener := dial(t, s.addr)
	listener.want([]any{"psubscribe", pattern, int64(1)}, "PSUBSCRIBE", pattern)
	a.want(int64(1), append([]string{"EVAL", springObtain}, evalArgs([]string{psKey}, clientA, expireMs)...)...)
	b.want(nil, append([]string{"EVAL", springObtain}, evalArgs([]string{psKey}, clientB, expireMs)...)...)
	b.want(nil, append([]string{"EVAL", springUnlockPubSub}, evalArgs([]string{psKey}, clientB, channel)...)...)
	a.want(int64(1), append([]string{"EVAL", springUnlockPubSub}, evalArgs([]string{psKey}, clientA, channel)...)...)
	v, ok := listener.receive(waitBound)
	if want := []any{"pmessage", pattern, channel, psKey}; !ok || !equal(v, want) {
		t.Fatalf("pattern subscriber after unlock: got %s (received %v), want %s", show(v), ok, show(want))
	}
	b.want(int64(1), append([]string{"EVAL", springObtain}, evalArgs([]string{psKey}, clientB, expireMs)...)...)
	b.want(clientB, "GET", psKey)
}

// casCadUnsupported is isCasCadNotSupportedError: the error texts after which Spring
// Integration 7 stops sending SET IFEQ and DELEX and uses its scripts.
func casCadUnsupported(reply any) bool {
	err, ok := reply.(error)
	return ok && (strings.Contains(err.Error(), "ERR syntax error") || strings.Contains(err.Error(), "ERR unknown command"))
}
