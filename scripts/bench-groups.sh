#!/usr/bin/env bash
# bench-groups.sh — what raft groups buy (docs/groups.md, issue #34): for each G in GROUPS_LIST
# (default "1 2 4 8"), a fresh 3-node cluster started with --groups G on loopback, and after
# the balancer has spread the groups' leaders, one bin/raftlock-bench per group, run against
# that group's leader with keys of a hash tag in that group's slots, CONNS/G connections each
# (CONNS default 64), all at once for DUR seconds (default 6) after 1 s of warmup. BENCH_ARGS
# adds raftlock-bench flags (-pipeline 16 for 16 x 16 pipelined). It prints, per G: the
# groups' pairs/s summed, the median of their acquire p50s and the worst p99, the three
# nodes' CPU per pair (user+system from /proc/PID/stat), and the nodes' idle CPU per group
# over IDLE seconds (default 5) before the run. ROUNDS (default 1) repeats the whole sweep,
# interleaving the G values. ONE_GROUP=1 runs one benchmark, with all CONNS, on group 0 alone
# (the others idle): what carrying a group over a shared session, beside idle groups, costs.
# Needs redis-cli (Debian's redis-tools) and python3.
set -uo pipefail
cd "$(dirname "$0")/.."
groups_list=${GROUPS_LIST:-1 2 4 8}; conns=${CONNS:-64}; dur=${DUR:-6}; idle=${IDLE:-5}
rounds=${ROUNDS:-1}; args=${BENCH_ARGS:-}
base=27400
tck=$(getconf CLK_TCK)

cpu_of() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' /proc/$p/stat))); done; echo $t; }

# group_leaders PORT: each group's leader as the node at PORT names it (INFO raft), space-separated;
# empty while a group has none.
group_leaders() {
  redis-cli -p "$1" INFO raft 2>/dev/null | tr -d '\r' | python3 -c '
import sys
lines = dict(l.split(":", 1) for l in sys.stdin.read().splitlines() if ":" in l)
G = int(lines.get("raft_groups", "1"))
out = []
for g in range(G):
    f = dict(kv.split("=", 1) for kv in lines.get(f"raft_group{g}", "leader=" + lines.get("raft_leader_id", "")).split(","))
    out.append(f.get("leader", ""))
print(" ".join(out) if all(out) else "")'
}

# tag_in G g: a hash tag whose slot is served by group g of G.
tag_in() {
  python3 - "$1" "$2" <<'PY'
import sys
G, g = int(sys.argv[1]), int(sys.argv[2])
def crc16(b):
    c = 0
    for x in b:
        c ^= x << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) & 0xFFFF if c & 0x8000 else (c << 1) & 0xFFFF
    return c
i = 0
while True:
    t = f"t{i}"
    if (crc16(t.encode()) % 16384) * G // 16384 == g:
        print(t); break
    i += 1
PY
}

for r in $(seq $rounds); do
  for G in $groups_list; do
    work=$(mktemp -d /tmp/bench-groups.XXXX); pids=(); peers=""
    for i in 1 2 3; do peers+="${peers:+,}n$i=127.0.0.1:$((base+100+i))"; done
    for i in 1 2 3; do
      bin/raftlock --id n$i --dir $work/n$i --addr 127.0.0.1:$((base+i)) --raft-addr 127.0.0.1:$((base+100+i)) \
        --peers $peers --groups $G --log-level warn 2>$work/n$i.log &
      pids+=($!)
    done
    # Wait for every group to have a leader, then for the balancer (5 s settle) to spread them.
    leaders=""
    for _ in $(seq 300); do
      leaders=$(group_leaders $((base+1)))
      [ -n "$leaders" ] && break; sleep 0.1
    done
    sleep 7
    leaders=$(group_leaders $((base+1)))
    c0=$(cpu_of "${pids[@]}"); sleep $idle; c1=$(cpu_of "${pids[@]}")
    idle_ms=$(python3 -c "print(f'{($c1-$c0)/$tck*1000/$idle/$G:.1f}')")
    per=$(( conns / G )); [ $per -lt 1 ] && per=1
    run_leaders=$leaders
    if [ "${ONE_GROUP:-0}" = 1 ]; then per=$conns; run_leaders=${leaders%% *}; fi
    bps=(); g=0
    for l in $run_leaders; do
      port=$((base + ${l#n}))
      tag=$(tag_in $G $g)
      bin/raftlock-bench -addr 127.0.0.1:$port -conns $per -duration ${dur}s -warmup 1s -keys-prefix "{$tag}:" -json $args \
        >$work/out$g.json 2>/dev/null &
      bps+=($!); g=$((g+1))
    done
    sleep 1.05
    t0=$(cpu_of "${pids[@]}")
    wait "${bps[@]}"
    t1=$(cpu_of "${pids[@]}")
    python3 - "$G" "$((t1-t0))" "$tck" "$idle_ms" "$leaders" "$(cut -d' ' -f1 /proc/loadavg)" $work/out*.json <<'PY'
import json, statistics, sys
G, ticks, tck, idle, leaders, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
rs = [json.load(open(f)) for f in sys.argv[7:]]
rate = sum(r.get("cycles_per_sec", 0) for r in rs)
cyc = sum(r.get("cycles", 0) for r in rs)
acq = [next(l for l in r["latency"] if l["op"] == "acquire") for r in rs]
p50 = statistics.median(a["p50_ns"] for a in acq) / 1e6
p99 = max(a["p99_ns"] for a in acq) / 1e6
print(f"G={G:<3} pairs/s={rate:8.0f} acq_p50={p50:.2f}ms acq_p99={p99:.2f}ms cpu_us/pair={ticks/tck*1e6/max(cyc,1):7.1f} "
      f"idle_cpu_ms/s/group={idle} leaders=[{leaders}] load={load}")
PY
    kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null; rm -rf $work
  done
done
