package conformance

import (
	"testing"
)

// Redisson RSemaphore and RCountDownLatch, read at redisson-4.7.0-62-g66863978 (66863978),
// files under redisson/src/main/java/org/redisson/:
//   - RedissonSemaphore.java: the permits are a counter string under the semaphore's name, the
//     channel "redisson_sc:{name}". trySetPermits sets it only when absent (optionally with PX)
//     and publishes the count, 1 or 0; tryAcquire DECRBYs when enough are left, 1 or 0;
//     release INCRBYs and publishes the new count, no reply (EVAL_VOID); releaseIfExists does
//     so only for an existing counter, 1 or 0; addPermits adds (from 0) and publishes;
//     drainPermits sets 0 and answers what was there; availablePermits is a GET (nil is 0);
//   - pubsub/SemaphorePubSub.java: a message wakes up to that many waiters, who retry;
//   - RedissonCountDownLatch.java: the count is a counter string, the channel
//     "redisson_countdownlatch__channel__{name}". trySetCount sets it only when absent and
//     publishes NEW_COUNT_MESSAGE; countDown DECRs, DELs at or below 0 and publishes
//     ZERO_COUNT_MESSAGE at exactly 0, no reply; getCount is a GET; delete DELs and publishes
//     NEW_COUNT_MESSAGE;
//   - pubsub/CountDownLatchPubSub.java: ZERO_COUNT_MESSAGE "0" opens the waiters' latch,
//     NEW_COUNT_MESSAGE "1" closes it.
//
// The scripts are ours, written to do what Redisson's do with the same keys, arguments and
// replies.

// semSetPermits: KEYS[1] the counter, KEYS[2] the channel; ARGV[1] permits, ARGV[2] the
// publish command, ARGV[3] (optional) the counter's life in ms.
const semSetPermits = `
if redis.call('get', KEYS[1]) ~= false then
  return 0
end
if ARGV[3] == nil then
  redis.call('set', KEYS[1], ARGV[1])
else
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[3])
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1`

// semTryAcquire: KEYS[1] the counter; ARGV[1] permits.
const semTryAcquire = `
local have = redis.call('get', KEYS[1])
if have == false or tonumber(have) < tonumber(ARGV[1]) then
  return 0
end
redis.call('decrby', KEYS[1], ARGV[1])
return 1`

// semRelease: KEYS[1] the counter, KEYS[2] the channel; ARGV[1] permits, ARGV[2] the publish
// command. No reply.
const semRelease = `
local now = redis.call('incrby', KEYS[1], ARGV[1])
redis.call(ARGV[2], KEYS[2], now)`

// semReleaseIfExists: as semRelease, but 0 and nothing done when there is no counter.
const semReleaseIfExists = `
if redis.call('exists', KEYS[1]) == 0 then
  return 0
end
redis.call(ARGV[2], KEYS[2], redis.call('incrby', KEYS[1], ARGV[1]))
return 1`

// semAddPermits: KEYS[1] the counter, KEYS[2] the channel; ARGV[1] permits, ARGV[2] the
// publish command. No reply.
const semAddPermits = `
local have = redis.call('get', KEYS[1])
if have == false then
  have = 0
end
local total = have + ARGV[1]
redis.call('set', KEYS[1], total)
redis.call(ARGV[2], KEYS[2], total)`

// semDrain: KEYS[1] the counter. What was there (the string as stored), or 0.
const semDrain = `
local have = redis.call('get', KEYS[1])
if have == false then
  return 0
end
redis.call('set', KEYS[1], 0)
return have`

// TestRedissonSemaphore: trySetPermits once, tryAcquire until none are left, a waiter
// subscribed to the channel woken by a release and acquiring, more permits than there are
// refused, releaseIfExists, addPermits, drainPermits, trySetPermits with a time to live.
func TestRedissonSemaphore(t *testing.T) {
	onAllWithGroups(t, testRedissonSemaphore)
}

