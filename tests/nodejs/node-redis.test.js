'use strict';
// node-redis (the `redis` package): SET NX PX to acquire; compare-and-delete and
// compare-and-pexpire scripts (defineScript: EVALSHA, EVAL on NOSCRIPT) to release and extend.
const { createClient, defineScript } = require('redis');
const { suite, Refused, NotHeld, randomValue } = require('./lib/flow');

const scripts = {
  releaseLock: defineScript({
    SCRIPT: 'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end',
    NUMBER_OF_KEYS: 1,
    parseCommand(parser, key, value) {
      parser.pushKey(key);
      parser.push(value);
    },
    transformReply: undefined,
  }),
  extendLock: defineScript({
    SCRIPT: 'if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end',
    NUMBER_OF_KEYS: 1,
    parseCommand(parser, key, value, ttl) {
      parser.pushKey(key);
      parser.push(value);
      parser.push(String(ttl));
    },
    transformReply: undefined,
  }),
};

function result(n) {
  if (n === 1) return;
  if (n === 0) throw new NotHeld();
  throw new Error(`script returned ${n}; want 0 or 1`);
}

async function make(where, resp) {
  const mk = async (addr) => {
    const client = createClient({ socket: { host: addr.host, port: addr.port, reconnectStrategy: false }, RESP: resp, scripts });
    client.on('error', () => {});
    await client.connect();
    const handle = (key, value) => ({
      value,
      extend: async (ttl) => result(await client.extendLock(key, value, ttl)),
      release: async () => result(await client.releaseLock(key, value)),
    });
    return {
      client,
      acquire: async (key, ttl) => {
        const value = randomValue('node-redis-');
        const ok = await client.set(key, value, { NX: true, PX: ttl });
        if (ok === null) throw new Refused();
        if (ok !== 'OK') throw new Error(`SET NX PX replied ${ok}`);
        return handle(key, value);
      },
      forge: handle,
    };
  };
  const a = await mk(where.first);
  const b = await mk(where.second);
  return { a, b, close: async () => { await a.client.quit(); await b.client.quit(); } };
}

suite('node/node-redis-resp2', (where) => make(where, 2));
suite('node/node-redis-resp3', (where) => make(where, 3));
