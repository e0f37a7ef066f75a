'use strict';
// redis-semaphore 5 on ioredis: Mutex and RedlockMutex (one client: quorum 1) through the common
// flow, Mutex's automatic refresh, and Semaphore and MultiSemaphore (sorted sets of holders).
//
// redis-semaphore stores a mutex named n at "mutex:n", a semaphore at "semaphore:n". Its release()
// resolves whether or not the caller held the lock (silentRelease); it has no public extend with
// a new lease, so extend(ttl) is its way to resume a lock acquired elsewhere: a Mutex with that
// identifier, acquiredExternally and lockTimeout ttl, whose tryAcquire() refreshes the lease only
// if the identifier still holds it.
const Redis = require('ioredis');
const { Mutex, RedlockMutex, Semaphore, MultiSemaphore } = require('redis-semaphore');
const assert = require('node:assert/strict');
const { suite, group, Refused, NotHeld, uniqueKey, sleep } = require('./lib/flow');

function ioredis(addr) {
  return new Redis({ host: addr.host, port: addr.port, maxRetriesPerRequest: 1 });
}

// No automatic refresh in the flow: the scenarios renew the lease themselves.
const once = (ttl) => ({ lockTimeout: ttl, acquireAttemptsLimit: 1, refreshInterval: 0 });
const waiting = (ttl, waitMs) => ({ lockTimeout: ttl, acquireTimeout: waitMs, retryInterval: 50, refreshInterval: 0 });

function mutexes(where, New) {
  const mk = (addr) => {
    const client = ioredis(addr);
    const lock = (name, opts) => New(client, name, opts);
    const handle = (name, identifier) => ({
      value: identifier,
      async extend(ttl) {
        const m = lock(name, { ...once(ttl), identifier, acquiredExternally: true });
        if (!(await m.tryAcquire())) throw new NotHeld();
      },
      release: () => lock(name, { ...once(10000), identifier, acquiredExternally: true }).release(),
    });
    const acquire = async (name, opts) => {
      const m = lock(name, opts);
      if (!(await m.tryAcquire())) throw new Refused();
      return handle(name, m.identifier);
    };
    return {
      client,
      acquire: (name, ttl) => acquire(name, once(ttl)),
      acquireWait: (name, ttl, waitMs) => acquire(name, waiting(ttl, waitMs)),
      forge: (name, value) => handle(name, value),
    };
  };
  const a = mk(where.first);
  const b = mk(where.second);
  return { a, b, close: () => { a.client.disconnect(); b.client.disconnect(); } };
}

const mutexOpts = { wait: true, silentRelease: true, keyOf: (n) => `mutex:${n}` };
suite('node/redis-semaphore-mutex', (where) => mutexes(where, (c, n, o) => new Mutex(c, n, o)), mutexOpts);
suite('node/redis-semaphore-redlockmutex', (where) => mutexes(where, (c, n, o) => new RedlockMutex([c], n, o)), mutexOpts);

const clients = (where) => {
  const a = ioredis(where.first);
  const b = ioredis(where.second);
  return { a, b, close: () => { a.disconnect(); b.disconnect(); } };
};

group('node/redis-semaphore-mutex', clients, {
  // The default refresh keeps a 1 s lease alive well past 1 s, until release() stops it.
  'auto-refresh': async ({ a, b }, inspector) => {
    const name = uniqueKey('redis-semaphore', 'refresh');
    const m = new Mutex(a, name, { lockTimeout: 1000, acquireAttemptsLimit: 1, refreshInterval: 300 });
    assert.ok(await m.tryAcquire(), 'a free mutex');
    try {
      await sleep(1800);
      assert.ok(m.isAcquired, 'the mutex was lost while refreshing');
      await inspector.expectHeld(`mutex:${name}`, m.identifier, 0, 1000);
      const rival = new Mutex(b, name, once(10000));
      assert.equal(await rival.tryAcquire(), false, 'a rival got a refreshed mutex');
    } finally {
      await m.release();
    }
    await inspector.expectFree(`mutex:${name}`);
  },
});

group('node/redis-semaphore-semaphore', clients, {
  // Two permits: two holders (one on each node) get one each, a third is refused.
  acquire: async ({ a, b }) => {
    const name = uniqueKey('redis-semaphore', 'sem');
    const s1 = new Semaphore(a, name, 2, once(10000));
    const s2 = new Semaphore(b, name, 2, once(10000));
    const s3 = new Semaphore(b, name, 2, once(10000));
    assert.ok(await s1.tryAcquire(), 'a first permit');
    assert.ok(await s2.tryAcquire(), 'a second permit');
    assert.equal(await s3.tryAcquire(), false, 'a third permit of two');
    await s1.release();
    assert.ok(await s3.tryAcquire(), 'a permit after a release');
    await s2.release();
    await s3.release();
  },
  // acquire() waits for a permit: granted once a holder releases.
  wait: async ({ a, b }) => {
    const name = uniqueKey('redis-semaphore', 'semwait');
    const s1 = new Semaphore(a, name, 1, once(10000));
    assert.ok(await s1.tryAcquire(), 'the only permit');
    let at;
    const releasing = sleep(300).then(() => { at = Date.now(); return s1.release(); });
    const s2 = new Semaphore(b, name, 1, waiting(10000, 5000));
    await s2.acquire();
    const got = Date.now();
    await releasing;
    assert.ok(got >= at, 'the waiter got the permit before the release');
    await s2.release();
  },
  // A holder that stops refreshing loses its permit when its lease ends.
  expiry: async ({ a, b }) => {
    const name = uniqueKey('redis-semaphore', 'semexp');
    const s1 = new Semaphore(a, name, 1, once(1000));
    const start = Date.now();
    assert.ok(await s1.tryAcquire(), 'the only permit');
    const s2 = new Semaphore(b, name, 1, waiting(10000, 5000));
    await s2.acquire();
    assert.ok(Date.now() - start >= 1000, `a permit ${Date.now() - start} ms into a 1 s lease: early`);
    await s2.release();
  },
});

group('node/redis-semaphore-multisemaphore', clients, {
  // Three permits taken two at a time: the second taker of two is refused, a taker of one is not.
  acquire: async ({ a, b }) => {
    const name = uniqueKey('redis-semaphore', 'multi');
    const m1 = new MultiSemaphore(a, name, 3, 2, once(10000));
    const m2 = new MultiSemaphore(b, name, 3, 2, once(10000));
    const m3 = new MultiSemaphore(b, name, 3, 1, once(10000));
    assert.ok(await m1.tryAcquire(), 'two permits of three');
    assert.equal(await m2.tryAcquire(), false, 'two more permits of three');
    assert.ok(await m3.tryAcquire(), 'the last permit');
    await m1.release();
    assert.ok(await m2.tryAcquire(), 'two permits after a release');
    await m2.release();
    await m3.release();
  },
});
