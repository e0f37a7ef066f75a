"""redis-py's Lock (Debian's python3-redis) against raftlock: the scenarios of the client matrix
(tests/clients/run.sh), plus redis-py's reacquire.

The same scenarios run again on redis-py's cluster-mode client, RedisCluster
("python/redis-py-cluster").

Environment: RAFTLOCK_ADDRS=host:port,... (the first is the node the holder dials; the second
owner dials the second, if any; unset: every test skips). RAFTLOCK_CLUSTER_ADDRS: the same for
the cluster-mode client (default RAFTLOCK_ADDRS; "-" skips it; against Redis a cluster-enabled
redis-server). RAFTLOCK_MATRIX: a file to which each scenario appends
"library<TAB>scenario<TAB>pass|fail|skip<TAB>detail".

Run: python3 -m unittest -v tests/python/test_redis_lock.py  (Debian's /usr/bin/python3)
"""

import functools
import os
import secrets
import threading
import time
import unittest

import redis
from redis.cluster import RedisCluster
from redis.exceptions import LockError, LockNotOwnedError

LIB = "python/redis-py"
CLUSTER_LIB = "python/redis-py-cluster"


def _addrs(name="RAFTLOCK_ADDRS"):
    v = os.environ.get(name, "")
    if name == "RAFTLOCK_CLUSTER_ADDRS" and not v:
        v = os.environ.get("RAFTLOCK_ADDRS", "")
    if not v or v == "-":
        return None
    out = []
    for a in v.split(","):
        host, _, port = a.rpartition(":")
        out.append((host, int(port)))
    return out[0], (out[1] if len(out) > 1 else out[0])


ADDRS = _addrs()
CLUSTER_ADDRS = _addrs("RAFTLOCK_CLUSTER_ADDRS")


def record(scenario, result, detail="", lib=LIB):
    path = os.environ.get("RAFTLOCK_MATRIX")
    if not path:
        return
    detail = " ".join(str(detail).split())[:300]
    with open(path, "a") as f:
        f.write(f"{lib}\t{scenario}\t{result}\t{detail}\n")


def unique_key(*parts):
    return "cm:" + ":".join(("redis-py",) + parts) + ":" + secrets.token_hex(4)


def scenario(name, needs=(), lib=None):
    """Runs a test as matrix scenario `name` of `lib` (default: the test class's LIB), after the
    scenarios in `needs` passed."""

    def wrap(fn):
        @functools.wraps(fn)
        def run(self):
            lib_ = lib or type(self).LIB
            for n in needs:
                if n in type(self).failed:
                    type(self).failed.add(name)
                    record(name, "skip", f"not run: {n} failed", lib_)
                    self.skipTest(f"not run: {n} failed")
            try:
                fn(self)
            except unittest.SkipTest:
                raise
            except BaseException as e:
                type(self).failed.add(name)
                record(name, "fail", f"{type(e).__name__}: {e}", lib_)
                raise
            record(name, "pass", lib=lib_)

        return run

    return wrap


