package conformance

import (
	"strconv"
	"testing"
	"time"
)

// Redisson RFairLock, read at redisson-4.7.0-62-g66863978 (66863978),
// redisson/src/main/java/org/redisson/RedissonFairLock.java:
//   - beside the lock hash, the waiters' queue is the list "redisson_lock_queue:{name}" and
//     their deadlines the sorted set "redisson_lock_timeout:{name}", in the client's
//     System.currentTimeMillis; a waiter's wait is the tryLock wait, or fairLockWaitTimeout
//     (5 min) without one;
//   - every script first drops the queue's head while its deadline has passed (LINDEX 0,
//     ZSCORE, ZREM, LPOP);
//   - tryLockInnerAsync with a wait (EVAL_LONG): acquire when free and the queue empty or
//     headed by this thread (LPOP, ZREM, every other deadline ZINCRBY -wait), nil; re-entry,
//     nil; already queued, the lock's pttl (at least 0); else queued at the tail (ZADD, and
//     RPUSH when new) with the deadline of the waiter ahead (or the lock's pttl) plus the wait,
//     answering that wait ahead. Without a wait (EVAL_NULL_BOOLEAN): nil or 1, never queued;
//   - acquireFailedAsync (a waiter giving up): the deadlines behind it ZINCRBY -wait, then
//     ZREM and LREM itself;
//   - unlockInnerAsync: the latch; a lock already gone publishes to the queue's head and
//     answers 1; not the holder nil; down one 0; else DEL, and UNLOCK_MESSAGE "0" to the head's
//     own channel "redisson_lock__channel:{name}:<field>" (subscribe is per thread), 1;
//   - forceUnlockAsync: DEL and, when there was a lock, publish to the head, 1 or 0.
//
// The scripts are ours, written to do what Redisson's do with the same keys, arguments and
// replies.

// fairDropStale is the prologue of every fair lock script: the queue's head leaves while its
// deadline is at or before now (the ARGV named).
func fairDropStale(now string) string {
	return `
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if head == false then
    break
  end
  local deadline = redis.call('zscore', KEYS[3], head)
  if deadline == false or tonumber(deadline) > tonumber(` + now + `) then
    break
  end
  redis.call('zrem', KEYS[3], head)
  redis.call('lpop', KEYS[2])
end
`
}

// fairAcquireFree is the acquisition of a free lock by the queue's head (or by anyone when no
// one waits), answering nil; ARGV[wait] names the wait argument.
func fairAcquireFree(wait string) string {
	return `
local free = redis.call('exists', KEYS[1]) == 0
if free and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], ARGV[2])
  for _, waiter in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
    redis.call('zincrby', KEYS[3], -tonumber(` + wait + `), waiter)
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
`
}

// fairTryLock: KEYS[1] the lock, KEYS[2] the queue, KEYS[3] the deadlines; ARGV[1] lease ms,
// ARGV[2] the field, ARGV[3] the wait ms, ARGV[4] now.
var fairTryLock = fairDropStale("ARGV[4]") + fairAcquireFree("ARGV[3]") + `
if redis.call('zscore', KEYS[3], ARGV[2]) ~= false then
  return math.max(0, redis.call('pttl', KEYS[1]))
end
local last = redis.call('lindex', KEYS[2], -1)
local ahead
if last ~= false and last ~= ARGV[2] and redis.call('zscore', KEYS[3], last) ~= false then
  ahead = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4])
else
  ahead = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ahead + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then
  redis.call('rpush', KEYS[2], ARGV[2])
end
return ahead`

// fairTryOnce: tryLock() without a wait. KEYS as fairTryLock; ARGV[1] lease ms, ARGV[2] the
// field, ARGV[3] now, ARGV[4] the wait ms.
var fairTryOnce = fairDropStale("ARGV[3]") + fairAcquireFree("ARGV[4]") + `
return 1`

// fairGiveUp: KEYS[1] the queue, KEYS[2] the deadlines; ARGV[1] the field, ARGV[2] the wait ms.
const fairGiveUp = `
local behind = false
for _, waiter in ipairs(redis.call('lrange', KEYS[1], 0, -1)) do
  if behind then
    redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), waiter)
  elseif waiter == ARGV[1] then
    behind = true
  end
end
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('lrem', KEYS[1], 0, ARGV[1])`

