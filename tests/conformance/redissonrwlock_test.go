package conformance

import (
	"testing"
)

// Redisson RReadWriteLock, read at redisson-4.7.0-62-g66863978 (66863978), files under
// redisson/src/main/java/org/redisson/:
//   - RedissonReadWriteLock.java: readLock() and writeLock() share one hash, the lock's name;
//   - RedissonReadLock.java: the channel is "redisson_rwlock:{name}"; a reader's field is
//     "<manager id>:<thread id>"; each entry also sets a timeout key
//     "{name}:<field>:rwlock_timeout:<n>" with the lease, so that the hash lives as long as
//     its longest reader. tryLockInnerAsync: nil when taken (no mode yet; mode read; or mode
//     write held by this thread's "<field>:write"), else the pttl. unlockInnerAsync: the latch
//     first; no mode publishes UNLOCK_MESSAGE anyway and answers nil; not a reader nil; else
//     down one, its timeout key DELeted, and while others remain the hash is PEXPIREd to the
//     longest remaining timeout key (0), or DELeted with a publish (1). isLocked is a script;
//     forceUnlock DELs a read-mode hash and publishes;
//   - RedissonWriteLock.java: the field is "<manager id>:<thread id>:write"; acquire when no
//     mode, re-entry PEXPIREs pttl + lease; unlock down one (PEXPIRE the internal 30 s lease,
//     0), or the field removed and the hash DELeted with READ_UNLOCK_MESSAGE published, or,
//     when this thread still holds read entries, mode set back to read (1, no publish);
//     isLocked is HGET mode == "write";
//   - renewal/ReadLockTask.java: the watchdog's script PEXPIREs each entry's timeout key and
//     the hash, 1 per hash where some field of this process is alive;
//   - pubsub/LockPubSub.java: UNLOCK_MESSAGE "0" wakes one waiter, READ_UNLOCK_MESSAGE "1" all.
//
// The scripts are ours, written to do what Redisson's do with the same keys, arguments and
// replies.

// rwReadAcquire: KEYS[1] the hash, KEYS[2] the thread's timeout prefix; ARGV[1] lease ms,
// ARGV[2] the reader field, ARGV[3] the same thread's writer field.
const rwReadAcquire = `
local mode = redis.call('hget', KEYS[1], 'mode')
local mayRead = mode == false or mode == 'read' or
  (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)
if not mayRead then
  return redis.call('pttl', KEYS[1])
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'read')
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
local entry = KEYS[2] .. ':' .. n
redis.call('set', entry, 1)
redis.call('pexpire', entry, ARGV[1])
if mode == false then
  redis.call('pexpire', KEYS[1], ARGV[1])
else
  local left = redis.call('pttl', KEYS[1])
  redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
end
return nil`

// rwReadRelease: KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the thread's timeout prefix,
// KEYS[4] the hash's key prefix, KEYS[5] the unlock latch; ARGV[1] the message, ARGV[2] the
// reader field, ARGV[3] the publish command, ARGV[4] the latch's life in ms.
const rwReadRelease = `
local earlier = redis.call('get', KEYS[5])
if earlier ~= false then
  return tonumber(earlier)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[3], KEYS[2], ARGV[1])
  redis.call('set', KEYS[5], 1, 'px', ARGV[4])
  return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], -1)
if n == 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
end
redis.call('del', KEYS[3] .. ':' .. (n + 1))
if redis.call('hlen', KEYS[1]) > 1 then
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local count = tonumber(redis.call('hget', KEYS[1], field))
    if count ~= nil then
      for i = 1, count do
        local left = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
        if left > longest then
          longest = left
        end
      end
    end
  end
  if longest > 0 or mode == 'write' then
    if longest > 0 then
      redis.call('pexpire', KEYS[1], longest)
    end
    redis.call('set', KEYS[5], 0, 'px', ARGV[4])
    return 0
  end
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[1])
redis.call('set', KEYS[5], 1, 'px', ARGV[4])
return 1`

