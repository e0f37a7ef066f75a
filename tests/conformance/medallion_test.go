package conformance

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/raftlock/raftlock/tests/testutil"
)

// Medallion DistributedLock.Redis 1.1.1 (github.com/madelson/DistributedLock, read at 2.8.1,
// 3da3eaf4), over StackExchange.Redis, files under src/DistributedLock.Redis/:
//   - RedisDistributedSynchronizationOptionsBuilder.cs: the default expiry is 30 s, extended
//     every third of 0.9 × expiry, busy-wait sleeps of 10 ms to 0.8 s between attempts;
//   - RedLock/RedLockHelper.cs: a lock id is "<machine>_<pid>_<guid without dashes>"; with one
//     database, RedLockAcquire is one attempt and a true reply means held;
//   - Primitives/RedisMutexPrimitive.cs (RedisDistributedLock): acquire SET key id EX 30 NX
//     (StackExchange.Redis sends EX for whole seconds); extend a script, GET == id then the
//     PEXPIRE reply, else 0; release a script, GET == id then the DEL reply, else 0;
//   - RedisDistributedReaderWriterLock.cs and Primitives/RedisReaderWriterLockPrimitives.cs:
//     the keys "<name>.readers" (a set of reader ids) and "<name>.writer" (a string). A read
//     acquire fails while the writer key exists, else SADDs its id and raises the set's PTTL to
//     at least its expiry, 1; read extend needs SISMEMBER; read release SREMs, no reply. A
//     write acquire first tries outright; when it fails it takes the writer-waiting lock, SET
//     writer "<id>_WRITERWAITING" EX 30 NX (which stops new readers), then retries: SCARD of the
//     readers 0 turns the key into its id with PX (1), else it re-PEXPIREs its waiting key (0).
//     The write lock is extended and released as the mutex on the writer key;
//   - Primitives/RedisSemaphorePrimitive.cs (RedisDistributedSemaphore): a sorted set of holder
//     ids scored by their deadline in the server's TIME (ms, fractional); acquire calls
//     redis.replicate_commands(), ZREMRANGEBYSCORE -inf..now, then ZADDs now + expiry while
//     ZCARD < max (1, else 0), raising the set's PTTL to at least 3 × expiry; extend is ZADD XX
//     CH (1 when it was still a holder); release ZREM; GetCurrentCount is max - ZCARD;
//   - Primitives/RedisScript.cs: scripts go through ScriptEvaluate with their text, which
//     StackExchange.Redis 3.1.31 sends as SCRIPT LOAD once per server, then EVALSHA
//     (RedisDatabase.cs ScriptEvalMessage).
//
// The scripts are ours, written to do what Medallion's do with the same keys, arguments and
// replies.

// medallionExtend: KEYS[1] the key; ARGV[1] the id, ARGV[2] the expiry ms.
const medallionExtend = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('pexpire', KEYS[1], ARGV[2])`

// medallionRelease: KEYS[1] the key; ARGV[1] the id.
const medallionRelease = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('del', KEYS[1])`

// scriptEvaluate is ScriptEvaluate(text) as StackExchange.Redis sends it: it runs SCRIPT LOAD
// the first time a connection (loaded) sees src, and returns the EVALSHA command line to send.
func (c *conn) scriptEvaluate(loaded map[string]script, src string, keys []string, args ...string) []string {
	c.t.Helper()
	s, ok := loaded[src]
	if !ok {
		s = c.load(src)
		loaded[src] = s
	}
	return append([]string{"EVALSHA", s.sha}, evalArgs(keys, args...)...)
}

// TestMedallionRedisLock: RedisDistributedLock acquire, a contender refused, extend and release
// by the holder and by a stranger, the contender acquiring afterwards.
func TestMedallionRedisLock(t *testing.T) {
	onBoth(t, testMedallionRedisLock)
}

