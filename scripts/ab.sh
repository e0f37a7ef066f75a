#!/usr/bin/env bash
# ab.sh NODES "raftlock-bench args" LABEL=BIN[:ENV=V] ... — interleaved A/B of raftlock binaries:
# ROUNDS rounds (default 3), each starting a fresh NODES-node cluster per binary on loopback,
# running bin/raftlock-bench through the leader for DUR seconds (default 4) after 1 s of warmup,
# and printing pairs/s (hand-offs/s for hot-wait), acquire p50 and the nodes' CPU per pair
# (user+system from /proc/PID/stat). The figures in commit messages of 2026-12-02 came from it.
# SPLIT=1 also prints, per node, the mean synced log write and (on the leader) the mean commit
# and requests per group commit over the whole run, from its /metrics
# (raftlock_log_sync_duration_seconds, raftlock_commit_duration_seconds,
# raftlock_group_commit_requests): where a commit's time goes.
set -uo pipefail
cd "$(dirname "$0")/.."
nodes=$1; args=$2; shift 2
rounds=${ROUNDS:-3}; dur=${DUR:-4}
base=26400
for r in $(seq $rounds); do
  for spec in "$@"; do
    label=${spec%%=*}; rest=${spec#*=}; bin=${rest%%:*}; envs=""; [ "$rest" != "$bin" ] && envs=${rest#*:}
    work=$(mktemp -d /tmp/ab.XXXX); pids=(); peers=""
    for i in $(seq $nodes); do peers+="${peers:+,}n$i=127.0.0.1:$((base+1000+i))"; done
    for i in $(seq $nodes); do
      env $envs $bin --id n$i --dir $work/n$i --addr 127.0.0.1:$((base+i)) --raft-addr 127.0.0.1:$((base+1000+i)) --peers $peers --log-level warn \
        --metrics-addr 127.0.0.1:$((base+2000+i)) 2>$work/n$i.log &
      pids+=($!)
    done
    leader=""
    for _ in $(seq 200); do
      for i in $(seq $nodes); do redis-cli -p $((base+i)) INFO raft 2>/dev/null | grep -q "raft_state:Leader" && leader=$((base+i)); done
      [ -n "$leader" ] && break; sleep 0.05
    done
    bin/raftlock-bench -addr 127.0.0.1:$leader -duration ${dur}s -warmup 1s -json $args >$work/out.json 2>/dev/null &
    bp=$!
    sleep 1.05
    t0=0; for p in "${pids[@]}"; do t0=$((t0 + $(awk '{print $14+$15}' /proc/$p/stat))); done
    wait $bp
    t1=0; for p in "${pids[@]}"; do t1=$((t1 + $(awk '{print $14+$15}' /proc/$p/stat))); done
    python3 - "$work/out.json" "$label" $((t1-t0)) "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import json,sys
r=json.load(open(sys.argv[1])); ticks=int(sys.argv[3]); tck=100
cyc=r.get("cycles",0) or 0; rate=r.get("cycles_per_sec",0)
lat={l["op"]:l for l in r["latency"]}; lat.setdefault("acquire", next(iter(lat.values())) if lat else {"p50_ns":0}); rate = r.get("handoffs_per_sec", rate) if "hot" in sys.argv[2] or rate==0 else rate
print(f"{sys.argv[2]:<10} pairs/s={rate:8.0f} acq_p50={lat['acquire']['p50_ns']/1e6:.3f}ms cpu_us/pair={ticks/tck*1e6/max(cyc,1):7.1f} load={sys.argv[4]}")
PY
    if [ "${SPLIT:-0}" = 1 ]; then
      for i in $(seq $nodes); do
        curl -s http://127.0.0.1:$((base+2000+i))/metrics | awk -v n="  n$i" '
          /^raftlock_log_sync_duration_seconds_sum/ {ss=$2} /^raftlock_log_sync_duration_seconds_count/ {sc=$2}
          /^raftlock_commit_duration_seconds_sum/ {cs=$2} /^raftlock_commit_duration_seconds_count/ {cc=$2}
          /^raftlock_group_commit_requests_sum/ {gs=$2} /^raftlock_group_commit_requests_count/ {gc=$2}
          END {printf "%s log sync mean %.0f us (%d)", n, sc ? ss/sc*1e6 : 0, sc
               if (cc > 0) printf ", commit mean %.0f us (%d), %.1f requests per group commit", cs/cc*1e6, cc, gc ? gs/gc : 0; print ""}'
      done
    fi
    kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null; rm -rf $work
  done
done
