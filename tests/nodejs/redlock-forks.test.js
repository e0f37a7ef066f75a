'use strict';
// The Redlock libraries that followed node-redlock, as a Redlock user migrates them to the one
// logical endpoint raftlock is (one client, quorum 1):
//   @sesamecare-oss/redlock 1 (node-redlock v5's maintained fork) on ioredis;
//   redlock-universal 0.8 createLock (its SimpleLock) through its ioredis adapter and through its
//   node-redis adapter (node-redis 6).
const Redis = require('ioredis');
const { createClient } = require('redis');
const { Redlock, Lock, ResourceLockedError } = require('@sesamecare-oss/redlock');
const { createLock, IoredisAdapter, NodeRedisAdapter, LockAcquisitionError } = require('redlock-universal');
const { suite, Refused, NotHeld } = require('./lib/flow');

function ioredis(addr) {
  return new Redis({ host: addr.host, port: addr.port, maxRetriesPerRequest: 1 });
}

// @sesamecare-oss/redlock: acquire/extend/release; an ExecutionError is a refusal unless an error
// other than ResourceLockedError came with it.
function sesamecare(where) {
  const mk = (addr) => {
    const client = ioredis(addr);
    const rl = new Redlock([client], { retryCount: 0, driftFactor: 0.01 });
    const errs = [];
    rl.on('error', (e) => { if (!(e instanceof ResourceLockedError)) errs.push(e); });
    const run = async (op, asRefusal) => {
      errs.length = 0;
      try {
        return await op();
      } catch (e) {
        if (errs.length) throw new Error(`server error: ${errs.map((x) => x.message).join('; ')}`);
        throw asRefusal(e);
      }
    };
    const handle = (lock) => ({
      get value() { return lock.value; },
      extend: (ttl) => run(async () => { lock = await lock.extend(ttl); }, (e) => new NotHeld(e.message)),
      release: () => run(() => lock.release(), (e) => new NotHeld(e.message)),
    });
    return {
      client,
      acquire: (key, ttl) => run(async () => handle(await rl.acquire([key], ttl)), (e) => new Refused(e.message)),
      acquireWait: (key, ttl) => run(async () => handle(await rl.acquire([key], ttl, { retryCount: 50, retryDelay: 100, retryJitter: 20 })), (e) => new Refused(e.message)),
      forge: (key, value) => handle(new Lock(rl, [key], value, [], Date.now() + 10000, rl.settings)),
    };
  };
  const a = mk(where.first);
  const b = mk(where.second);
  return { a, b, close: () => { a.client.disconnect(); b.client.disconnect(); } };
}

// redlock-universal: one lock object per key; acquire() throws LockAcquisitionError, whose
// message ends with its last attempt's cause ('Lock "k" is already held' for a refusal, else the
// server's error); extend() and release() resolve false when the handle does not hold the lock.
async function universal(where, adapterFor) {
  const mk = async (addr) => {
    const { adapter, close } = await adapterFor(addr);
    const lockOf = (key, ttl, retryAttempts) => createLock({ adapter, key, ttl, retryAttempts, retryDelay: 100, circuitBreaker: false });
    const handle = (lock, h) => ({
      get value() { return h.value; },
      async extend(ttl) { if (!(await lock.extend(h, ttl))) throw new NotHeld(); },
      async release() { if (!(await lock.release(h))) throw new NotHeld(); },
    });
    const acquire = async (key, ttl, retryAttempts) => {
      const lock = lockOf(key, ttl, retryAttempts);
      try {
        return handle(lock, await lock.acquire());
      } catch (e) {
        if (e instanceof LockAcquisitionError && / is already held$/.test(e.message)) throw new Refused(e.message);
        throw e;
      }
    };
    return {
      close,
      acquire: (key, ttl) => acquire(key, ttl, 0),
      acquireWait: (key, ttl) => acquire(key, ttl, 50),
      forge: (key, value) => handle(lockOf(key, 10000, 0), { id: value, key, value, acquiredAt: Date.now(), ttl: 10000, metadata: {} }),
    };
  };
  const a = await mk(where.first);
  const b = await mk(where.second);
  return { a, b, close: async () => { await a.close(); await b.close(); } };
}

const viaIoredis = async (addr) => {
  const c = ioredis(addr);
  return { adapter: new IoredisAdapter(c), close: () => c.disconnect() };
};
const viaNodeRedis = async (addr) => {
  const c = createClient({ socket: { host: addr.host, port: addr.port, reconnectStrategy: false } });
  c.on('error', () => {});
  await c.connect();
  return { adapter: new NodeRedisAdapter(c), close: () => c.quit() };
};

suite('node/sesamecare-redlock', sesamecare, { wait: true });
suite('node/redlock-universal-ioredis', (where) => universal(where, viaIoredis), { wait: true });
suite('node/redlock-universal-node-redis', (where) => universal(where, viaNodeRedis), { wait: true });
