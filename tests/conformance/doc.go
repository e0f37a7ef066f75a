// Package conformance checks, over RESP on a real socket, that the lock recipes of client
// libraries that cannot be installed on the build machine (Java, .NET, Python, Ruby) work on
// raftlock: each test speaks the exact command sequence one library sends for its lock
// operations, with Lua scripts of our own that do what the library's do, and asserts what the
// library would conclude from the replies. Every test runs twice with the same assertions,
// against a real redis-server (which proves the test reproduces the library) and a raftlock node.
// Tests whose commands raftlock does not have yet skip their raftlock half, naming the command.
//
// Libraries, the source read, and what is covered:
//   - Redisson 4.7.0-62 (66863978): RLock tryLock with a lease, re-entry, a contender told the
//     pttl, the watchdog's renewal script, unlock with its latch and publish, a subscribed waiter
//     woken, forceUnlock, EVALSHA after NOSCRIPT; RFencedLock's INCR token (TestRedissonRLock).
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
//     DEL the lock), reset_all (TestPythonRedisLock; skips on raftlock until lists are in).
//   - redlock-rb 2.0.6 (f176e574): lock, extend (allow_new_lock yes/no), unlock and pttl scripts by
//     EVALSHA after NOSCRIPT and SCRIPT LOAD, a contender's failed lock and best-effort unlock
//     (TestRedlockRb).
//   - ShedLock 7.9.0-14 (2495b140), the Jedis and Spring providers: lock (SET NX PX), extend and
//     early unlock (SET XX PX, or the safeUpdate PEXPIRE script), unlock (DEL, or the safeUpdate
//     script) (TestShedLockRedis).
//
// Not covered yet: Redisson RReadWriteLock, RFairLock and RSemaphore; Medallion
// (madelson/DistributedLock).
package conformance
