'use strict';
// node-redlock v4 and v5 on ioredis, as a Redlock user migrates them: one client (quorum 1) for
// the one logical endpoint; v5 again on ioredis's cluster-mode client (node/redlock5-cluster).
const Redis = require('ioredis');
const Redlock4 = require('redlock4');
const Redlock5 = require('redlock5').default;
const { Lock: Lock5, ResourceLockedError } = require('redlock5');
const { suite, Refused, NotHeld } = require('./lib/flow');

function ioredis(addr) {
  return new Redis({ host: addr.host, port: addr.port, maxRetriesPerRequest: 1 });
}

// ioredisCluster is ioredis's cluster-mode client started from one node: it reads CLUSTER SLOTS
// and sends each key to its slot's node, following MOVED.
function ioredisCluster(addr) {
  return new Redis.Cluster([{ host: addr.host, port: addr.port }], { redisOptions: { maxRetriesPerRequest: 1 } });
}

// Errors the library reports besides "held by another owner" (a server error): an operation that
// failed with one of these fails with it, not as a refusal.
function errorLog(redlock, event, ignore) {
  const errs = [];
  redlock.on(event, (e) => { if (!ignore(e)) errs.push(e); });
  return {
    async run(op, asRefusal) {
      errs.length = 0;
      try {
        return await op();
      } catch (e) {
        if (errs.length) throw new Error(`server error: ${errs.map((x) => x.message).join('; ')}`);
        throw asRefusal(e);
      }
    },
  };
}

// redlock v4: lock/extend/unlock; a LockError is a refusal unless a clientError came with it.
function v4(where) {
  const mk = (addr) => {
    const client = ioredis(addr);
    const once = new Redlock4([client], { retryCount: 0, driftFactor: 0.01 });
    const retrying = new Redlock4([client], { retryCount: 50, retryDelay: 100, retryJitter: 20 });
    const log = errorLog(once, 'clientError', () => false);
    const wlog = errorLog(retrying, 'clientError', () => false);
    const handle = (lock, rl) => ({
      get value() { return lock.value; },
      extend: (ttl) => log.run(async () => { lock = await lock.extend(ttl); }, (e) => new NotHeld(e.message)),
      release: () => log.run(() => lock.unlock(), (e) => new NotHeld(e.message)),
    });
    return {
      client,
      acquire: (key, ttl) => log.run(async () => handle(await once.lock(key, ttl)), (e) => new Refused(e.message)),
      acquireWait: (key, ttl) => wlog.run(async () => handle(await retrying.lock(key, ttl)), (e) => new Refused(e.message)),
      forge: (key, value) => handle(new Redlock4.Lock(once, key, value, Date.now() + 10000, 0, 0)),
    };
  };
  const a = mk(where.first);
  const b = mk(where.second);
  return { a, b, close: () => { a.client.disconnect(); b.client.disconnect(); } };
}

// redlock v5: acquire/extend/release; ExecutionError is a refusal unless an error other than
// ResourceLockedError came with it.
function v5(where, connect = ioredis) {
  const mk = (addr) => {
    const client = connect(addr);
    const rl = new Redlock5([client], { retryCount: 0, driftFactor: 0.01 });
    const log = errorLog(rl, 'error', (e) => e instanceof ResourceLockedError);
    const handle = (lock) => ({
      get value() { return lock.value; },
      extend: (ttl) => log.run(async () => { lock = await lock.extend(ttl); }, (e) => new NotHeld(e.message)),
      release: () => log.run(() => lock.release(), (e) => new NotHeld(e.message)),
    });
    return {
      client,
      acquire: (key, ttl) => log.run(async () => handle(await rl.acquire([key], ttl)), (e) => new Refused(e.message)),
      acquireWait: (key, ttl) => log.run(async () => handle(await rl.acquire([key], ttl, { retryCount: 50, retryDelay: 100, retryJitter: 20 })), (e) => new Refused(e.message)),
      forge: (key, value) => handle(new Lock5(rl, [key], value, [], Date.now() + 10000)),
    };
  };
  const a = mk(where.first);
  const b = mk(where.second);
  return { a, b, close: () => { a.client.disconnect(); b.client.disconnect(); } };
}

suite('node/redlock4', async (where) => v4(where), { wait: true });
suite('node/redlock5', async (where) => v5(where), { wait: true });
suite('node/redlock5-cluster', async (where) => v5(where, ioredisCluster), { wait: true, cluster: true });
