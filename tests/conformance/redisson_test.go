package conformance

import (
	"testing"
)

// Redisson (github.com/redisson/redisson), read at redisson-4.7.0-62-g66863978
// (66863978b4a92093b97c1f8c96f182a77e81d50e):
//   - redisson/src/main/java/org/redisson/RedissonLock.java: tryLockInnerAsync (the hash
//     acquire script, nil when acquired, else the holder's pttl), unlockInnerAsync (the unlock
//     script: an unlock latch key makes a retried unlock idempotent; counter down, or DEL and
//     publish UNLOCK_MESSAGE), forceUnlockAsync (DEL and publish);
//   - RedissonBaseLock.java: the hash field is "<connection manager id>:<thread id>", the
//     latch key "redisson_unlock_latch:{name}:<request id>", DELeted after the unlock;
//     isHeldByThread is HEXISTS, getHoldCount HGET, isLocked EXISTS;
//   - RedissonObject.prefixName: the channel is "redisson_lock__channel:{name}";
//   - pubsub/LockPubSub.java: UNLOCK_MESSAGE is 0, sent as the text "0";
//   - renewal/LockTask.java: the watchdog renews a chunk of locks in one script, one 1 or 0 per
//     key (HEXISTS field, then PEXPIRE the default 30 s lease);
//   - command/CommandAsyncService.evalAsync: with useScriptCache (the default) a script goes as
//     EVALSHA, and on NOSCRIPT it is SCRIPT LOADed and sent again;
//   - RedissonFencedLock.java: the acquire script also INCRs "redisson_lock_token:{name}" and
//     returns {-1, token}, or {pttl, -1} when held.
//
// The scripts below are ours, written to do what Redisson's do with the same keys, arguments and
// replies.

// redissonAcquire: KEYS[1] the lock hash; ARGV[1] lease ms, ARGV[2] the holder's field.
const redissonAcquire = `
local free = redis.call('exists', KEYS[1]) == 0
if free or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`

// redissonRelease: KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the unlock latch; ARGV[1] the
// message, ARGV[2] the lease ms, ARGV[3] the field, ARGV[4] the publish command, ARGV[5] the
// latch's life in ms. 1 released, 0 still held (re-entered), nil not the holder.
const redissonRelease = `
local earlier = redis.call('get', KEYS[3])
if earlier ~= false then
  return tonumber(earlier)
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[3], -1)
local outcome = 0
if left > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
else
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  outcome = 1
end
redis.call('set', KEYS[3], outcome, 'px', ARGV[5])
return outcome`

// redissonRenew: the watchdog's chunk. KEYS the lock hashes; ARGV[1] lease ms, ARGV[i+1] the
// field of KEYS[i].
const redissonRenew = `
local renewed = {}
for i = 1, #KEYS do
  local mine = redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1
  if mine then
    redis.call('pexpire', KEYS[i], ARGV[1])
  end
  renewed[#renewed + 1] = mine and 1 or 0
end
return renewed`

// redissonForce: KEYS[1] the hash, KEYS[2] the channel; ARGV[1] the message, ARGV[2] the publish
// command.
const redissonForce = `
if redis.call('del', KEYS[1]) ~= 1 then
  return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1`

// redissonFencedAcquire: KEYS[1] the hash, KEYS[2] the token counter; ARGV as redissonAcquire.
const redissonFencedAcquire = `
if redis.call('exists', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return {redis.call('pttl', KEYS[1]), -1}
end
local token = redis.call('incr', KEYS[2])
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return {-1, token}`

// TestRedissonRLock: tryLock with a lease and re-entry by the same thread, a contender told
// the pttl, the watchdog's renewal, unlock (once per entry) publishing to the lock's channel, a
// waiter subscribed there woken and acquiring, a retried unlock answered from its latch, a
// stranger's unlock refused, forceUnlock; then RFencedLock's token.
func TestRedissonRLock(t *testing.T) {
	onAllWithGroups(t, testRedissonRLock)
}

