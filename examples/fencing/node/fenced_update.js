// Fencing with ioredis and pg: a conditional UPDATE refuses a stale holder's write.
//
// Worker 1 takes the lock and stalls past its lease (here it just does not write until the lock
// channel says its lock is lost); worker 2 takes the lock and writes with its larger token; worker
// 1's write with its old token then matches no row. Exits 0 only if that write was refused and
// the row holds worker 2's value.
//
//   RAFTLOCK_ADDR=127.0.0.1:6379 PG_DSN=postgresql://user@127.0.0.1:5432/db node fenced_update.js
//
// ioredis and pg come from tests/nodejs (NODE_PATH=tests/nodejs/node_modules).
"use strict";
const Redis = require("ioredis");
const { Client } = require("pg");

const KEY = "fencing-node"; // the lock's key and the row's id

// fencedUpdate sets the row's value unless it holds a larger token; false when refused as stale.
async function fencedUpdate(pg, rowId, token, value) {
  const res = await pg.query(
    "UPDATE fencing_example SET value = $2, token = $3 WHERE id = $1 AND token <= $3",
    [rowId, value, token],
  );
  return res.rowCount === 1;
}

// lostMessage resolves with the reason of "lost <token> <reason>" on the lock's channel.
function lostMessage(sub, token, timeoutMs) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`no 'lost ${token}' on __lock__:${KEY} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    sub.on("message", (_channel, message) => {
      const [what, tok, reason] = message.split(" ");
      if (what === "lost" && tok === String(token)) {
        clearTimeout(timer);
        resolve(reason);
      }
    });
  });
}

async function main() {
  const [host, port] = process.env.RAFTLOCK_ADDR.split(":");
  // lazyConnect: connect() resolves once ioredis's ready check (an INFO) has its reply; a
  // SUBSCRIBE sent before that makes the check fail in subscribed mode.
  const opts = { host, port: Number(port), maxRetriesPerRequest: 1, lazyConnect: true };
  const redis = new Redis(opts);
  const sub = new Redis(opts);
  const pg = new Client({ connectionString: process.env.PG_DSN, connectionTimeoutMillis: 10000 });
  try {
    await Promise.all([redis.connect(), sub.connect(), pg.connect()]);
    // The demo's table and a fresh row (a real row's token never goes down).
    await pg.query(
      "CREATE TABLE IF NOT EXISTS fencing_example (id text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)",
    );
    await pg.query(
      "INSERT INTO fencing_example VALUES ($1, 'initial', 0) ON CONFLICT (id) DO UPDATE SET value = 'initial', token = 0",
      [KEY],
    );
    await sub.subscribe(`__lock__:${KEY}`);

    const token1 = await redis.call("LOCK", KEY, 500, "OWNER", "worker-1");
    console.log(`worker 1: LOCK ${KEY} 500 -> token ${token1}; stalls before its write`);
    const reason = await lostMessage(sub, token1, 10000);
    console.log(`__lock__:${KEY}: lost ${token1} ${reason}`);
    const token2 = await redis.call("LOCK", KEY, 5000, "OWNER", "worker-2", "WAIT", 5000);
    console.log(`worker 2: LOCK ${KEY} 5000 -> token ${token2}`);
    console.log(`worker 2: fencedUpdate(token ${token2}) -> ${await fencedUpdate(pg, KEY, token2, "worker 2")}`);
    const staleAccepted = await fencedUpdate(pg, KEY, token1, "worker 1");
    console.log(`worker 1: fencedUpdate(token ${token1}) -> ${staleAccepted}`);
    await redis.call("UNLOCK", KEY, token2);
    const { rows } = await pg.query("SELECT value, token FROM fencing_example WHERE id = $1", [KEY]);
    const { value, token } = rows[0]; // token: a bigint comes back as a string
    console.log(`row ${KEY}: '${value}', token ${token}`);
    if (staleAccepted || value !== "worker 2" || token !== String(token2)) {
      console.log("FAIL: the stale write was not refused");
      return 1;
    }
    console.log("OK: the stale write was refused");
    return 0;
  } finally {
    sub.disconnect();
    redis.disconnect();
    await pg.end();
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  },
);
