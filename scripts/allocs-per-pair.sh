#!/usr/bin/env bash
# allocs-per-pair.sh BIN [MODE] — the allocations one acquire+release pair costs a node: starts
# BIN as one node (with --pprof), takes /debug/pprof/allocs, runs 4 s of raftlock-bench -conns 16
# -pipeline 16 -mode MODE (native, setnx or setnx-eval; default native) with no warmup, takes the
# profile again, and divides the difference (objects and bytes, pprof's sampled estimate) by the
# pairs the run made. The allocation figures in docs/performance.md of 2026-12-04 came from it.
# Needs bin/raftlock-bench (make build).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$1; mode=${2:-native}
work=$(mktemp -d /tmp/allocs.XXXX)
"$bin" --id n1 --dir "$work/n1" --addr 127.0.0.1:27101 --raft-addr 127.0.0.1:28101 --log-level warn \
  --metrics-addr 127.0.0.1:29101 --pprof true 2>"$work/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:29101/metrics && break; sleep 0.05; done
curl -sf -o "$work/a0.prof" http://127.0.0.1:29101/debug/pprof/allocs
pairs=$(bin/raftlock-bench -addr 127.0.0.1:27101 -conns 16 -pipeline 16 -mode "$mode" -duration 4s -warmup 0 2>&1 |
  sed -n 's/.*cycles=\([0-9]*\) .*/\1/p')
curl -sf -o "$work/a1.prof" http://127.0.0.1:29101/debug/pprof/allocs
# The raw profile's samples: allocated objects, allocated bytes, then the in-use columns.
read -r objects bytes < <(go tool pprof -raw -base "$work/a0.prof" "$work/a1.prof" 2>/dev/null |
  awk '/^ *-?[0-9]+ +-?[0-9]+ +-?[0-9]+ +-?[0-9]+:/ {o += $1; b += $2} END {print o+0, b+0}')
awk -v o="$objects" -v b="$bytes" -v p="$pairs" -v m="$mode" 'BEGIN {printf "mode=%s pairs=%d objects/pair=%.1f bytes/pair=%.0f\n", m, p, o/p, b/p}'