func testRedissonRLock(t *testing.T, s server) {
	const (
		name    = "redisson-rlock"
		channel = "redisson_lock__channel:{redisson-rlock}"
		mine    = "8d2a8f5e-0c1b-4f39-9a3e-6f0e8b1d2c47:1" // <manager id>:<thread id>
		theirs  = "51c7e0aa-93f2-4b6d-8e15-2d4c9b7a0f63:57"
		lease   = "30000" // the watchdog's default lease
		latchMs = "13000" // (timeout + retry delay) * retry attempts, as unlockInnerAsync computes
	)
	a, b, sub := dial(t, s.addr), dial(t, s.addr), dial(t, s.addr)

	// The first EVALSHA of a script the server has not seen: NOSCRIPT, then SCRIPT LOAD.
	acquire := script{sha: sha1hex(redissonAcquire)}
	if got := a.evalsha(acquire, []string{name}, "10000", mine); !isErr(got, "NOSCRIPT ") {
		t.Fatalf("EVALSHA before SCRIPT LOAD: got %s, want a NOSCRIPT error", show(got))
	}
	if got := a.load(redissonAcquire); got.sha != acquire.sha {
		t.Fatalf("SCRIPT LOAD: sha %s, want %s", got.sha, acquire.sha)
	}
	release, renew, force := a.load(redissonRelease), a.load(redissonRenew), a.load(redissonForce)

	// tryLock(wait, 10 s lease): nil means acquired; the same thread again counts 2.
	if got := a.evalsha(acquire, []string{name}, "10000", mine); got != nil {
		t.Fatalf("tryLock: got %s, want nil (acquired)", show(got))
	}
	a.pttlIn(name, 9000, 10000)
	if got := a.evalsha(acquire, []string{name}, lease, mine); got != nil {
		t.Fatalf("tryLock again by the holder: got %s, want nil (re-entered)", show(got))
	}
	a.want("2", "HGET", name, mine) // getHoldCount
	a.want(int64(1), "HEXISTS", name, mine)
	a.want(int64(0), "HEXISTS", name, theirs)
	a.want(int64(1), "EXISTS", name) // isLocked
	a.pttlIn(name, 20000, 30000)
	var firstToken int64
	if s.raftlock {
		firstToken = a.lockToken(name)
	}

	// Another thread: the reply is the holder's pttl, so it subscribes and waits for a release.
	if ttl, ok := b.evalsha(acquire, []string{name}, lease, theirs).(int64); !ok || ttl <= 0 || ttl > 30000 {
		t.Fatalf("tryLock by another thread: got %v, want the pttl", ttl)
	}
	sub.subscribe(channel)

	// The watchdog: renewed where this process holds the field, not elsewhere.
	if s.slotted {
		// A cluster setup renews each slot's locks in a script of their own
		// (RenewalTask.renewSlots): the two locks are in different slots.
		a.want([]any{int64(1)}, "EVALSHA", renew.sha, "1", name, lease, mine)
		a.want([]any{int64(0)}, "EVALSHA", renew.sha, "1", "redisson-rlock-other", lease, mine)
	} else {
		a.want([]any{int64(1), int64(0)}, "EVALSHA", renew.sha, "2", name, "redisson-rlock-other", lease, mine, mine)
	}
	a.pttlIn(name, 25000, 30000)

	// unlock, once per entry. The first leaves it held (0) and publishes nothing.
	a.want(int64(0), append([]string{"EVALSHA", release.sha}, evalArgs(
		[]string{name, channel, "redisson_unlock_latch:{redisson-rlock}:req-1"},
		"0", lease, mine, "PUBLISH", latchMs)...)...)
	a.want(int64(1), "DEL", "redisson_unlock_latch:{redisson-rlock}:req-1")
	a.want("1", "HGET", name, mine)
	// A stranger's unlock: nil, which Redisson throws as IllegalMonitorStateException.
	b.want(nil, append([]string{"EVALSHA", release.sha}, evalArgs(
		[]string{name, channel, "redisson_unlock_latch:{redisson-rlock}:req-2"},
		"0", lease, theirs, "PUBLISH", latchMs)...)...)
	// The last unlock releases it and publishes "0"; a retry of that same request (the reply was
	// lost) is answered from the latch, not refused.
	lastUnlock := append([]string{"EVALSHA", release.sha}, evalArgs(
		[]string{name, channel, "redisson_unlock_latch:{redisson-rlock}:req-3"},
		"0", lease, mine, "PUBLISH", latchMs)...)
	a.want(int64(1), lastUnlock...)
	a.want(int64(1), lastUnlock...)
	a.want(int64(0), "EXISTS", name)
	a.want(int64(1), "DEL", "redisson_unlock_latch:{redisson-rlock}:req-3")

	// The waiter is woken by the release message and acquires.
	ch, msg, ok := sub.message(waitBound)
	if !ok || ch != channel || msg != "0" {
		t.Fatalf("waiter: got message %q on %q (received %v), want \"0\" on %q", msg, ch, ok, channel)
	}
	if got := b.evalsha(acquire, []string{name}, lease, theirs); got != nil {
		t.Fatalf("tryLock by the woken waiter: got %s, want nil", show(got))
	}
	b.want("1", "HGET", name, theirs)
	if s.raftlock {
		if tok := b.lockToken(name); tok <= firstToken {
			t.Errorf("LOCKINFO token of the next holder: %d, want more than %d", tok, firstToken)
		}
	}

	// forceUnlock: 1 and a message when there was a lock, 0 when there was none.
	a.want(int64(1), "EVALSHA", force.sha, "2", name, channel, "0", "PUBLISH")
	if ch, msg, ok := sub.message(waitBound); !ok || ch != channel || msg != "0" {
		t.Fatalf("after forceUnlock: got message %q on %q (received %v), want \"0\"", msg, ch, ok)
	}
	a.want(int64(0), "EVALSHA", force.sha, "2", name, channel, "0", "PUBLISH")
	a.want(int64(0), "EXISTS", name)

	// RFencedLock: each acquisition takes the next value of the token counter; a contender
	// gets {pttl, -1}; getToken is a GET of the counter.
	const fenced, counter = "redisson-fenced", "redisson_lock_token:{redisson-fenced}"
	a.want([]any{int64(-1), int64(1)}, append([]string{"EVAL", redissonFencedAcquire},
		evalArgs([]string{fenced, counter}, lease, mine)...)...)
	got, _ := b.eval(redissonFencedAcquire, []string{fenced, counter}, lease, theirs).([]any)
	if len(got) != 2 || got[1] != int64(-1) {
		t.Fatalf("fenced tryLock by a contender: got %s, want [pttl, -1]", show(got))
	}
	if ttl, _ := got[0].(int64); ttl <= 0 || ttl > 30000 {
		t.Fatalf("fenced tryLock by a contender: pttl %d", ttl)
	}
	a.want("1", "GET", counter)
	var fencedToken int64
	if s.raftlock {
		fencedToken = a.lockToken(fenced)
	}
	a.want(int64(1), append([]string{"EVALSHA", release.sha}, evalArgs(
		[]string{fenced, "redisson_lock__channel:{redisson-fenced}", "redisson_unlock_latch:{redisson-fenced}:req-4"},
		"0", lease, mine, "PUBLISH", latchMs)...)...)
	a.want([]any{int64(-1), int64(2)}, append([]string{"EVAL", redissonFencedAcquire},
		evalArgs([]string{fenced, counter}, lease, theirs)...)...)
	if s.raftlock {
		if tok := a.lockToken(fenced); tok <= fencedToken {
			t.Errorf("LOCKINFO token of the next fenced holder: %d, want more than %d", tok, fencedToken)
		}
	}
}
