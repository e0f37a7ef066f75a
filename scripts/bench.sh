#!/usr/bin/env bash
# bench.sh DURATION — measure raftlock with raftlock-bench, one node and three, in one run.
# RAFTLOCK_BIN picks the server binary (default bin/raftlock), to run an older build side by side.
#
# Starts a fresh single node, then a fresh 3-node cluster (loopback, durable: every reply waits
# for fsync on a majority), each in a temporary data dir, and runs the same scenarios against
# each: acquire+release cycles on distinct keys at 1, 16 and 64 connections, 16 connections
# pipelining 16 cycles, SET NX PX + DEL at 50 connections, and one key contended by 16 clients.
# On the cluster it also runs 16 connections through a follower (forwarding). Prints one table,
# then the Go client's benchmarks (client/bench_test.go) next to raw go-redis on a single node.
# Stops every node it started, by PID, whatever happens.
# BENCH_SECURE=1 runs the same with security on: client TLS (no client certificates), mutual TLS
# on the raft transport and a --requirepass, from a throwaway CA made with openssl in the temp dir;
# raftlock-bench connects with -tls and -pass.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-5s}
base=${BENCH_PORT:-16479}
work=$(mktemp -d /tmp/raftlock-bench.XXXXXX)
results="$work/results.jsonl"
pids=()
stop_nodes() {
  if [ ${#pids[@]} -gt 0 ]; then
    kill "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
  fi
  pids=()
}
trap 'stop_nodes; rm -rf "$work"' EXIT

bench_flags=() cli_flags=()
secure_flags() { :; } # plain: no flags
if [ "${BENCH_SECURE:-0}" = 1 ]; then
  # A certificate for each node (n1..n3), naming its node, good for both ends of a connection
  # on 127.0.0.1: raftlock cert, as docs/security.md shows.
  tls="$work/tls" pass=bench-$RANDOM$RANDOM
  mkdir -p "$tls"
  "${RAFTLOCK_BIN:-bin/raftlock}" cert ca --out "$tls" --days 1 >/dev/null
  for i in 1 2 3; do
    "${RAFTLOCK_BIN:-bin/raftlock}" cert node --id "n$i" --host localhost,127.0.0.1 --out "$tls" --days 1 >/dev/null
  done
  secure_flags() { # node id
    echo --tls-cert-file "$tls/$1.crt" --tls-key-file "$tls/$1.key" --tls-ca-cert-file "$tls/ca.crt" \
      --tls-auth-clients no --raft-tls-cert-file "$tls/$1.crt" --raft-tls-key-file "$tls/$1.key" \
      --raft-tls-ca-cert-file "$tls/ca.crt" --requirepass "$pass"
  }
  bench_flags=(-tls -tls-ca "$tls/ca.crt" -pass "$pass")
  cli_flags=(--tls --cacert "$tls/ca.crt" -a "$pass" --no-auth-warning)
  echo "secure: client TLS, raft mutual TLS, requirepass" >&2
fi

cli() { redis-cli "${cli_flags[@]}" "$@"; }

start_nodes() { # count
  local n=$1 peers="" i
  for i in $(seq "$n"); do peers+="${peers:+,}n$i=127.0.0.1:$((base + 1000 + i))"; done
  for i in $(seq "$n"); do
    mkdir -p "$work/$n/n$i"
    "${RAFTLOCK_BIN:-bin/raftlock}" --id "n$i" --dir "$work/$n/n$i" --addr 127.0.0.1:$((base + i)) \
      --raft-addr 127.0.0.1:$((base + 1000 + i)) --peers "$peers" --log-level warn $(secure_flags "n$i") 2>"$work/$n/n$i.log" &
    pids+=($!)
  done
  for _ in $(seq 200); do
    cli -p $((base + 1)) DBSIZE 2>/dev/null | grep -qE '^[0-9]+$' && return 0
    sleep 0.05
  done
  echo "cluster of $n did not become ready" >&2
  return 1
}

# leader_port prints the client port of the node that leads.
leader_port() {
  local i
  for i in 1 2 3; do
    if cli -p $((base + i)) INFO raft 2>/dev/null | grep -q "raft_state:Leader"; then
      echo $((base + i))
      return
    fi
  done
}

run() { # label port args...
  local label=$1 port=$2
  shift 2
  echo "== $label: $*" >&2
  bin/raftlock-bench -addr 127.0.0.1:"$port" -duration "$duration" -warmup 1s -json "${bench_flags[@]}" "$@" 2>/dev/null |
    sed "s/^{/{\"label\":\"$label\",\"args\":\"$*\",/" >>"$results" || echo "   (errors: see above)" >&2
}

scenarios() { # label port
  run "$1" "$2" -conns 1 -mode native
  run "$1" "$2" -conns 16 -mode native
  run "$1" "$2" -conns 64 -mode native
  run "$1" "$2" -conns 16 -pipeline 16 -mode native
  run "$1" "$2" -conns 50 -mode setnx
  run "$1" "$2" -conns 16 -mode native -workload contended
}

start_nodes 1
scenarios "1 node" $((base + 1))
stop_nodes

start_nodes 3
leader=$(leader_port)
follower=$((base + 1))
[ "$follower" = "$leader" ] && follower=$((base + 2))
scenarios "3 nodes" "$leader"
run "3 nodes via follower" "$follower" -conns 16 -mode native
stop_nodes

python3 - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'setup':<22} {'scenario':<44} {'cycles/s':>9} {'acq p50':>8} {'acq p99':>8} {'acq p999':>9} {'errors':>6}  load")
for r in rows:
    lat = {l["op"]: l for l in r["latency"]}
    acq = lat.get("acquire", {})
    rate = r["handoffs_per_sec"] if "contended" in r["args"] else r["cycles_per_sec"]
    ms = lambda ns: f"{ns/1e6:.2f}ms"
    print(f"{r['label']:<22} {r['args']:<44} {rate:>9.0f} {ms(acq.get('p50_ns',0)):>8} {ms(acq.get('p99_ns',0)):>8} "
          f"{ms(acq.get('p999_ns',0)):>9} {r['errors']:>6}  {r['settings']['loadavg_start'].split()[0]}")
print("cycles/s = acquire+release pairs per second (handoffs/s for the contended key); acq = acquire latency")
PY

# The Go client (client/) next to raw go-redis sending the same commands, on a fresh single
# node that the benchmark starts from bin/raftlock and stops: Lock+Unlock and one renewal, at 1
# and 64 goroutines (client/bench_test.go).
echo "== client package: Lock/Unlock and renewal, client next to raw go-redis, 1 node" >&2
${GO:-go} test -run '^$' -bench . -benchtime "$duration" -count 1 ./client | grep -E '^Benchmark|^ok|FAIL'