@unittest.skipUnless(ADDRS, "RAFTLOCK_ADDRS is not set: no server to test")
class RedisPyLockTest(unittest.TestCase):
    """The scenarios run in order (unittest sorts the names) and share the first lock."""

    LIB = LIB
    failed = set()

    @classmethod
    def setUpClass(cls):
        (h1, p1), (h2, p2) = ADDRS
        cls.a = redis.Redis(host=h1, port=p1, socket_timeout=10)
        cls.b = redis.Redis(host=h2, port=p2, socket_timeout=10)
        cls.key = unique_key()
        cls.lock = None

    @classmethod
    def tearDownClass(cls):
        cls.a.close()
        cls.b.close()

    def expect_held(self, key, token, lo_ms, hi_ms):
        v = self.a.get(key)
        self.assertIsNotNone(v, f"GET {key}: nil; want the lock held")
        if token is not None:
            self.assertEqual(v, token, f"GET {key} = {v!r}; want the holder's token {token!r}")
        d = self.a.pttl(key)
        self.assertTrue(lo_ms < d <= hi_ms, f"PTTL {key} = {d}; want in ({lo_ms}, {hi_ms}]")

    @scenario("acquire")
    def test_1_acquire(self):
        lk = self.a.lock(self.key, timeout=10)
        self.assertTrue(lk.acquire(blocking=False), "acquire a free lock")
        type(self).lock = lk
        self.assertTrue(lk.owned() and lk.locked())
        self.expect_held(self.key, lk.local.token, 5000, 10000)

    @scenario("contend", needs=("acquire",))
    def test_2_contend(self):
        other = self.b.lock(self.key, timeout=10)
        start = time.monotonic()
        got = other.acquire(blocking=False)
        if got:
            other.release()
        self.assertFalse(got, "a second owner acquired a held lock")
        self.assertFalse(other.owned())
        self.assertLess(time.monotonic() - start, 5)
        # A blocking acquire with a short timeout gives up too.
        self.assertFalse(other.acquire(blocking=True, blocking_timeout=0.3))
        self.expect_held(self.key, self.lock.local.token, 0, 10000)

    @scenario("extend", needs=("acquire",))
    def test_3_extend(self):
        time.sleep(1.5)  # the lease runs down below 8.5 s ...
        self.expect_held(self.key, self.lock.local.token, 0, 8500)
        self.assertTrue(self.lock.extend(10, replace_ttl=True))
        # ... and is back near 10 s: renewed from now.
        self.expect_held(self.key, self.lock.local.token, 9000, 10000)
        # Without replace_ttl, extend adds to the remaining lease.
        self.assertTrue(self.lock.extend(5))
        self.expect_held(self.key, self.lock.local.token, 13000, 15000)

    @scenario("reacquire", needs=("acquire",))
    def test_4_reacquire(self):
        # reacquire resets the lease to the lock's timeout (10 s) from now.
        self.assertTrue(self.lock.reacquire())
        self.expect_held(self.key, self.lock.local.token, 9000, 10000)

    @scenario("wrong-owner", needs=("acquire",))
    def test_5_wrong_owner(self):
        intruder = self.b.lock(self.key, timeout=10)
        intruder.local.token = b"intruder-" + secrets.token_hex(8).encode()
        with self.assertRaises(LockNotOwnedError):
            intruder.extend(60)
        with self.assertRaises(LockNotOwnedError):
            intruder.reacquire()
        with self.assertRaises(LockNotOwnedError):
            intruder.release()
        self.assertFalse(intruder.owned())
        self.expect_held(self.key, self.lock.local.token, 0, 10000)

    @scenario("release", needs=("acquire",))
    def test_6_release(self):
        token = self.lock.local.token
        self.lock.release()
        self.assertIsNone(self.a.get(self.key))
        # A second release: the token was dropped locally ...
        with self.assertRaises(LockError):
            self.lock.release()
        # ... and the server refuses the old token too.
        stale = self.a.lock(self.key, timeout=10)
        stale.local.token = token
        with self.assertRaises(LockNotOwnedError):
            stale.release()
        nxt = self.b.lock(self.key, timeout=10)
        self.assertTrue(nxt.acquire(blocking=False), "a second owner after the release")
        nxt.release()

    @scenario("wait")
    def test_7_wait(self):
        key = unique_key("wait")
        # Released from another thread: a thread-local token would not be seen there.
        holder = self.a.lock(key, timeout=10, thread_local=False)
        self.assertTrue(holder.acquire(blocking=False))
        released = []

        def release_later():
            time.sleep(0.3)
            released.append(time.monotonic())
            holder.release()

        th = threading.Thread(target=release_later)
        th.start()
        waiter = self.b.lock(key, timeout=10, sleep=0.05)
        try:
            got = waiter.acquire(blocking=True, blocking_timeout=5)
            at = time.monotonic()
            th.join()
            self.assertTrue(got, "a waiting second owner did not get the lock once released")
            self.assertGreaterEqual(at, released[0], "the waiter got the lock before the release")
            self.expect_held(key, waiter.local.token, 5000, 10000)
        finally:
            th.join()
            if waiter.owned():
                waiter.release()

    @scenario("expiry")
    def test_8_expiry(self):
        key = unique_key("expiry")
        ttl = 1.0
        start = time.monotonic()
        old = self.a.lock(key, timeout=ttl)
        self.assertTrue(old.acquire(blocking=False))
        nxt = self.b.lock(key, timeout=10)
        while not nxt.acquire(blocking=False):
            self.assertLess(time.monotonic() - start, ttl + 5, "the lease has not ended")
            time.sleep(0.05)
        try:
            took = time.monotonic() - start
            self.assertGreaterEqual(took, ttl, f"a second owner got the lock {took:.3f} s after a {ttl} s lease began: early")
            # (extend first: release drops the token locally even when the server refuses)
            with self.assertRaises(LockNotOwnedError):
                old.extend(10)
            with self.assertRaises(LockNotOwnedError):
                old.release()
            self.expect_held(key, nxt.local.token, 5000, 10000)
        finally:
            nxt.release()


@unittest.skipUnless(CLUSTER_ADDRS and int(os.environ.get("RAFTLOCK_DB", "0") or 0) == 0,
                     "RAFTLOCK_CLUSTER_ADDRS is not set (or a database other than 0 is tested)")
class RedisPyClusterLockTest(RedisPyLockTest):
    """The same scenarios on RedisCluster, which routes each key to the node CLUSTER SLOTS names
    and follows MOVED: each client is given one node to start from."""

    LIB = CLUSTER_LIB
    failed = set()

    @classmethod
    def setUpClass(cls):
        (h1, p1), (h2, p2) = CLUSTER_ADDRS
        cls.a = RedisCluster(host=h1, port=p1, socket_timeout=10)
        cls.b = RedisCluster(host=h2, port=p2, socket_timeout=10)
        cls.key = unique_key("cluster")
        cls.lock = None


if __name__ == "__main__":
    unittest.main()