func testMedallionRedisLock(t *testing.T, s server) {
	const (
		key = "medallion-mutex"
		idA = "build-07_4182_3f2a9c1d0b8e47f6a5d4c3b2a1908f7e"
		idB = "build-07_4182_8e7f6a5d4c3b2a19f0e1d2c3b4a59687"
	)
	a, b := dial(t, s.addr), dial(t, s.addr)
	scriptsA, scriptsB := map[string]script{}, map[string]script{}

	a.want("OK", "SET", key, idA, "EX", "30", "NX")
	b.want(nil, "SET", key, idB, "EX", "30", "NX") // busy-waits, retrying the same
	if s.raftlock {
		a.lockToken(key)
	}
	a.pttlIn(key, 29000, 30000)

	// The extension cadence's extend, and a stranger's.
	a.want(int64(1), a.scriptEvaluate(scriptsA, medallionExtend, []string{key}, idA, "30000")...)
	b.want(int64(0), b.scriptEvaluate(scriptsB, medallionExtend, []string{key}, idB, "30000")...)
	a.pttlIn(key, 29000, 30000)

	// Release: a stranger's does nothing; the holder's DELs (1).
	b.want(int64(0), b.scriptEvaluate(scriptsB, medallionRelease, []string{key}, idB)...)
	a.want(idA, "GET", key)
	a.want(int64(1), a.scriptEvaluate(scriptsA, medallionRelease, []string{key}, idA)...)
	a.want(int64(0), a.scriptEvaluate(scriptsA, medallionRelease, []string{key}, idA)...)
	// Extending a lost lock: 0, which the handle reports as HandleLostToken.
	a.want(int64(0), a.scriptEvaluate(scriptsA, medallionExtend, []string{key}, idA, "30000")...)

	b.want("OK", "SET", key, idB, "EX", "30", "NX")
	b.want(idB, "GET", key)
}

// medallionReadAcquire: KEYS[1] the writer key, KEYS[2] the readers; ARGV[1] the id, ARGV[2]
// the expiry ms.
const medallionReadAcquire = `
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
redis.call('sadd', KEYS[2], ARGV[1])
if redis.call('pttl', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[2], ARGV[2])
end
return 1`

// medallionReadExtend: KEYS[1] the readers; ARGV[1] the id, ARGV[2] the expiry ms.
const medallionReadExtend = `
if redis.call('sismember', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 1`

// medallionReadRelease: KEYS[1] the readers; ARGV[1] the id. No reply.
const medallionReadRelease = `redis.call('srem', KEYS[1], ARGV[1])`

// medallionWriteAcquire: KEYS[1] the writer key, KEYS[2] the readers; ARGV[1] the id, ARGV[2]
// the expiry ms.
const medallionWriteAcquire = `
local writer = redis.call('get', KEYS[1])
if writer ~= false and writer ~= ARGV[1] .. '_WRITERWAITING' then
  return 0
end
if redis.call('scard', KEYS[2]) == 0 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  return 1
end
if writer ~= false then
  redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0`

// TestMedallionReaderWriterLock: two readers share it; a writer's first try fails, it takes the
// writer-waiting lock, which keeps a new reader out while the writer's retries fail until the
// readers have released; then the write lock, a reader and a second writer refused, extend and
// release, and the refused reader acquiring.
func TestMedallionReaderWriterLock(t *testing.T) {
	onBoth(t, testMedallionReaderWriterLock)
}

