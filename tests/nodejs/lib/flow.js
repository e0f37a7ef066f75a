'use strict';
// The scenarios every library runs (the same as tests/clients/flow_test.go for Go), each a
// node:test subtest named as in the matrix, its result appended to $RAFTLOCK_MATRIX for
// tests/clients/run.sh.
//
// Environment: RAFTLOCK_ADDRS=host:port,... (the first is the node every library dials; the
// second owner dials the second, if any; unset: every test skips); RAFTLOCK_CLUSTER_ADDRS, the
// same for cluster-mode clients (addrs). RAFTLOCK_MATRIX: the file.

const fs = require('node:fs');
const crypto = require('node:crypto');
const assert = require('node:assert/strict');
const { describe, test, after } = require('node:test');
const Redis = require('ioredis');

class Refused extends Error {
  constructor(msg) { super(msg || 'refused: held by another owner'); this.name = 'Refused'; }
}
class NotHeld extends Error {
  constructor(msg) { super(msg || 'not held by this owner'); this.name = 'NotHeld'; }
}

// addrs reads RAFTLOCK_ADDRS, or for cluster-mode clients RAFTLOCK_CLUSTER_ADDRS (default
// RAFTLOCK_ADDRS; "-" skips them; against Redis, a cluster-enabled redis-server).
function addrs(cluster) {
  let v = process.env.RAFTLOCK_ADDRS;
  if (cluster) v = process.env.RAFTLOCK_CLUSTER_ADDRS || v;
  if (!v || v === '-') return null;
  const list = v.split(',').map((a) => {
    const i = a.lastIndexOf(':');
    return { host: a.slice(0, i), port: Number(a.slice(i + 1)) };
  });
  return { first: list[0], second: list[1] || list[0] };
}

function record(lib, scenario, result, detail) {
  const path = process.env.RAFTLOCK_MATRIX;
  if (!path) return;
  detail = String(detail || '').replace(/\s+/g, ' ').slice(0, 300);
  fs.appendFileSync(path, `${lib}\t${scenario}\t${result}\t${detail}\n`);
}

function uniqueKey(...parts) {
  return `cm:${parts.join(':')}:${crypto.randomBytes(4).toString('hex')}`;
}

function randomValue(prefix) {
  return prefix + crypto.randomBytes(8).toString('hex');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Reads a key's state with plain commands, independently of the library under test.
class Inspector {
  constructor(addr) {
    this.c = new Redis({ host: addr.host, port: addr.port, maxRetriesPerRequest: 1, enableOfflineQueue: true });
  }
  async expectHeld(key, want, minMs, maxMs) {
    const v = await this.c.get(key);
    assert.ok(v !== null, `GET ${key}: nil; want the lock held`);
    if (want !== undefined && want !== null) assert.equal(v, want, `GET ${key} = ${v}; want the holder's value ${want}`);
    const d = await this.c.pttl(key);
    assert.ok(d > minMs && d <= maxMs, `PTTL ${key} = ${d}; want in (${minMs}, ${maxMs}]`);
  }
  async expectFree(key) {
    const v = await this.c.get(key);
    assert.equal(v, null, `GET ${key} = ${v}; want the lock free`);
  }
  async waitFree(key, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if ((await this.c.get(key)) === null) return;
      assert.ok(Date.now() < deadline, `${key} still held ${timeoutMs} ms later`);
      await sleep(20);
    }
  }
  close() { this.c.disconnect(); }
}