// fairUnlock: KEYS[1] the lock, KEYS[2] the queue, KEYS[3] the deadlines, KEYS[4] the channel
// prefix, KEYS[5] the unlock latch; ARGV[1] the message, ARGV[2] the lease ms, ARGV[3] the
// field, ARGV[4] now, ARGV[5] the publish command, ARGV[6] the latch's life in ms.
var fairUnlock = `
local earlier = redis.call('get', KEYS[5])
if earlier ~= false then
  return tonumber(earlier)
end
` + fairDropStale("ARGV[4]") + `
local function wakeHead()
  local head = redis.call('lindex', KEYS[2], 0)
  if head ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1])
  end
end
if redis.call('exists', KEYS[1]) == 0 then
  wakeHead()
  redis.call('set', KEYS[5], 1, 'px', ARGV[6])
  return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[5], 0, 'px', ARGV[6])
  return 0
end
redis.call('del', KEYS[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[6])
wakeHead()
return 1`

// fairForce: KEYS[1] the lock, KEYS[2] the queue, KEYS[3] the deadlines, KEYS[4] the channel
// prefix; ARGV[1] the message, ARGV[2] now, ARGV[3] the publish command.
var fairForce = fairDropStale("ARGV[2]") + `
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
local head = redis.call('lindex', KEYS[2], 0)
if head ~= false then
  redis.call(ARGV[3], KEYS[4] .. ':' .. head, ARGV[1])
end
return 1`

// TestRedissonFairLock: the holder re-enters; tryLock() without a wait fails without queueing;
// two waiters queue in order (the second behind the first's deadline); the holder's release
// wakes only the first, which acquires while the second, though the lock is free, must wait;
// a waiter giving up moves the one behind it forward; a waiter whose deadline passed is
// dropped and the next comer acquires; a stranger's unlock; forceUnlock.
func TestRedissonFairLock(t *testing.T) {
	onAllWithGroups(t, testRedissonFairLock)
}

