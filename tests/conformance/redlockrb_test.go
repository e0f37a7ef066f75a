package conformance

import (
	"testing"
)

// redlock-rb (github.com/leandromoreira/redlock-rb), read at 2.0.6 (f176e574):
//   - lib/redlock/scripts.rb: the lock script SETs the key PX ttl when it is absent and
//     allow_new_lock is "yes", or when it already holds the value (extend), and returns SET's OK;
//     otherwise it returns nothing (nil). The unlock script DELs the key holding the value (1)
//     or returns 0. The pttl script returns {GET, PTTL}.
//   - lib/redlock/client.rb: every call is EVALSHA of the script's precomputed SHA1, and on
//     NOSCRIPT all three are SCRIPT LOADed and the call made once more (recover_from_script_flush);
//     the value is a SecureRandom.uuid; a server counts as locked when the reply is truthy (OK),
//     and with one logical endpoint (DESIGN.md §7: quorum 1) that decides; extend passes the
//     held value, with allow_new_lock "no" under extend_only_if_locked; a failed lock unlocks
//     every server; get_remaining_ttl_for_lock wants the value to match.
//
// The scripts are ours, equivalent to the library's.

// redlockRbLock: KEYS[1] the resource; ARGV[1] value, ARGV[2] ttl ms, ARGV[3] allow_new_lock.
const redlockRbLock = `
local current = redis.call('get', KEYS[1])
local mayCreate = current == false and ARGV[3] == 'yes'
if mayCreate or current == ARGV[1] then
  return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
end`

// redlockRbUnlock: KEYS[1] the resource; ARGV[1] value.
const redlockRbUnlock = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('del', KEYS[1])`

// redlockRbPTTL: KEYS[1] the resource.
const redlockRbPTTL = `return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}`

// TestRedlockRb: lock (after NOSCRIPT and SCRIPT LOAD), a contender refused and its
// best-effort unlock harmless, remaining ttl, extend and extend_only_if_locked, unlock.
func TestRedlockRb(t *testing.T) {
	onBoth(t, testRedlockRb)
}

func testRedlockRb(t *testing.T, s server) {
	const (
		resource = "redlock-rb:payments"
		valueA   = "3f8e1c9a-5b27-4d60-a1e4-7c2b9d0f6e35"
		valueB   = "c4a7e2d1-0f93-4b58-8e6c-1d5a3b7f9e20"
	)
	a, b := dial(t, s.addr), dial(t, s.addr)
	lock := script{sha: sha1hex(redlockRbLock)}
	if got := a.evalsha(lock, []string{resource}, valueA, "10000", "yes"); !isErr(got, "NOSCRIPT") {
		t.Fatalf("EVALSHA of the lock script: got %s, want NOSCRIPT", show(got))
	}
	unlock, lock, pttl := a.load(redlockRbUnlock), a.load(redlockRbLock), a.load(redlockRbPTTL)

	a.want("OK", append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueA, "10000", "yes")...)...)
	a.pttlIn(resource, 9000, 10000)
	if s.raftlock {
		a.lockToken(resource)
	}
	// A contender: nil, so not locked; it then unlocks every server, which must not free a's.
	b.want(nil, append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueB, "10000", "yes")...)...)
	b.want(int64(0), append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{resource}, valueB)...)...)
	b.want(valueA, "GET", resource)

	// get_remaining_ttl_for_lock: {value, pttl}.
	got, _ := b.evalsha(pttl, []string{resource}).([]any)
	if len(got) != 2 || got[0] != valueA {
		t.Fatalf("pttl script: got %s, want [%q, pttl]", show(got), valueA)
	}
	if ms, _ := got[1].(int64); ms <= 0 || ms > 10000 {
		t.Fatalf("pttl script: pttl %d", ms)
	}

	// extend (the held value), with and without extend_only_if_locked.
	a.want("OK", append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueA, "20000", "no")...)...)
	a.pttlIn(resource, 19000, 20000)
	a.want("OK", append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueA, "30000", "yes")...)...)
	a.pttlIn(resource, 29000, 30000)

	// unlock; then the pttl script sees nothing, and extend_only_if_locked does not create it.
	a.want(int64(1), append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{resource}, valueA)...)...)
	a.want([]any{nil, int64(-2)}, append([]string{"EVALSHA", pttl.sha}, evalArgs([]string{resource})...)...)
	a.want(nil, append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueA, "10000", "no")...)...)
	a.want(int64(0), "EXISTS", resource)
	// The contender gets it now.
	b.want("OK", append([]string{"EVALSHA", lock.sha}, evalArgs([]string{resource}, valueB, "10000", "yes")...)...)
}