// suite registers one library's scenarios. make() is called once, before the first scenario, and
// returns { a, b, close } where a and b are the first and second owner's lock clients:
//   acquire(key, ttlMs) -> handle (throws Refused when held by another owner)
//   handle: value, extend(ttlMs), release()  (throw NotHeld when not the holder)
//   optional on b: forge(key, value) -> handle; acquireWait(key, ttlMs, waitMs) -> handle
// opts.wait: the library can wait for a lock (the wait scenario runs).
// opts.keyOf(name): the key the library stores for the lock it calls name (default: name itself).
// opts.silentRelease: release() cannot tell a refused release from a successful one (it resolves
// either way); the scenarios then check, instead of a NotHeld rejection, that it changed nothing.
// opts.cluster: the library runs a cluster-mode client, given RAFTLOCK_CLUSTER_ADDRS.
function suite(lib, make, opts = {}) {
  const where = addrs(opts.cluster);
  describe(lib, { skip: where ? false : 'RAFTLOCK_ADDRS is not set: no server to test' }, () => {
    if (!where) return;
    let env; // { a, b, close }
    let inspector;
    const failed = new Set();
    const name = uniqueKey(lib.replace(/\//g, '-'));
    const keyOf = opts.keyOf || ((k) => k);
    const key = keyOf(name);
    let h;
    // refusedRelease: a release that must not free anyone's lock.
    const refusedRelease = (handle, what) => (opts.silentRelease
      ? handle.release()
      : assert.rejects(handle.release(), NotHeld, what));

    after(async () => {
      if (env && env.close) await env.close();
      if (inspector) inspector.close();
    });

    const scenario = (name, needs, fn, opts = {}) => {
      test(name, { timeout: opts.timeout || 30000 }, async (t) => {
        for (const n of needs) {
          if (failed.has(n)) {
            failed.add(name);
            record(lib, name, 'skip', `not run: ${n} failed`);
            t.skip(`not run: ${n} failed`);
            return;
          }
        }
        try {
          if (!env) {
            inspector = new Inspector(where.first);
            env = await make(where);
          }
          await fn();
          record(lib, name, 'pass', '');
        } catch (e) {
          failed.add(name);
          record(lib, name, 'fail', e && e.message);
          throw e;
        }
      });
    };

    scenario('acquire', [], async () => {
      h = await env.a.acquire(name, 10000);
      await inspector.expectHeld(key, h.value, 5000, 10000);
    });

    scenario('contend', ['acquire'], async () => {
      const start = Date.now();
      let h2;
      try {
        h2 = await env.b.acquire(name, 10000);
      } catch (e) {
        if (!(e instanceof Refused)) throw new Error(`a second owner's try: ${e.message}; want a refusal`);
      }
      if (h2) {
        await h2.release().catch(() => {});
        assert.fail(`a second owner acquired a held lock (value ${h2.value})`);
      }
      assert.ok(Date.now() - start < 5000, `the refusal took ${Date.now() - start} ms`);
      await inspector.expectHeld(key, h.value, 0, 10000);
    });

    scenario('extend', ['acquire'], async () => {
      await sleep(1500); // the lease runs down below 8.5 s ...
      await inspector.expectHeld(key, h.value, 0, 8500);
      await h.extend(10000);
      // ... and is back near 10 s: renewed from now.
      await inspector.expectHeld(key, h.value, 9000, 10000);
    });

    scenario('wrong-owner', ['acquire'], async () => {
      if (env.b.forge) {
        const intruder = env.b.forge(name, randomValue('intruder-'));
        await assert.rejects(intruder.extend(60000), NotHeld, 'extend by a wrong owner');
        await refusedRelease(intruder, 'release by a wrong owner');
        await inspector.expectHeld(key, h.value, 0, 10000);
        return;
      }
      const n = uniqueKey(lib.replace(/\//g, '-'), 'stale');
      const old = await env.a.acquire(n, 500);
      await inspector.waitFree(keyOf(n), 5000);
      const cur = await env.b.acquire(n, 10000);
      await assert.rejects(old.extend(60000), NotHeld, 'extend by the stale holder');
      await refusedRelease(old, 'release by the stale holder');
      await inspector.expectHeld(keyOf(n), cur.value, 5000, 10000);
      await cur.release();
    });

    scenario('release', ['acquire'], async () => {
      await h.release();
      await inspector.expectFree(key);
      await refusedRelease(h, 'a second release');
      const h2 = await env.b.acquire(name, 10000);
      await h2.release();
    });

    if (opts.wait) scenario('wait', [], async () => {
      const n = uniqueKey(lib.replace(/\//g, '-'), 'wait');
      const h1 = await env.a.acquire(n, 10000);
      let at;
      const releasing = sleep(300).then(() => { at = Date.now(); return h1.release(); });
      const h2 = await env.b.acquireWait(n, 10000, 5000);
      const got = Date.now();
      await releasing;
      try {
        assert.ok(got >= at, 'the waiter got the lock before the holder released it');
        assert.ok(got - at < 3000, `the waiter got the lock ${got - at} ms after the release`);
        await inspector.expectHeld(keyOf(n), h2.value, 5000, 10000);
      } finally {
        await h2.release().catch(() => {});
      }
    });

    scenario('expiry', [], async () => {
      const n = uniqueKey(lib.replace(/\//g, '-'), 'expiry');
      const ttl = 1000;
      const start = Date.now();
      const old = await env.a.acquire(n, ttl);
      let cur;
      while (!cur) {
        try {
          cur = await env.b.acquire(n, 10000);
        } catch (e) {
          if (!(e instanceof Refused)) throw new Error(`the next owner's try: ${e.message}`);
          assert.ok(Date.now() - start < ttl + 5000, `the lease has not ended ${Date.now() - start} ms after it began (lease ${ttl} ms)`);
          await sleep(50);
          continue;
        }
        const took = Date.now() - start;
        if (took < ttl) {
          await cur.release().catch(() => {});
          assert.fail(`a second owner got the lock ${took} ms after a ${ttl} ms lease began: early`);
        }
      }
      try {
        await refusedRelease(old, "the expired holder's release");
        await inspector.expectHeld(keyOf(n), cur.value, 5000, 10000);
      } finally {
        await cur.release().catch(() => {});
      }
    });
  });
}

// group registers scenarios of one library that need no flow around them: each runs on keys of its
// own and none waits for another. make(where) is called once, before the first, and returns the
// clients (with an optional close); scenarios maps each name to async (clients, inspector).
function group(lib, make, scenarios, opts = {}) {
  const where = addrs();
  describe(lib, { skip: where ? false : 'RAFTLOCK_ADDRS is not set: no server to test' }, () => {
    if (!where) return;
    let env;
    let inspector;
    after(async () => {
      if (env && env.close) await env.close();
      if (inspector) inspector.close();
    });
    for (const [name, fn] of Object.entries(scenarios)) {
      test(name, { timeout: opts.timeout || 30000 }, async () => {
        try {
          if (!env) {
            inspector = new Inspector(where.first);
            env = await make(where);
          }
          await fn(env, inspector);
          record(lib, name, 'pass', '');
        } catch (e) {
          record(lib, name, 'fail', e && e.message);
          throw e;
        }
      });
    }
  });
}

module.exports = { suite, group, Refused, NotHeld, Inspector, addrs, record, uniqueKey, randomValue, sleep };
