'use strict';
// node-redis-warlock 1 on the callback client it was written for (node-redis 3, the npm alias
// redis3): lock (SET k id PX ttl NX on "<name>:lock"), touch and unlock (EVALSHA of its parity
// scripts, SCRIPT LOAD on NOSCRIPT), optimistic (lock retried maxAttempts times).
const redis3 = require('redis3');
const Warlock = require('node-redis-warlock');
const { suite, Refused, NotHeld } = require('./lib/flow');

function warlocks(where) {
  const mk = (addr) => {
    const client = redis3.createClient({ host: addr.host, port: addr.port, retry_strategy: () => undefined });
    client.on('error', () => {});
    const w = Warlock(client);
    const handle = (name, id) => ({
      value: id,
      async extend(ttl) {
        const r = await w.touch(name, id, ttl);
        if (r !== 'OK') throw new NotHeld(`touch: ${r}`);
      },
      async release() {
        const r = await new Promise((res, rej) => w.unlock(name, id, (err, n) => (err ? rej(err) : res(n))));
        if (r !== 1) throw new NotHeld(`unlock: ${r}`);
      },
    });
    const lock = (name, ttl) => new Promise((res, rej) => w.lock(name, ttl, (err, unlock, id) => {
      if (err) return rej(err);
      if (typeof unlock !== 'function') return rej(new Refused());
      return res(handle(name, id));
    }));
    return {
      client,
      acquire: lock,
      acquireWait: (name, ttl) => new Promise((res, rej) => w.optimistic(name, ttl, 50, 100, (err, unlock) => {
        if (err) return rej(err.maxAttempts ? new Refused(err.message) : err);
        // optimistic passes no id: read it back, as a caller that wants to touch or unlock by id must.
        client.get(w.makeKey(name), (e, id) => (e ? rej(e) : res(handle(name, id))));
      })),
      forge: (name, value) => handle(name, value),
    };
  };
  const a = mk(where.first);
  const b = mk(where.second);
  return { a, b, close: () => { a.client.quit(); b.client.quit(); } };
}

suite('node/warlock', warlocks, { wait: true, keyOf: (n) => `${n}:lock` });
