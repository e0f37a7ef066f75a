// Package conformance checks, over RESP on a real socket, that the lock recipes of client
// libraries that cannot be installed on the build machine (Java, .NET, Python, Ruby) work on
// raftlock: each test speaks the exact command sequence one library sends for its lock
// operations, with Lua scripts of our own that do what the library's do, and asserts what the
// library would conclude from the replies. Every test runs three times with the same
// assertions: against a real redis-server (which proves the test reproduces the library), a
// single raftlock node, and a follower of a 3-node raftlock cluster (every connection forwarded
// to the leader, pub/sub delivered by the follower's own apply).
//
// Libraries, the source read, and what is covered:
//   - Redisson 4.7.0-62 (66863978): RLock tryLock with a lease, re-entry, a contender told the
//     pttl, the watchdog's renewal script, unlock with its latch and publish, a subscribed waiter
//     woken, forceUnlock, EVALSHA after NOSCRIPT; RFencedLock's INCR token (TestRedissonRLock).
//     RReadWriteLock: readers sharing the hash's mode with their rwlock_timeout keys, a writer
//     told the pttl until the last reader's release message, re-entry, a read entry under the
//     write lock and the write unlock back to read mode, the read watchdog, latches, forceUnlock
//     (TestRedissonReadWriteLock). RFairLock: the queue list and deadline sorted set, a second
//     waiter behind the first, the release waking the head only, a waiter giving up, one past
//     its deadline dropped (TestRedissonFairLock).
//     RSemaphore: trySetPermits, tryAcquire's DECRBY, release's INCRBY and publish waking a
//     waiter, releaseIfExists, addPermits, drainPermits (TestRedissonSemaphore). RCountDownLatch:
//     trySetCount, countDown to the zero message, delete (TestRedissonCountDownLatch).
//   - Spring Integration RedisLockRegistry 6.5.10 (5624e08f) and 7.2.0-M1-3 (f369e899), with
//     spring-data-redis 4.2.0-M1-1 (a1bd5674): obtain (EVALSHA, NOSCRIPT, EVAL), spin retries,
//     renew and unlock scripts, 7.x SET IFEQ / DELEX probes and their fallback, an expired lease
//     at unlock, pub/sub mode's PSUBSCRIBE and unlock message (TestSpringRedisLockRegistry).
//   - StackExchange.Redis 3.1.31 (90bbf1fc): the pipelined connect handshake of the interactive
//     and subscription connections, LockTake (SET EX/PX NX), LockQuery, LockExtend and
//     LockRelease as WATCH/GET/MULTI/EXEC or UNWATCH, an EXEC aborted by a takeover
//     (TestStackExchangeRedisLock).
//   - python-redis-lock 4.0.1-5 (e448f12f): acquire (SET NX EX), a waiter blocked in BLPOP on the
//     signal list woken by release, extend (0/1/2), release (DEL, LPUSH, PEXPIRE the signal,
//     DEL the lock), reset_all (TestPythonRedisLock).
//   - redlock-rb 2.0.6 (f176e574): lock, extend (allow_new_lock yes/no), unlock and pttl scripts by
//     EVALSHA after NOSCRIPT and SCRIPT LOAD, a contender's failed lock and best-effort unlock
//     (TestRedlockRb).
//   - ShedLock 7.9.0-14 (2495b140), the Jedis and Spring providers: lock (SET NX PX), extend and
//     early unlock (SET XX PX, or the safeUpdate PEXPIRE script), unlock (DEL, or the safeUpdate
//     script) (TestShedLockRedis).
//   - Medallion DistributedLock.Redis 1.1.1 (madelson/DistributedLock 2.8.1, 3da3eaf4), over
//     StackExchange.Redis's SCRIPT LOAD then EVALSHA: RedisDistributedLock's SET EX NX, extend
//     and release scripts (TestMedallionRedisLock); RedisDistributedReaderWriterLock's reader
//     set and writer key, the writer-waiting lock keeping new readers out, the upgrade once the
//     readers left (TestMedallionReaderWriterLock);
//     RedisDistributedSemaphore's sorted set scored on the server's TIME, ZADD XX CH extend,
//     ZREM release, an expired holder purged (TestMedallionRedisSemaphore).
//
// Not covered yet: Redisson's RPermitExpirableSemaphore, RSpinLock, RMultiLock/RedLock and the
// fair lock's and semaphores' blocking waits past one wake-up; Medallion's multi-database
// RedLock quorum (one logical endpoint is the migration, DESIGN.md §7).
package conformance