func testRedissonSemaphore(t *testing.T, s server) {
	const (
		name    = "redisson-sem"
		channel = "redisson_sc:{redisson-sem}"
	)
	a, sub := dial(t, s.addr), dial(t, s.addr)
	setPermits, tryAcquire, release := a.load(semSetPermits), a.load(semTryAcquire), a.load(semRelease)
	releaseIfExists, addPermits, drain := a.load(semReleaseIfExists), a.load(semAddPermits), a.load(semDrain)
	sub.subscribe(channel)
	expectMessage := func(want string) {
		t.Helper()
		if ch, msg, ok := sub.message(waitBound); !ok || ch != channel || msg != want {
			t.Fatalf("subscriber: got message %q on %q (received %v), want %q on %q", msg, ch, ok, want, channel)
		}
	}

	a.want(nil, "GET", name) // availablePermits: 0
	a.want(int64(1), "EVALSHA", setPermits.sha, "2", name, channel, "2", "PUBLISH")
	expectMessage("2")
	a.want(int64(0), "EVALSHA", setPermits.sha, "2", name, channel, "5", "PUBLISH")
	a.want("2", "GET", name)

	// tryAcquire twice, then none are left.
	a.want(int64(1), "EVALSHA", tryAcquire.sha, "1", name, "1")
	a.want(int64(1), "EVALSHA", tryAcquire.sha, "1", name, "1")
	a.want(int64(0), "EVALSHA", tryAcquire.sha, "1", name, "1")
	a.want("0", "GET", name)

	// release(1): the new count published, no reply; the woken waiter acquires.
	a.want(nil, "EVALSHA", release.sha, "2", name, channel, "1", "PUBLISH")
	expectMessage("1")
	a.want(int64(1), "EVALSHA", tryAcquire.sha, "1", name, "1")

	// release(2), then tryAcquire(3) is refused and tryAcquire(2) takes both.
	a.want(nil, "EVALSHA", release.sha, "2", name, channel, "2", "PUBLISH")
	expectMessage("2")
	a.want(int64(0), "EVALSHA", tryAcquire.sha, "1", name, "3")
	a.want("2", "GET", name)
	a.want(int64(1), "EVALSHA", tryAcquire.sha, "1", name, "2")

	// releaseIfExists: 1 here, 0 for a semaphore never set (no counter created, no message).
	a.want(int64(1), "EVALSHA", releaseIfExists.sha, "2", name, channel, "1", "PUBLISH")
	expectMessage("1")
	a.want(int64(0), "EVALSHA", releaseIfExists.sha, "2", "redisson-sem-none", "redisson_sc:{redisson-sem-none}", "1", "PUBLISH")
	a.want(int64(0), "EXISTS", "redisson-sem-none")

	// addPermits(4): 1 + 4, published; drainPermits answers 5 and leaves 0.
	a.want(nil, "EVALSHA", addPermits.sha, "2", name, channel, "4", "PUBLISH")
	expectMessage("5")
	a.want("5", "GET", name)
	a.want("5", "EVALSHA", drain.sha, "1", name)
	a.want("0", "GET", name)
	a.want(int64(0), "EVALSHA", drain.sha, "1", "redisson-sem-none")

	// trySetPermits(3, 10 s): with PX.
	const timed = "redisson-sem-timed"
	a.want(int64(1), "EVALSHA", setPermits.sha, "2", timed, "redisson_sc:{redisson-sem-timed}", "3", "PUBLISH", "10000")
	a.pttlIn(timed, 9000, 10000)
	a.want("3", "GET", timed)
}

// latchSetCount: KEYS[1] the count, KEYS[2] the channel; ARGV[1] the message, ARGV[2] the
// count, ARGV[3] the publish command.
const latchSetCount = `
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('set', KEYS[1], ARGV[2])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1`

// latchCountDown: KEYS[1] the count, KEYS[2] the channel; ARGV[1] the message, ARGV[2] the
// publish command. No reply.
const latchCountDown = `
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
end
if left == 0 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
end`

// latchDelete: KEYS[1] the count, KEYS[2] the channel; ARGV[1] the message, ARGV[2] the
// publish command.
const latchDelete = `
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1`

// TestRedissonCountDownLatch: trySetCount once (NEW_COUNT_MESSAGE), countDown to zero with
// the waiter told by ZERO_COUNT_MESSAGE, a countDown past zero, delete.
func TestRedissonCountDownLatch(t *testing.T) {
	onAllWithGroups(t, testRedissonCountDownLatch)
}

func testRedissonCountDownLatch(t *testing.T, s server) {
	const (
		name    = "redisson-latch"
		channel = "redisson_countdownlatch__channel__{redisson-latch}"
		zero    = "0" // ZERO_COUNT_MESSAGE
		newer   = "1" // NEW_COUNT_MESSAGE
	)
	a, sub := dial(t, s.addr), dial(t, s.addr)
	setCount, countDown, del := a.load(latchSetCount), a.load(latchCountDown), a.load(latchDelete)
	sub.subscribe(channel)
	expectMessage := func(want string) {
		t.Helper()
		if ch, msg, ok := sub.message(waitBound); !ok || ch != channel || msg != want {
			t.Fatalf("subscriber: got message %q on %q (received %v), want %q on %q", msg, ch, ok, want, channel)
		}
	}

	a.want(int64(1), "EVALSHA", setCount.sha, "2", name, channel, newer, "2", "PUBLISH")
	expectMessage(newer)
	a.want(int64(0), "EVALSHA", setCount.sha, "2", name, channel, newer, "7", "PUBLISH")
	a.want("2", "GET", name) // getCount

	// countDown twice: the second reaches 0, DELs the count and tells the waiter.
	a.want(nil, "EVALSHA", countDown.sha, "2", name, channel, zero, "PUBLISH")
	a.want("1", "GET", name)
	a.want(nil, "EVALSHA", countDown.sha, "2", name, channel, zero, "PUBLISH")
	expectMessage(zero)
	a.want(nil, "GET", name) // getCount: 0, so await returns
	// Past zero: DECR makes -1, which is DELeted at once, with no message.
	a.want(nil, "EVALSHA", countDown.sha, "2", name, channel, zero, "PUBLISH")
	a.want(int64(0), "EXISTS", name)

	// delete: 1 and NEW_COUNT_MESSAGE with a count, 0 without.
	a.want(int64(1), "EVALSHA", setCount.sha, "2", name, channel, newer, "3", "PUBLISH")
	expectMessage(newer)
	a.want(int64(1), "EVALSHA", del.sha, "2", name, channel, newer, "PUBLISH")
	expectMessage(newer)
	a.want(int64(0), "EVALSHA", del.sha, "2", name, channel, newer, "PUBLISH")
	// The next message is the one of a fresh count: nothing came in between.
	a.want(int64(1), "EVALSHA", setCount.sha, "2", name, channel, newer, "1", "PUBLISH")
	expectMessage(newer)
	a.want(nil, "EVALSHA", countDown.sha, "2", name, channel, zero, "PUBLISH")
	expectMessage(zero)
}
