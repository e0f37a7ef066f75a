"""django-redis (Debian's python3-django-redis, on python3-django) against raftlock: Django's cache
configured with django_redis.cache.RedisCache, its cache.lock (redis-py's Lock underneath) and
cache.add (SET NX PX), for the client matrix (tests/clients/run.sh).

Environment: RAFTLOCK_ADDRS=host:port,... (the first is the node the holder's cache dials; the
rival's cache dials the second, if any; unset: every test skips). RAFTLOCK_MATRIX: a file to which
each scenario appends "library<TAB>scenario<TAB>pass|fail|skip<TAB>detail".

Run: python3 -m unittest -v test_django_redis  (in tests/python, Debian's /usr/bin/python3)
"""

import os
import secrets
import threading
import time
import unittest

import django
from django.conf import settings

from test_redis_lock import ADDRS, scenario as _scenario

LIB = "python/django-redis"


def scenario(name, needs=()):
    return _scenario(name, needs, lib=LIB)


def _configure():
    if not ADDRS or settings.configured:
        return
    (h1, p1), (h2, p2) = ADDRS
    opts = {"SOCKET_CONNECT_TIMEOUT": 5, "SOCKET_TIMEOUT": 10}
    settings.configure(
        CACHES={
            "default": {"BACKEND": "django_redis.cache.RedisCache",
                        "LOCATION": f"redis://{h1}:{p1}/0", "OPTIONS": opts},
            "rival": {"BACKEND": "django_redis.cache.RedisCache",
                      "LOCATION": f"redis://{h2}:{p2}/0", "OPTIONS": opts},
        }
    )
    django.setup()


_configure()


def unique_key(*parts):
    return ":".join(("cm", "django-redis") + parts) + ":" + secrets.token_hex(4)


@unittest.skipUnless(ADDRS, "RAFTLOCK_ADDRS is not set: no server to test")
class DjangoRedisTest(unittest.TestCase):
    failed = set()

    @classmethod
    def setUpClass(cls):
        from django.core.cache import caches
        from django_redis import get_redis_connection

        cls.a, cls.b = caches["default"], caches["rival"]
        cls.raw = get_redis_connection("default")  # the holder's node, for inspection
        cls.key = unique_key("lock")
        cls.lock = None

    def full_key(self, key):
        return self.a.make_key(key)  # ":1:key": the cache's prefix and version

    def expect_held(self, key, token, lo_ms, hi_ms):
        v = self.raw.get(key)
        self.assertIsNotNone(v, f"GET {key}: nil; want it held")
        if token is not None:
            self.assertEqual(v, token, f"GET {key} = {v!r}; want the holder's token {token!r}")
        d = self.raw.pttl(key)
        self.assertTrue(lo_ms < d <= hi_ms, f"PTTL {key} = {d}; want in ({lo_ms}, {hi_ms}]")

    @scenario("acquire")
    def test_1_acquire(self):
        lk = self.a.lock(self.key, timeout=10)
        self.assertTrue(lk.acquire(blocking=False), "acquire a free lock")
        type(self).lock = lk
        self.expect_held(self.full_key(self.key), lk.local.token, 5000, 10000)

    @scenario("contend", needs=("acquire",))
    def test_2_contend(self):
        other = self.b.lock(self.key, timeout=10)
        got = other.acquire(blocking=False)
        if got:
            other.release()
        self.assertFalse(got, "a rival acquired a held lock")
        self.assertFalse(other.acquire(blocking=True, blocking_timeout=0.3))
        self.expect_held(self.full_key(self.key), self.lock.local.token, 0, 10000)

    @scenario("extend", needs=("acquire",))
    def test_3_extend(self):
        self.assertTrue(self.lock.extend(20, replace_ttl=True))
        self.expect_held(self.full_key(self.key), self.lock.local.token, 19000, 20000)

    @scenario("release", needs=("acquire",))
    def test_4_release(self):
        self.lock.release()
        self.assertIsNone(self.raw.get(self.full_key(self.key)))
        nxt = self.b.lock(self.key, timeout=10)
        self.assertTrue(nxt.acquire(blocking=False), "a rival after the release")
        nxt.release()

    @scenario("wait")
    def test_5_wait(self):
        key = unique_key("wait")
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
            self.assertTrue(got, "a waiting rival did not get the lock once released")
            self.assertGreaterEqual(at, released[0], "the waiter got the lock before the release")
        finally:
            th.join()
            if waiter.owned():
                waiter.release()

    @scenario("add")
    def test_6_add(self):
        key = unique_key("add")
        self.assertTrue(self.a.add(key, "first", timeout=10), "add on a free key")
        self.assertFalse(self.b.add(key, "second", timeout=10), "a second add")
        self.assertEqual(self.b.get(key), "first")
        d = self.raw.pttl(self.full_key(key))
        self.assertTrue(9000 < d <= 10000, f"PTTL = {d}; want in (9000, 10000]")
        self.assertEqual(self.b.ttl(key), 10)
        self.assertTrue(self.a.delete(key))
        self.assertTrue(self.b.add(key, "third", timeout=10), "add after delete")
        self.b.delete(key)

    @scenario("expiry")
    def test_7_expiry(self):
        key = unique_key("expiry")
        start = time.monotonic()
        self.assertTrue(self.a.add(key, "old", timeout=1))
        while not self.b.add(key, "new", timeout=10):
            self.assertLess(time.monotonic() - start, 6, "the 1 s entry has not ended")
            time.sleep(0.05)
        took = time.monotonic() - start
        self.assertGreaterEqual(took, 1.0, f"add succeeded {took:.3f} s into a 1 s entry: early")
        self.assertEqual(self.a.get(key), "new")
        self.b.delete(key)


if __name__ == "__main__":
    unittest.main()
