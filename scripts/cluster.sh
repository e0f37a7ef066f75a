#!/usr/bin/env bash
# cluster.sh [BASEPORT] — a 3-node raftlock cluster on loopback: clients on BASEPORT..BASEPORT+2
# (default 6379-6381), raft on BASEPORT+1000.., HTTP (status page, /readyz, /metrics) on
# BASEPORT+2742.. (default 9121-9123), data in ./cluster-data/n1..n3. Ctrl-C stops all three
# cleanly (SIGTERM, by PID). Restarting resumes from the data dirs.
set -euo pipefail
cd "$(dirname "$0")/.."
base=${1:-6379}
peers="n1=127.0.0.1:$((base + 1000)),n2=127.0.0.1:$((base + 1001)),n3=127.0.0.1:$((base + 1002))"
pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping ${pids[*]}"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop INT TERM EXIT
for i in 1 2 3; do
  port=$((base + i - 1))
  mkdir -p cluster-data/n$i
  bin/raftlock --id n$i --dir cluster-data/n$i --addr 127.0.0.1:$port --raft-addr 127.0.0.1:$((port + 1000)) \
    --metrics-addr 127.0.0.1:$((port + 2742)) --peers "$peers" 2>>cluster-data/n$i/node.log &
  pids+=($!)
done
for _ in $(seq 100); do
  redis-cli -p "$base" DBSIZE 2>/dev/null | grep -qE '^[0-9]+$' && break
  sleep 0.1
done
cat <<MSG
raftlock cluster up: n1 127.0.0.1:$base, n2 127.0.0.1:$((base + 1)), n3 127.0.0.1:$((base + 2))
  redis-cli -p $((base + 1)) LOCK job 10000        # any node serves any client
  redis-cli -p $base RAFT MEMBERS                  # who leads
  logs: cluster-data/n*/node.log                   Ctrl-C stops all three
MSG
for i in 1 2 3; do
  web=http://127.0.0.1:$((base + i - 1 + 2742))
  echo "  n$i status page $web/   health $web/readyz   metrics $web/metrics"
done
wait "${pids[@]}"
