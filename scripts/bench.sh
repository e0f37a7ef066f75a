#!/usr/bin/env bash
# bench.sh DURATION — start a fresh single raftlock node (durable: fsync before every reply) in
# a temporary data dir and measure it with raftlock-bench: acquire+release cycles on distinct
# keys at 1, 16 and 64 connections, pipelined, and one key contended by 16 clients. Stops the
# node it started by PID, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
port=${BENCH_PORT:-16479}
raftport=$((port + 1000))
dir=$(mktemp -d /tmp/raftlock-bench.XXXXXX)
bin/raftlock --dir "$dir" --addr 127.0.0.1:$port --raft-addr 127.0.0.1:$raftport --log-level warn \
  2>"$dir/node.log" &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do
  redis-cli -p $port DBSIZE 2>/dev/null | grep -qE "^[0-9]+$" && break  # leader ready
  sleep 0.1
done
run() {
  echo
  echo "== $*"
  bin/raftlock-bench -addr 127.0.0.1:$port -duration "$duration" -warmup 1s "$@"
}
run -conns 1 -mode native
run -conns 16 -mode native
run -conns 64 -mode native
run -conns 16 -pipeline 16 -mode native
run -conns 50 -mode setnx
run -conns 16 -mode native -workload contended
