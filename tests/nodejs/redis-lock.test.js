'use strict';
// redis-lock 1 on the node-redis 4 client it requires (the npm alias redis4). Its lock(name, ttl)
// stores "lock.<name>" (SET NX PX, the value its local deadline) and resolves only once it holds
// the lock, retrying every 50 ms for ever; the function it resolves DELetes the key unless the
// local deadline has passed (no owner check on the server).
//
// Its retries never end, so each client is wrapped: once a scenario is over (park()), SET
// answers with a promise that never settles, which stops the retry loop of a lock still pending
// and lets the process exit.
const assert = require('node:assert/strict');
const { createClient } = require('redis4');
const redisLock = require('redis-lock');
const { group, uniqueKey } = require('./lib/flow');

async function parkable(addr) {
  const c = createClient({ socket: { host: addr.host, port: addr.port, reconnectStrategy: false } });
  c.on('error', () => {});
  await c.connect();
  let parked = false;
  const client = {
    // redis-lock checks `"v4" in client` (node-redis 4's marker; reading it throws outside
    // legacy mode) and then calls the promise API.
    get v4() { return c.v4; },
    set: (...args) => (parked ? new Promise(() => {}) : c.set(...args)),
    del: (...args) => c.del(...args),
  };
  return { lock: redisLock(client), park: () => { parked = true; }, close: () => c.quit() };
}

// within(promise, ms): the promise's value, or `timeout` after ms.
const timeout = Symbol('timeout');
function within(p, ms) {
  let t;
  const timer = new Promise((res) => { t = setTimeout(res, ms, timeout); });
  return Promise.race([p, timer]).finally(() => clearTimeout(t));
}

async function clients(where) {
  const a = await parkable(where.first);
  const b = await parkable(where.second);
  return { a, b, close: async () => { a.park(); b.park(); await a.close(); await b.close(); } };
}

const name = (s) => uniqueKey('redis-lock', s);

group('node/redis-lock', clients, {
  acquire: async ({ a }, inspector) => {
    const n = name('acquire');
    const before = Date.now();
    const unlock = await within(a.lock(n, 10000), 5000);
    assert.notEqual(unlock, timeout, 'a free lock was not granted within 5 s');
    await inspector.expectHeld(`lock.${n}`, null, 5000, 10000);
    const deadline = Number(await inspector.c.get(`lock.${n}`));
    assert.ok(deadline > before + 10000 && deadline <= Date.now() + 10001, `the stored deadline ${deadline}`);
    await unlock();
    await inspector.expectFree(`lock.${n}`);
  },
  // A rival on another node is not granted the held lock; it is once the holder unlocks.
  wait: async ({ a, b }, inspector) => {
    const n = name('wait');
    const unlock = await within(a.lock(n, 10000), 5000);
    assert.notEqual(unlock, timeout, 'a free lock was not granted within 5 s');
    const pending = b.lock(n, 10000);
    assert.equal(await within(pending, 500), timeout, 'a rival was granted a held lock');
    const at = Date.now();
    await unlock();
    const next = await within(pending, 3000);
    assert.notEqual(next, timeout, 'the waiting rival was not granted the lock 3 s after the release');
    assert.ok(Date.now() >= at);
    await next();
    await inspector.expectFree(`lock.${n}`);
  },
  // A 1 s lease ends by itself; the expired holder's unlock leaves the next holder's lock alone.
  expiry: async ({ a, b }, inspector) => {
    const n = name('expiry');
    const start = Date.now();
    const old = await within(a.lock(n, 1000), 5000);
    assert.notEqual(old, timeout, 'a free lock was not granted within 5 s');
    const cur = await within(b.lock(n, 10000), 6000);
    assert.notEqual(cur, timeout, 'the 1 s lease had not ended 6 s later');
    const took = Date.now() - start;
    assert.ok(took >= 1000, `a rival got the lock ${took} ms after a 1 s lease began: early`);
    await old();
    await inspector.expectHeld(`lock.${n}`, null, 5000, 10000);
    await cur();
  },
});