func testMedallionReaderWriterLock(t *testing.T, s server) {
	const (
		readers = "medallion-rw.readers"
		writer  = "medallion-rw.writer"
		idR1    = "build-07_4182_0a1b2c3d4e5f60718293a4b5c6d7e8f9"
		idR2    = "build-09_733_1b2c3d4e5f60718293a4b5c6d7e8f90a"
		idR3    = "build-09_733_2c3d4e5f60718293a4b5c6d7e8f90a1b"
		idW     = "build-11_95_3d4e5f60718293a4b5c6d7e8f90a1b2c"
		idW2    = "build-11_95_4e5f60718293a4b5c6d7e8f90a1b2c3d"
		expiry  = "30000"
	)
	c := dial(t, s.addr)
	loaded := map[string]script{}
	read := func(id string) []string {
		return c.scriptEvaluate(loaded, medallionReadAcquire, []string{writer, readers}, id, expiry)
	}
	write := func(id string) []string {
		return c.scriptEvaluate(loaded, medallionWriteAcquire, []string{writer, readers}, id, expiry)
	}

	c.want(int64(1), read(idR1)...)
	c.want(int64(1), read(idR2)...)
	c.want(int64(2), "SCARD", readers)
	c.pttlIn(readers, 29000, 30000)

	// The writer's first try, then its waiting lock.
	c.want(int64(0), write(idW)...)
	c.want(int64(0), "EXISTS", writer)
	c.want("OK", "SET", writer, idW+"_WRITERWAITING", "EX", "30", "NX")
	c.want(int64(0), read(idR3)...) // no new readers while a writer waits
	c.want(int64(0), "SISMEMBER", readers, idR3)
	c.want(int64(0), write(idW2)...) // nor another writer
	// Retries while readers remain: 0, and the waiting lock's expiry renewed (shortened here
	// first, to see it renewed).
	c.want(int64(1), "PEXPIRE", writer, "5000")
	c.want(int64(0), write(idW)...)
	c.pttlIn(writer, 29000, 30000)

	// The readers extend and release.
	c.want(int64(1), c.scriptEvaluate(loaded, medallionReadExtend, []string{readers}, idR1, expiry)...)
	c.want(int64(0), c.scriptEvaluate(loaded, medallionReadExtend, []string{readers}, idR3, expiry)...)
	c.want(nil, c.scriptEvaluate(loaded, medallionReadRelease, []string{readers}, idR1)...)
	c.want(int64(0), write(idW)...)
	c.want(nil, c.scriptEvaluate(loaded, medallionReadRelease, []string{readers}, idR2)...)
	c.want(nil, c.scriptEvaluate(loaded, medallionReadRelease, []string{readers}, idR2)...) // a no-op
	c.want(int64(0), "EXISTS", readers)

	// The waiting lock becomes the write lock.
	c.want(int64(1), write(idW)...)
	c.want(idW, "GET", writer)
	c.pttlIn(writer, 29000, 30000)
	c.want(int64(0), read(idR3)...)
	c.want(int64(0), write(idW2)...)
	c.want(int64(1), c.scriptEvaluate(loaded, medallionExtend, []string{writer}, idW, expiry)...)
	c.want(int64(0), c.scriptEvaluate(loaded, medallionRelease, []string{writer}, idW2)...)
	c.want(int64(1), c.scriptEvaluate(loaded, medallionRelease, []string{writer}, idW)...)

	// Free again: the refused reader acquires, and a writer's outright try fails on it.
	c.want(int64(1), read(idR3)...)
	c.want(int64(0), write(idW2)...)
	c.want(int64(0), "EXISTS", writer)
}

// medallionSemAcquire: KEYS[1] the set; ARGV[1] the max count, ARGV[2] the expiry ms, ARGV[3]
// the id, ARGV[4] the set's expiry ms.
const medallionSemAcquire = `
redis.replicate_commands()
local clock = redis.call('time')
local nowMs = tonumber(clock[1]) * 1000.0 + tonumber(clock[2]) / 1000.0
redis.call('zremrangebyscore', KEYS[1], '-inf', nowMs)
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('zadd', KEYS[1], nowMs + tonumber(ARGV[2]), ARGV[3])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[4]) then
  redis.call('pexpire', KEYS[1], ARGV[4])
end
return 1`

// medallionSemExtend: KEYS[1] the set; ARGV[1] the expiry ms, ARGV[2] the id, ARGV[3] the
// set's expiry ms.
const medallionSemExtend = `
redis.replicate_commands()
local clock = redis.call('time')
local nowMs = tonumber(clock[1]) * 1000.0 + tonumber(clock[2]) / 1000.0
local changed = redis.call('zadd', KEYS[1], 'XX', 'CH', nowMs + tonumber(ARGV[1]), ARGV[2])
if redis.call('pttl', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return changed`

