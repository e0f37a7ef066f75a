#!/usr/bin/env bash
# bench-publish.sh BIN [BIN ...] — PUBLISH through a 3-node cluster on loopback: for each binary,
# ROUNDS times (default 2), interleaved, a fresh cluster with one subscriber on each node, then
# redis-benchmark (Debian's redis-tools) PUBLISH chan msg from C clients (default 16), N requests
# (default 20000), through the leader and through a follower; it prints requests/s and the count
# a PUBLISH through the follower replies (3: every node's subscriber). The figures of
# docs/compatibility.md's Pub/sub row came from it.
set -u
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-2}; clients=${C:-16}; requests=${N:-20000}; base=27400
command -v redis-benchmark >/dev/null || { echo "redis-benchmark is needed (apt-get install redis-tools)" >&2; exit 2; }
rate() { redis-benchmark -p "$1" -c "$clients" -n "$requests" -q PUBLISH chan msg 2>/dev/null | tr '\r' '\n' | grep -o "[0-9.]* requests per second" | tail -1; }
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    work=$(mktemp -d /tmp/bench-publish.XXXX); pids=(); subs=(); peers=""
    for i in 1 2 3; do peers+="${peers:+,}n$i=127.0.0.1:$((base+1000+i))"; done
    for i in 1 2 3; do
      "$bin" --id n$i --dir "$work/n$i" --addr 127.0.0.1:$((base+i)) --raft-addr 127.0.0.1:$((base+1000+i)) --peers "$peers" \
        --log-level warn 2>"$work/n$i.log" &
      pids+=($!)
    done
    leader=""
    for _ in $(seq 200); do
      for i in 1 2 3; do redis-cli -p $((base+i)) INFO raft 2>/dev/null | grep -q "raft_state:Leader" && leader=$i; done
      [ -n "$leader" ] && break; sleep 0.05
    done
    sleep 1
    follower=$((leader % 3 + 1))
    for i in 1 2 3; do timeout 120 redis-cli -p $((base+i)) SUBSCRIBE chan >/dev/null & subs+=($!); done
    sleep 0.3
    echo "$(basename "$bin") clients=$clients leader: $(rate $((base+leader))) | follower: $(rate $((base+follower))) | PUBLISH count: $(redis-cli -p $((base+follower)) PUBLISH chan x)"
    kill "${subs[@]}" "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null; rm -rf "$work"
  done
done
