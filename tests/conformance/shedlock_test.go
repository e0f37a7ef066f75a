package conformance

import (
	"testing"

	"github.com/raftlock/raftlock/tests/testutil"
)

// ShedLock's Redis providers (github.com/lukas-krecan/ShedLock), read at 7.9.0-14 (2495b140):
//   - providers/redis/shedlock-support-redis/.../support/InternalRedisLockProvider.java: the key
//     "job-lock:<env>:<name>" (env "default"), the value "ADDED:<iso time>@<host>:<uuid>"; lock is
//     a SET NX PX lockAtMostFor; extend, and unlock before lockAtLeastFor has passed, set the
//     key's expiry: with safeUpdate a script (GET equals value -> PEXPIRE, 1, else 0), without it
//     SET XX PX; unlock after lockAtLeastFor: with safeUpdate a script (GET equals value -> DEL),
//     without it a plain DEL. A nil SET reply or a 0 from the script means not locked/extended.
//   - .../jedis4/JedisLockProvider.java sends SET key value NX PX ms and EVAL;
//     .../spring/RedisLockProvider.java (spring-data-redis over Lettuce) SET key value PX ms NX
//     and, for scripts, EVALSHA then EVAL on NOSCRIPT.
//
// The scripts are ours, equivalent to the provider's.

// shedlockUpdate: KEYS[1] the key; ARGV[1] the value, ARGV[2] ms.
const shedlockUpdate = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('pexpire', KEYS[1], ARGV[2])`

// shedlockDelete: KEYS[1] the key; ARGV[1] the value.
const shedlockDelete = `
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
return redis.call('del', KEYS[1])`

// TestShedLockRedis: the Jedis provider (safeUpdate off) and the Spring provider (safeUpdate
// on): lock, a second node refused, extend, unlock within and after lockAtLeastFor, extend of a
// lock that expired.
func TestShedLockRedis(t *testing.T) {
	onBoth(t, testShedLockRedis)
}

func testShedLockRedis(t *testing.T, s server) {
	const (
		jedisKey  = "job-lock:default:nightly-export"
		springKey = "job-lock:default:hourly-cleanup"
		valueA    = "ADDED:2026-12-01T11:00:00.000Z@node-a:9b1e6f2c-3d4a-4e5b-8c7d-0a1b2c3d4e5f"
		valueB    = "ADDED:2026-12-01T11:00:00.012Z@node-b:1f2e3d4c-5b6a-4978-8a9b-0c1d2e3f4a5b"
	)
	a, b := dial(t, s.addr), dial(t, s.addr)

	// Jedis, safeUpdate off.
	a.want("OK", "SET", jedisKey, valueA, "NX", "PX", "30000")
	b.want(nil, "SET", jedisKey, valueB, "NX", "PX", "30000")
	if s.raftlock {
		a.lockToken(jedisKey)
	}
	a.want("OK", "SET", jedisKey, valueA, "XX", "PX", "60000") // extend
	a.pttlIn(jedisKey, 59000, 60000)
	a.want("OK", "SET", jedisKey, valueA, "XX", "PX", "150") // unlock within lockAtLeastFor
	a.want(valueA, "GET", jedisKey)
	testutil.WaitFor(t, waitBound, func() error {
		if got := b.do("SET", jedisKey, valueB, "NX", "PX", "30000"); got != "OK" {
			return errorf("SET NX after lockAtLeastFor: %s", show(got))
		}
		return nil
	})
	a.want(nil, "SET", "job-lock:default:never-locked", valueA, "XX", "PX", "60000") // extend fails
	b.want(int64(1), "DEL", jedisKey)                                                // unlock

	// Spring, safeUpdate on: scripts by EVALSHA, EVAL after NOSCRIPT.
	a.want("OK", "SET", springKey, valueA, "PX", "30000", "NX")
	b.want(nil, "SET", springKey, valueB, "PX", "30000", "NX")
	if got := a.do(append([]string{"EVALSHA", sha1hex(shedlockUpdate)}, evalArgs([]string{springKey}, valueA, "60000")...)...); !isErr(got, "NOSCRIPT") {
		t.Fatalf("EVALSHA of the update script: got %s, want NOSCRIPT", show(got))
	}
	a.want(int64(1), append([]string{"EVAL", shedlockUpdate}, evalArgs([]string{springKey}, valueA, "60000")...)...)
	a.pttlIn(springKey, 59000, 60000)
	b.want(int64(0), append([]string{"EVALSHA", sha1hex(shedlockUpdate)}, evalArgs([]string{springKey}, valueB, "60000")...)...)
	b.want(int64(0), append([]string{"EVAL", shedlockDelete}, evalArgs([]string{springKey}, valueB)...)...)
	a.want(int64(1), append([]string{"EVAL", shedlockDelete}, evalArgs([]string{springKey}, valueA)...)...)
	a.want(int64(0), "EXISTS", springKey)
	a.want(int64(0), append([]string{"EVALSHA", sha1hex(shedlockUpdate)}, evalArgs([]string{springKey}, valueA, "60000")...)...)
}
