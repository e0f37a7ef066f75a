#!/usr/bin/env bash
# rss-bigvalues.sh LABEL=BIN ... — interleaved peak RSS of raftlock binaries under large pipelined
# writes: for ROUNDS rounds (default 3), each binary in turn starts one fresh node on loopback and
# takes redis-benchmark -t set -d 4000 -r 1000 -P 32 -c 16 -n N (default 300000: enough 256 KiB
# group commits to fill a 4,096-entry log cache); it prints SET/s, the peak RSS (VmHWM) and the
# RSS after the load, from /proc. redis-benchmark comes with Debian's redis-tools.
# The log cache's byte bound (raftnode/logcache.go) was measured with it.
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}; n=${N:-300000}; port=26500
for _ in $(seq "$rounds"); do
  for spec in "$@"; do
    label=${spec%%=*}; bin=${spec#*=}; dir=$(mktemp -d /tmp/rssbig.XXXX)
    "$bin" --dir "$dir" --addr 127.0.0.1:$port --raft-addr 127.0.0.1:$((port + 1000)) --log-level warn 2>"$dir.log" &
    pid=$!
    for _ in $(seq 100); do redis-cli -p $port PING >/dev/null 2>&1 && break; sleep 0.05; done
    r=$(timeout 180 redis-benchmark -p $port -t set -d 4000 -r 1000 -P 32 -c 16 -n "$n" -q 2>&1 | tr '\r' '\n' | grep -v '^\s*$' | tail -1)
    hwm=$(awk '/VmHWM/{print $2}' /proc/$pid/status); rss=$(awk '/VmRSS/{print $2}' /proc/$pid/status)
    printf '%-10s %s peak_rss_mb=%d rss_after_mb=%d\n' "$label" "$r" $((hwm / 1024)) $((rss / 1024))
    kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$dir" "$dir.log"
  done
done
