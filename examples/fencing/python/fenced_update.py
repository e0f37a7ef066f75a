"""Fencing with redis-py and psycopg2: a conditional UPDATE refuses a stale holder's write.

Worker 1 takes the lock and stalls past its lease (here it just does not write until the lock
channel says its lock is lost); worker 2 takes the lock and writes with its larger token; worker
1's write with its old token then matches no row. Exits 0 only if that write was refused and the
row holds worker 2's value.

    RAFTLOCK_ADDR=127.0.0.1:6379 PG_DSN=postgresql://user@127.0.0.1:5432/db python3 fenced_update.py
"""
import os
import sys
import time

import psycopg2
import redis

KEY = "fencing-python"  # the lock's key and the row's id


def fenced_update(pg, row_id, token, value):
    """Sets the row's value unless it holds a larger token; False when refused as stale."""
    with pg.cursor() as cur:
        cur.execute(
            "UPDATE fencing_example SET value = %s, token = %s WHERE id = %s AND token <= %s",
            (value, token, row_id, token),
        )
        updated = cur.rowcount == 1
    pg.commit()
    return updated


def wait_lost(sub, token, timeout):
    """Waits for "lost <token> <reason>" on the lock's channel; returns the reason."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = sub.get_message(timeout=0.1)
        if m and m["type"] == "message":
            f = m["data"].decode().split()
            if f[:2] == ["lost", str(token)]:
                return f[2]
    raise TimeoutError(f"no 'lost {token}' on __lock__:{KEY} within {timeout}s")


def main():
    host, port = os.environ["RAFTLOCK_ADDR"].rsplit(":", 1)
    r = redis.Redis(host=host, port=int(port), socket_timeout=10)
    pg = psycopg2.connect(os.environ["PG_DSN"], connect_timeout=10)
    with pg.cursor() as cur:  # the demo's table and a fresh row (a real row's token never goes down)
        cur.execute("CREATE TABLE IF NOT EXISTS fencing_example"
                    " (id text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)")
        cur.execute("INSERT INTO fencing_example VALUES (%s, 'initial', 0)"
                    " ON CONFLICT (id) DO UPDATE SET value = 'initial', token = 0", (KEY,))
    pg.commit()
    sub = r.pubsub(ignore_subscribe_messages=True)
    sub.subscribe(f"__lock__:{KEY}")

    token1 = r.execute_command("LOCK", KEY, 500, "OWNER", "worker-1")
    print(f"worker 1: LOCK {KEY} 500 -> token {token1}; stalls before its write")
    reason = wait_lost(sub, token1, 10)
    print(f"__lock__:{KEY}: lost {token1} {reason}")
    token2 = r.execute_command("LOCK", KEY, 5000, "OWNER", "worker-2", "WAIT", 5000)
    print(f"worker 2: LOCK {KEY} 5000 -> token {token2}")
    print(f"worker 2: fenced_update(token {token2}) -> {fenced_update(pg, KEY, token2, 'worker 2')}")
    stale_accepted = fenced_update(pg, KEY, token1, "worker 1")
    print(f"worker 1: fenced_update(token {token1}) -> {stale_accepted}")
    r.execute_command("UNLOCK", KEY, token2)
    with pg.cursor() as cur:
        cur.execute("SELECT value, token FROM fencing_example WHERE id = %s", (KEY,))
        value, token = cur.fetchone()
    print(f"row {KEY}: {value!r}, token {token}")
    sub.close()
    r.close()
    pg.close()
    if stale_accepted or value != "worker 2" or token != token2:
        print("FAIL: the stale write was not refused")
        return 1
    print("OK: the stale write was refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