// TestMedallionRedisSemaphore: two of two permits taken, a third refused, GetCurrentCount,
// extend by a holder and by a stranger, release letting the third in, and a holder whose
// entry expired purged by the next acquirer's busy-wait.
func TestMedallionRedisSemaphore(t *testing.T) {
	onBoth(t, testMedallionRedisSemaphore)
}

func testMedallionRedisSemaphore(t *testing.T, s server) {
	const (
		key    = "medallion-sem"
		idA    = "build-07_4182_5f60718293a4b5c6d7e8f90a1b2c3d4e"
		idB    = "build-07_4182_60718293a4b5c6d7e8f90a1b2c3d4e5f"
		idC    = "build-09_733_718293a4b5c6d7e8f90a1b2c3d4e5f60"
		expiry = "30000"
		setTTL = "90000" // 3 × expiry
	)
	c := dial(t, s.addr)
	loaded := map[string]script{}
	acquire := func(set, id, max, expiryMs, setMs string) []string {
		return c.scriptEvaluate(loaded, medallionSemAcquire, []string{set}, max, expiryMs, id, setMs)
	}

	c.want(int64(1), acquire(key, idA, "2", expiry, setTTL)...)
	c.want(int64(1), acquire(key, idB, "2", expiry, setTTL)...)
	c.want(int64(0), acquire(key, idC, "2", expiry, setTTL)...)
	c.want(int64(2), "ZCARD", key) // GetCurrentCount: 2 - 2
	c.pttlIn(key, 89000, 90000)
	// Each holder's deadline is the server's now plus the expiry.
	clock, _ := c.do("TIME").([]any)
	if len(clock) != 2 {
		t.Fatalf("TIME: got %s", show(clock))
	}
	score, _ := c.do("ZSCORE", key, idA).(string)
	if ok := scoreWithin(score, clock, 29000, 30000); !ok {
		t.Fatalf("ZSCORE %s %s: %q, want TIME %s + up to 30000 ms", key, idA, score, show(clock))
	}

	// Extend: 1 for a holder (its score changed), 0 for a stranger, who is not added.
	c.want(int64(1), c.scriptEvaluate(loaded, medallionSemExtend, []string{key}, expiry, idA, setTTL)...)
	c.want(int64(0), c.scriptEvaluate(loaded, medallionSemExtend, []string{key}, expiry, idC, setTTL)...)
	c.want(nil, "ZSCORE", key, idC)

	// Release is ZREM; the third comer's next busy-wait attempt gets in.
	c.want(int64(1), "ZREM", key, idA)
	c.want(int64(0), "ZREM", key, idA)
	c.want(int64(1), acquire(key, idC, "2", expiry, setTTL)...)
	c.want(int64(2), "ZCARD", key)

	// A holder with a 200 ms expiry that never extends: a waiter's attempts fail until its
	// deadline passes, then the purge lets it in.
	const short = "medallion-sem-short"
	c.want(int64(1), acquire(short, idA, "1", "200", "600")...)
	c.want(int64(0), acquire(short, idB, "1", "200", "600")...)
	testutil.WaitFor(t, waitBound, func() error {
		if got := c.do(acquire(short, idB, "1", "200", "600")...); got != int64(1) {
			return errorf("acquire after the holder's expiry: got %s, want 1", show(got))
		}
		return nil
	})
	c.want([]any{idB}, "ZRANGE", short, "0", "-1")
}

// scoreWithin reports whether score (ms, maybe fractional) is within (lo, hi] ms after the
// TIME reply clock.
func scoreWithin(score string, clock []any, lo, hi float64) bool {
	sec, err1 := strconv.ParseFloat(fmt.Sprint(clock[0]), 64)
	usec, err2 := strconv.ParseFloat(fmt.Sprint(clock[1]), 64)
	ms, err3 := strconv.ParseFloat(score, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return false
	}
	d := ms - (sec*1000 + usec/1000)
	return d > lo && d <= hi
}