// rwWriteAcquire: KEYS[1] the hash; ARGV[1] lease ms, ARGV[2] the writer field.
const rwWriteAcquire = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`

// rwWriteRelease: KEYS[1] the hash, KEYS[2] the channel, KEYS[3] the unlock latch; ARGV[1] the
// message, ARGV[2] the internal lease ms, ARGV[3] the writer field, ARGV[4] the publish
// command, ARGV[5] the latch's life in ms.
const rwWriteRelease = `
local earlier = redis.call('get', KEYS[3])
if earlier ~= false then
  return tonumber(earlier)
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false then
  redis.call(ARGV[4], KEYS[2], ARGV[1])
  redis.call('set', KEYS[3], 1, 'px', ARGV[5])
  return nil
end
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], 0, 'px', ARGV[5])
  return 0
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[4], KEYS[2], ARGV[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('set', KEYS[3], 1, 'px', ARGV[5])
return 1`

// rwReadRenew: the read watchdog's chunk. KEYS pairs (the hash, its key prefix); ARGV[1] the
// lease ms, then per pair a count of fields and the fields.
const rwReadRenew = `
local renewed = {}
local at = 2
for k = 1, #KEYS, 2 do
  local alive = false
  local fields = tonumber(ARGV[at])
  at = at + 1
  for f = 1, fields do
    local count = redis.call('hget', KEYS[k], ARGV[at])
    if count ~= false then
      alive = true
      for i = 1, tonumber(count) do
        redis.call('pexpire', KEYS[k + 1] .. ':' .. ARGV[at] .. ':rwlock_timeout:' .. i, ARGV[1])
      end
    end
    at = at + 1
  end
  if alive then
    redis.call('pexpire', KEYS[k], ARGV[1])
  end
  renewed[#renewed + 1] = alive and 1 or 0
end
return renewed`

// rwReadIsLocked: KEYS[1] the hash. 1 when read-locked, or write-locked with more than the
// mode and one writer field.
const rwReadIsLocked = `
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'read' or (mode == 'write' and redis.call('hlen', KEYS[1]) > 2) then
  return 1
end
return 0`

// rwForce: KEYS[1] the hash, KEYS[2] the channel; ARGV[1] the message, ARGV[2] the publish
// command, ARGV[3] the mode this lock's half forces ("read" or "write").
const rwForce = `
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[3] then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[2], KEYS[2], ARGV[1])
return 1`

// TestRedissonReadWriteLock: two readers share the lock (one re-entering, each entry with its
// timeout key), a writer told the pttl until the last reader leaves and publishes, the read
// watchdog, the writer re-entering and taking a read entry under its write lock, unlocking the
// write half back to read mode, a reader blocked by the writer, a retried unlock answered
// from its latch, the unlock of a lock nobody holds, and forceUnlock.
func TestRedissonReadWriteLock(t *testing.T) {
	onAllWithGroups(t, testRedissonReadWriteLock)
}

func testRedissonReadWriteLock(t *testing.T, s server) {
	const (
		name      = "redisson-rw"
		channel   = "redisson_rwlock:{redisson-rw}"
		prefix    = "{redisson-rw}"
		manager   = "1f0e7c3a-5b2d-4e8f-9a61-0c4d3b2a1e90"
		readerA   = manager + ":1"
		readerB   = manager + ":2"
		writerC   = manager + ":3:write"
		readerC   = manager + ":3" // the writer's own thread, reading under its write lock
		readerD   = manager + ":4"
		lease     = "30000"
		latchMs   = "13000"
		readMsg   = "0" // UNLOCK_MESSAGE
		writeMsg  = "1" // READ_UNLOCK_MESSAGE
		timeoutsA = prefix + ":" + readerA + ":rwlock_timeout"
		timeoutsB = prefix + ":" + readerB + ":rwlock_timeout"
		timeoutsC = prefix + ":" + readerC + ":rwlock_timeout"
		timeoutsD = prefix + ":" + readerD + ":rwlock_timeout"
	)
	a, sub := dial(t, s.addr), dial(t, s.addr)
	readAcquire, readRelease := a.load(rwReadAcquire), a.load(rwReadRelease)
	writeAcquire, writeRelease := a.load(rwWriteAcquire), a.load(rwWriteRelease)
	readRenew, readIsLocked, force := a.load(rwReadRenew), a.load(rwReadIsLocked), a.load(rwForce)
	tryRead := func(field, timeouts, leaseMs string) any {
		t.Helper()
		return a.evalsha(readAcquire, []string{name, timeouts}, leaseMs, field, field+":write")
	}
	// unlockRead and unlockWrite give the EVALSHA command line of an unlock request.
	unlockRead := func(field, timeouts, request string) []string {
		return append([]string{"EVALSHA", readRelease.sha}, evalArgs([]string{name, channel, timeouts, prefix,
			"redisson_unlock_latch:{redisson-rw}:" + request}, readMsg, field, "PUBLISH", latchMs)...)
	}
	tryWrite := func(field, leaseMs string) any {
		t.Helper()
		return a.evalsha(writeAcquire, []string{name}, leaseMs, field)
	}
	unlockWrite := func(field, request string) []string {
		return append([]string{"EVALSHA", writeRelease.sha}, evalArgs([]string{name, channel,
			"redisson_unlock_latch:{redisson-rw}:" + request}, writeMsg, lease, field, "PUBLISH", latchMs)...)
	}
	expectMessage := func(want string) {
		t.Helper()
		if ch, msg, ok := sub.message(waitBound); !ok || ch != channel || msg != want {
			t.Fatalf("subscriber: got message %q on %q (received %v), want %q on %q", msg, ch, ok, want, channel)
		}
	}

	// Reader A, then A again, then reader B: all nil (acquired), each entry with its timeout key.
	if got := tryRead(readerA, timeoutsA, "10000"); got != nil {
		t.Fatalf("readLock A: got %s, want nil", show(got))
	}
	a.pttlIn(name, 9000, 10000)
	if got := tryRead(readerA, timeoutsA, lease); got != nil {
		t.Fatalf("readLock A again: got %s, want nil", show(got))
	}
	if got := tryRead(readerB, timeoutsB, lease); got != nil {
		t.Fatalf("readLock B: got %s, want nil", show(got))
	}
	a.want("read", "HGET", name, "mode")
	a.want("2", "HGET", name, readerA)
	a.want("1", "HGET", name, readerB)
	a.want(int64(3), "HLEN", name)
	a.want("1", "GET", timeoutsA+":1")
	a.want("1", "GET", timeoutsA+":2")
	a.want("1", "GET", timeoutsB+":1")
	a.pttlIn(timeoutsA+":1", 0, 10000)
	a.pttlIn(timeoutsA+":2", 20000, 30000)
	a.pttlIn(name, 20000, 30000) // the longest entry's lease
	a.want(int64(1), "EVALSHA", readIsLocked.sha, "1", name)

	// A writer: the pttl, so it subscribes to the lock's channel and waits.
	if ttl, ok := tryWrite(writerC, lease).(int64); !ok || ttl <= 0 || ttl > 30000 {
		t.Fatalf("writeLock C while read-locked: got %v, want the pttl", ttl)
	}
	a.want(int64(0), "HEXISTS", name, writerC) // nothing of the writer was written
	sub.subscribe(channel)

	// The read watchdog: A's entries and the hash renewed; a hash this process no longer
	// reads reports 0.
	if s.slotted {
		// A cluster setup renews each slot's locks in a script of their own
		// (RenewalTask.renewSlots): the two locks are in different slots.
		a.want([]any{int64(1)}, "EVALSHA", readRenew.sha, "2", name, prefix, lease, "1", readerA)
		a.want([]any{int64(0)}, "EVALSHA", readRenew.sha, "2", "redisson-rw-gone", "{redisson-rw-gone}", lease, "1", readerA)
	} else {
		a.want([]any{int64(1), int64(0)}, "EVALSHA", readRenew.sha, "4", name, prefix, "redisson-rw-gone", "{redisson-rw-gone}",
			lease, "1", readerA, "1", readerA)
	}
	a.pttlIn(timeoutsA+":1", 25000, 30000)

	// A leaves twice, B once: 0, 0 (others remain), then 1 and the release message.
	a.want(int64(0), unlockRead(readerA, timeoutsA, "r1")...)
	a.want(int64(0), "EXISTS", timeoutsA+":2")
	a.want("1", "HGET", name, readerA)
	a.want(int64(0), unlockRead(readerA, timeoutsA, "r2")...)
	a.want(int64(0), "HEXISTS", name, readerA)
	a.want(int64(0), "EXISTS", timeoutsA+":1")
	a.pttlIn(name, 20000, 30000) // B's timeout key now sets it
	// A stranger (D never read): nil, IllegalMonitorStateException.
	a.want(nil, unlockRead(readerD, timeoutsD, "r3")...)
	a.want(int64(1), unlockRead(readerB, timeoutsB, "r4")...)
	// The reply was lost and the unlock retried: the latch answers.
	a.want(int64(1), unlockRead(readerB, timeoutsB, "r4")...)
	a.want(int64(0), "EXISTS", name, timeoutsB+":1")
	expectMessage(readMsg)

	// The woken writer acquires; re-entry adds the lease to the pttl.
	if got := tryWrite(writerC, "10000"); got != nil {
		t.Fatalf("writeLock C: got %s, want nil", show(got))
	}
	a.want("write", "HGET", name, "mode") // the write lock's isLocked
	a.want(int64(0), "EVALSHA", readIsLocked.sha, "1", name)
	if got := tryWrite(writerC, "10000"); got != nil {
		t.Fatalf("writeLock C again: got %s, want nil", show(got))
	}
	a.pttlIn(name, 10000, 20000)
	a.want("2", "HGET", name, writerC)
	// Another thread's reader and writer are refused with the pttl.
	if ttl, ok := tryRead(readerD, timeoutsD, lease).(int64); !ok || ttl <= 0 || ttl > 20000 {
		t.Fatalf("readLock D while write-locked: got %v, want the pttl", ttl)
	}
	a.want(int64(0), "EXISTS", timeoutsD+":1")
	if ttl, ok := tryWrite(manager+":4:write", lease).(int64); !ok || ttl <= 0 || ttl > 20000 {
		t.Fatalf("writeLock D while write-locked: got %v, want the pttl", ttl)
	}
	// The writer's own thread may read.
	if got := tryRead(readerC, timeoutsC, lease); got != nil {
		t.Fatalf("readLock C under its write lock: got %s, want nil", show(got))
	}
	a.want(int64(1), "EVALSHA", readIsLocked.sha, "1", name) // mode, write field and read field

	// Write unlocks: 0 (re-entered, PEXPIRE the internal lease), then 1 back to read mode,
	// without a message.
	a.want(int64(0), unlockWrite(writerC, "w1")...)
	a.pttlIn(name, 25000, 30000)
	a.want(nil, unlockWrite(manager+":4:write", "w2")...) // not the writer
	a.want(int64(1), unlockWrite(writerC, "w3")...)
	a.want("read", "HGET", name, "mode")
	a.want(int64(0), "HEXISTS", name, writerC)
	// Now a plain read lock: another reader joins.
	if got := tryRead(readerD, timeoutsD, lease); got != nil {
		t.Fatalf("readLock D after the write unlock: got %s, want nil", show(got))
	}
	a.want(int64(0), unlockRead(readerD, timeoutsD, "r5")...)
	a.want(int64(1), unlockRead(readerC, timeoutsC, "r6")...)
	expectMessage(readMsg)
	a.want(int64(0), "EXISTS", name)

	// Unlocking a lock nobody holds still publishes, and answers nil.
	a.want(nil, unlockRead(readerA, timeoutsA, "r7")...)
	expectMessage(readMsg)
	a.want(nil, unlockWrite(writerC, "w4")...)
	expectMessage(writeMsg)

	// A write unlock that releases publishes READ_UNLOCK_MESSAGE, waking every waiter.
	if got := tryWrite(writerC, lease); got != nil {
		t.Fatalf("writeLock C: got %s, want nil", show(got))
	}
	a.want(int64(1), unlockWrite(writerC, "w5")...)
	expectMessage(writeMsg)

	// forceUnlock: each half only forces its own mode.
	if got := tryWrite(writerC, lease); got != nil {
		t.Fatalf("writeLock C: got %s, want nil", show(got))
	}
	a.want(int64(0), "EVALSHA", force.sha, "2", name, channel, readMsg, "PUBLISH", "read")
	a.want(int64(1), "EVALSHA", force.sha, "2", name, channel, writeMsg, "PUBLISH", "write")
	expectMessage(writeMsg)
	if got := tryRead(readerA, timeoutsA, lease); got != nil {
		t.Fatalf("readLock A: got %s, want nil", show(got))
	}
	a.want(int64(1), "EVALSHA", force.sha, "2", name, channel, readMsg, "PUBLISH", "read")
	expectMessage(readMsg)
	a.want(int64(0), "EXISTS", name)
}
