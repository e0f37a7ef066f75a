#!/usr/bin/env bash
# bench-compare.sh — raftlock side by side with redis-server (appendfsync always, and no
# persistence), Redlock over 3 redis-servers through redsync (appendfsync always, and no
# persistence), etcd (1 and 3 members) and the Go floor (tests/bench/cmd/floor: the least a
# Go server with a goroutine per connection does per request, with an fsync per batch and with
# no persistence, and over hashicorp/raft on 1 and 3 nodes), in one run on this machine. Prints one Markdown
# table (stdout); progress goes to stderr.
#
# Needs bin/raftlock (make build) and /usr/bin/redis-server. Builds bin/etcd and
# bin/raftlock-compare from the nested module tests/bench (etcd 3.7.3 from the Go module proxy:
# the first build takes a minute or two). The driver starts and stops every server itself.
#
# Environment: COMPARE_DURATION (measured time per cell, default 3s), COMPARE_WARMUP (0.5s),
# COMPARE_RUNS (3; each figure is the median over the runs), COMPARE_SYSTEMS (default all; e.g.
# raftlock3,etcd3; the keys are raftlock1 raftlock3 redis-always redis-none redsync
# redsync-none floor-sync floor-none floor-raft1 floor-raft3 etcd1 etcd3), COMPARE_TIMEOUT (21m:
# the driver then stops everything and prints what it has, so that even with a cold build of
# etcd the target ends within 23 minutes),
# REDIS_SERVER, COMPARE_WAITERS (16: the sizes of the hand-off cells, where that many clients queue
# on one key, raftlock with LOCK ... WAIT and etcd with its Mutex; "" for none). "16,2000" adds
# 2000 waiters, about 50s more per run, most of it etcd's, whose queue of 2000 does not come round
# within the 10s bound on the cell's warmup: with 3 runs, raise COMPARE_TIMEOUT to 24m.
# The defaults take about seventeen minutes on two cores. Extra arguments go to the driver (-h).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/raftlock ] || { echo "bin/raftlock missing: run make build" >&2; exit 1; }
root=$PWD
(cd tests/bench && go build -o "$root/bin/etcd" ./cmd/etcd && go build -o "$root/bin/raftlock-compare" ./cmd/compare &&
  go build -o "$root/bin/raftlock-floor" ./cmd/floor)
exec bin/raftlock-compare \
  -raftlock bin/raftlock -etcd bin/etcd -floor bin/raftlock-floor -redis-server "${REDIS_SERVER:-/usr/bin/redis-server}" \
  -duration "${COMPARE_DURATION:-3s}" -warmup "${COMPARE_WARMUP:-500ms}" -runs "${COMPARE_RUNS:-3}" \
  -timeout "${COMPARE_TIMEOUT:-21m}" -systems "${COMPARE_SYSTEMS:-}" \
  -waiters "${COMPARE_WAITERS-16}" "$@"