func testRedissonFairLock(t *testing.T, s server) {
	const (
		name     = "redisson-fair"
		queue    = "redisson_lock_queue:{redisson-fair}"
		timeouts = "redisson_lock_timeout:{redisson-fair}"
		channel  = "redisson_lock__channel:{redisson-fair}"
		manager  = "6b1d2e0f-7a8c-4d3e-b5f6-190a2c3d4e5f"
		holderA  = manager + ":11"
		waiterB  = manager + ":12"
		waiterC  = manager + ":13"
		waiterD  = manager + ":14"
		comerE   = manager + ":15"
		lease    = "30000"
		wait     = "10000"
		latchMs  = "13000"
	)
	a := dial(t, s.addr)
	subB, subD := dial(t, s.addr), dial(t, s.addr)
	tryLock, tryOnce, giveUp := a.load(fairTryLock), a.load(fairTryOnce), a.load(fairGiveUp)
	unlock, force := a.load(fairUnlock), a.load(fairForce)
	// Every client's clock reads now, so that the deadlines come out exact.
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	lockKeys := []string{name, queue, timeouts}
	try := func(field, at string) any {
		t.Helper()
		return a.evalsha(tryLock, lockKeys, lease, field, wait, at)
	}
	release := func(field, request string) []string {
		return append([]string{"EVALSHA", unlock.sha}, evalArgs([]string{name, queue, timeouts, channel,
			"redisson_unlock_latch:{redisson-fair}:" + request}, "0", lease, field, now, "PUBLISH", latchMs)...)
	}
	deadline := func(field string) int64 {
		t.Helper()
		v, _ := a.do("ZSCORE", timeouts, field).(string)
		d, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("ZSCORE %s %s: got %q, want an integral deadline", timeouts, field, v)
		}
		return d
	}
	woken := func(sub *conn, field string) {
		t.Helper()
		if ch, msg, ok := sub.message(waitBound); !ok || ch != channel+":"+field || msg != "0" {
			t.Fatalf("waiter %s: got message %q on %q (received %v), want \"0\"", field, msg, ch, ok)
		}
	}

	// A takes it and re-enters; tryLock() by C fails (1) and leaves no trace.
	if got := try(holderA, now); got != nil {
		t.Fatalf("tryLock A: got %s, want nil", show(got))
	}
	if got := try(holderA, now); got != nil {
		t.Fatalf("tryLock A again: got %s, want nil", show(got))
	}
	a.want("2", "HGET", name, holderA)
	a.want(int64(1), "EVALSHA", tryOnce.sha, "3", name, queue, timeouts, lease, waiterC, now, "300000")
	a.want(int64(0), "EXISTS", queue, timeouts)

	// B queues behind the lock's pttl, C behind B's deadline.
	aheadB, ok := try(waiterB, now).(int64)
	if !ok || aheadB <= 0 || aheadB > 30000 {
		t.Fatalf("tryLock B: got %v, want the lock's pttl", aheadB)
	}
	subB.subscribe(channel + ":" + waiterB)
	nowMs, _ := strconv.ParseInt(now, 10, 64)
	if got := deadline(waiterB); got != nowMs+aheadB+10000 {
		t.Fatalf("B's deadline: got %d, want %d", got, nowMs+aheadB+10000)
	}
	a.want(aheadB+10000, "EVALSHA", tryLock.sha, "3", name, queue, timeouts, lease, waiterC, wait, now)
	a.want([]any{waiterB, waiterC}, "LRANGE", queue, "0", "-1")
	if got := deadline(waiterC); got != nowMs+aheadB+20000 {
		t.Fatalf("C's deadline: got %d, want %d", got, nowMs+aheadB+20000)
	}
	// B, already queued, retries: the lock's pttl, and the queue is unchanged.
	if ttl, ok := try(waiterB, now).(int64); !ok || ttl <= 0 || ttl > 30000 {
		t.Fatalf("tryLock B again: got %v, want the pttl", ttl)
	}
	a.want(int64(2), "LLEN", queue)

	// A unlocks twice; the release wakes B only.
	a.want(int64(0), release(holderA, "u1")...)
	a.want(int64(1), release(holderA, "u2")...)
	woken(subB, waiterB)
	// The lock is free but C is not at the head: 0 (the pttl of no lock), still waiting.
	a.want(int64(0), "EVALSHA", tryLock.sha, "3", name, queue, timeouts, lease, waiterC, wait, now)
	a.want(int64(0), "EXISTS", name)
	// B, at the head, acquires; C's deadline moves forward by the wait.
	if got := try(waiterB, now); got != nil {
		t.Fatalf("tryLock B when woken: got %s, want nil", show(got))
	}
	a.want("1", "HGET", name, waiterB)
	a.want([]any{waiterC}, "LRANGE", queue, "0", "-1")
	a.want(nil, "ZSCORE", timeouts, waiterB)
	if got := deadline(waiterC); got != nowMs+aheadB+10000 {
		t.Fatalf("C's deadline after B acquired: got %d, want %d", got, nowMs+aheadB+10000)
	}

	// D queues behind C; C gives up, which moves D forward.
	if ahead, ok := try(waiterD, now).(int64); !ok || ahead != aheadB+10000 {
		t.Fatalf("tryLock D: got %v, want %d", ahead, aheadB+10000)
	}
	subD.subscribe(channel + ":" + waiterD)
	a.want(nil, "EVALSHA", giveUp.sha, "2", queue, timeouts, waiterC, wait)
	a.want([]any{waiterD}, "LRANGE", queue, "0", "-1")
	a.want(nil, "ZSCORE", timeouts, waiterC)
	dDeadline := deadline(waiterD)
	if dDeadline != nowMs+aheadB+10000 {
		t.Fatalf("D's deadline after C gave up: got %d, want %d", dDeadline, nowMs+aheadB+10000)
	}

	// B's release wakes D, which never comes back: once its deadline has passed, E (whose
	// clock reads that later time) finds D dropped and takes the lock.
	a.want(int64(1), release(waiterB, "u3")...)
	woken(subD, waiterD)
	later := strconv.FormatInt(dDeadline, 10)
	if got := try(comerE, later); got != nil {
		t.Fatalf("tryLock E after D's deadline: got %s, want nil", show(got))
	}
	a.want(int64(0), "EXISTS", queue, timeouts)
	a.want("1", "HGET", name, comerE)

	// A stranger's unlock: nil. forceUnlock: 1, then 0.
	a.want(nil, release(waiterD, "u4")...)
	a.want(int64(1), "EVALSHA", force.sha, "4", name, queue, timeouts, channel, "0", now, "PUBLISH")
	a.want(int64(0), "EVALSHA", force.sha, "4", name, queue, timeouts, channel, "0", now, "PUBLISH")
	a.want(int64(0), "EXISTS", name)
}
