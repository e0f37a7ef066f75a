#!/usr/bin/env bash
# bench-scale.sh — scale figures of one raftlock node, printed as one Markdown table:
#   memory: RSS (VmRSS, VmHWM) with SCALE_LOCKS held locks against an empty node's, per lock,
#   and the peak over every moment the node holds them (a RAFT SNAPSHOT taken halfway through
#   the fill, another after it, load, two restarts);
#   RAFT SNAPSHOT time and data dir size with those locks;
#   restart: kill -9, then SIGTERM, and the time from exec to the first granted LOCK and to the
#   first GET that finds a key held before (and RSS after restart);
#   expiry: 10k and 100k leases ending at one instant on a fresh node while 8 clients keep taking
#   locks on other keys: grants/s and latency before, during and after the expiry wave.
# Targets: 1M locks within 300 MB RSS at every moment; restart to the first LOCK with 1M locks
# within 1 s (issue #37; 5 s before it).
#
# SCALE_LOCKS (default 1000000) sets the fill; SCALE_EXPIRY (default "10000 100000") the expiry
# runs; SCALE_PROFILE_DIR, if set, receives the node's heap profile with the locks held (read it
# with `go tool pprof -sample_index=inuse_space -top bin/raftlock DIR/heap-full.pb.gz`). Uses
# bin/ from `make build` (RAFTLOCK_BIN: another server binary, to compare builds), free loopback ports and a temp dir; stops every process it starts, by
# PID, and removes the temp dir, whatever happens. About 2-4 minutes at 1M.
set -euo pipefail
cd "$(dirname "$0")/.."
locks=${SCALE_LOCKS:-1000000}
expiry_runs=${SCALE_EXPIRY:-10000 100000}
work=$(mktemp -d /tmp/raftlock-scale.XXXXXX)
pid=""      # the node
tool_pid="" # the raftlock-bench run in progress
mid_pid=""  # the snapshot taken during the fill
rows=()     # "figure|value|target" lines of the table

cleanup() {
  [ -n "$tool_pid" ] && kill "$tool_pid" 2>/dev/null || true
  [ -n "$mid_pid" ] && kill "$mid_pid" 2>/dev/null || true
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
  [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # the EXIT trap cleans up

say() { echo "== $*" >&2; }
row() { rows+=("$1|$2|$3"); }
# json EXPR reads one JSON object on stdin as d and prints the Python expression EXPR.
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; } # kB -> MB
status_kb() { awk -v f="$1:" '$1 == f {print $2}' "/proc/$pid/status"; }
cli() { redis-cli -p "$port" "$@"; }
info_field() { cli INFO "$1" | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'; }
dir_mb() { du -sb "$work/data" | awk '{printf "%.1f", $1 / 1048576}'; }

# Free loopback ports (clients, raft, pprof): the kernel picks them, the node binds them a
# moment later.
read -r port raft_port pprof_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# tool OUT CMD...: run a raftlock-bench in the background, stdout to $work/OUT, so that the
# traps can stop it (a command substitution would defer them); returns its status.
tool() {
  local out=$1
  shift
  "$@" >"$work/$out" &
  tool_pid=$!
  local rc=0
  wait "$tool_pid" || rc=$?
  tool_pid=""
  return "$rc"
}

# The heap figures come from pprof, which a node serves only with --pprof true (binaries built
# before that flag served it always, and do not know the flag).
bin=${RAFTLOCK_BIN:-bin/raftlock}
pprof_flag=()
case $("$bin" --help 2>&1 || true) in *-pprof*) pprof_flag=(--pprof true) ;; esac

# start_node: exec the node on $work/data; started_ns is when.
start_node() {
  started_ns=$(date +%s%N)
  "$bin" --id scale --dir "$work/data" --addr "127.0.0.1:$port" --raft-addr "127.0.0.1:$raft_port" \
    --metrics-addr "127.0.0.1:$pprof_port" "${pprof_flag[@]}" --log-level info 2>>"$work/node.log" &
  pid=$!
}

# stop_node SIGNAL: signal the node and wait up to 60 s for it to exit (then kill -9); sets
# stop_ms to how long it took to exit.
stop_node() {
  local t0 i
  note_peak
  t0=$(date +%s%N)
  kill -"$1" "$pid"
  for i in $(seq 600); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "node did not exit within 60 s of SIG$1; killing it" >&2
    kill -9 "$pid"
  fi
  wait "$pid" 2>/dev/null || true
  pid=""
  stop_ms=$((($(date +%s%N) - t0) / 1000000))
}

# note_peak: fold the running node's VmHWM (the kernel's high-water mark of its RSS, every
# moment of its life) into peak_kb, while the nodes hold the SCALE_LOCKS locks (peak_on).
peak_kb=0
peak_on=""
note_peak() {
  [ -n "$peak_on" ] || return 0
  local h
  h=$(status_kb VmHWM)
  [ "$h" -gt "$peak_kb" ] && peak_kb=$h
  return 0
}

# wait_ready [READ_KEY]: poll the node started at started_ns until it grants a lock (and finds
# READ_KEY); sets r to the ready tool's JSON.
wait_ready() {
  tool ready.json bin/raftlock-bench ready -addr "127.0.0.1:$port" -since "$started_ns" -timeout 120s \
    ${1:+-read-key "$1"} -json
  r=$(cat "$work/ready.json")
}

# since_log MSG: ms from started_ns to the first node.log line after it containing MSG.
since_log() {
  python3 - "$work/node.log" "$started_ns" "$1" <<'PY'
import sys, re, datetime
log, start, msg = sys.argv[1], int(sys.argv[2]) / 1e9, sys.argv[3]
for line in open(log, errors="replace"):
    m = re.match(r"time=(\S+)", line)
    if not m or msg not in line:
        continue
    t = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
    if t >= start - 0.001:
        print(f"{(t - start) * 1000:.0f}")
        break
else:
    print("?")
PY
}

# go_mem: force a GC in the node (pprof's gc=1) and set heap_alloc, heap_sys and go_sys (bytes)
# from its runtime.MemStats: the live heap, the heap the runtime holds, all it got from the OS.
go_mem() {
  local m
  m=$(curl -sf --max-time 60 "http://127.0.0.1:$pprof_port/debug/pprof/heap?debug=1&gc=1" | grep -E '^# (HeapAlloc|HeapSys|Sys) =')
  heap_alloc=$(echo "$m" | awk '$2 == "HeapAlloc" {print $4}')
  heap_sys=$(echo "$m" | awk '$2 == "HeapSys" {print $4}')
  go_sys=$(echo "$m" | awk '$2 == "Sys" {print $4}')
}
b2mb() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

restart_rows() { # label ready-json
  local label=$1 r=$2 rss hwm
  rss=$(status_kb VmRSS) hwm=$(status_kb VmHWM)
  row "Restart after $label: exec to first reply / first LOCK granted / first GET of an old key" \
    "$(echo "$r" | json '"%.0f / %.0f / %.0f ms" % (d["connected_ms"], d["write_ms"], d["read_ms"])')" \
    "<= 1 s with 1M locks"
  row "Restart after $label: snapshot restore starts / ends; leader elected (node log, from exec)" \
    "$(since_log 'starting restore from snapshot') / $(since_log 'msg="restored snapshot"'); $(since_log 'entering leader state') ms" ""
  go_mem
  row "After restart ($label): VmRSS / VmHWM; live Go heap" "$(mb "$rss") / $(mb "$hwm") MB; $(b2mb "$heap_alloc") MB" ""
  local n
  n=$(cli DBSIZE)
  [ "$n" = "$((locks + 1))" ] || row "**DBSIZE after restart ($label)**" "$n, want $((locks + 1))" "**lost locks**"
}

say "fresh node on 127.0.0.1:$port (raft $raft_port), data in $work/data"
start_node
wait_ready
row "Fresh node: exec to first LOCK granted" "$(echo "$r" | json '"%.0f ms" % d["write_ms"]')" ""
sleep 1
rss_empty=$(status_kb VmRSS)
go_mem
heap_empty=$heap_alloc
row "Empty node: VmRSS; live Go heap" "$(mb "$rss_empty") MB; $(b2mb "$heap_empty") MB" ""

say "fill: $locks locks, with a RAFT SNAPSHOT once half are in"
peak_on=1
# A snapshot during the fill: on a slower machine or a longer fill raft takes them by itself
# (every SnapshotThreshold entries), and a snapshot's copy of the table while new locks arrive
# is the fill's worst moment for memory, which the peak row below must include.
(
  while :; do
    n=$(redis-cli -p "$port" DBSIZE 2>/dev/null || echo 0)
    [ "${n:-0}" -ge $((locks / 2)) ] && break
    sleep 0.05
  done
  t0=$(date +%s%N)
  out=$(redis-cli -p "$port" RAFT SNAPSHOT 2>&1)
  echo "$out $((($(date +%s%N) - t0) / 1000000)) $n" >"$work/midfill"
) &
mid_pid=$!
tool fill.json bin/raftlock-bench fill -addr "127.0.0.1:$port" -locks "$locks" -keys-prefix scale: -json
f=$(cat "$work/fill.json")
wait "$mid_pid" || true
mid_pid=""
read -r mid_out mid_ms mid_at <"$work/midfill" || true
[ "${mid_out:-}" = OK ] || { echo "RAFT SNAPSHOT during the fill: $(cat "$work/midfill" 2>/dev/null)" >&2; exit 1; }
row "RAFT SNAPSHOT during the fill (at $mid_at locks)" "$mid_ms ms" ""
row "Fill $locks locks (LOCK scale:N 3600000 OWNER id: keys <= 12 B, owner 26 B; 32 conns x 128 pipelined)" \
  "$(echo "$f" | json '"%.1f s, %.0f locks/s, batch p99 %.0f ms" % (d["elapsed_ns"]/1e9, d["locks_per_sec"], d["batch_p99_ns"]/1e6)')" ""
held=$(cli DBSIZE)
[ "$held" = "$locks" ] || { echo "DBSIZE $held after the fill, want $locks" >&2; exit 1; }
rss=$(status_kb VmRSS) hwm=$(status_kb VmHWM) # before go_mem: its forced GC changes nothing in RSS
per_lock=$(((rss - rss_empty) * 1024 / locks))
row "RSS with $locks locks: VmRSS / VmHWM" "$(mb "$rss") / $(mb "$hwm") MB" "<= 300 MB at 1M"
row "RSS per held lock ((VmRSS - empty) / locks)" "$per_lock B (1M locks: $(((rss_empty * 1024 + per_lock * 1000000) / 1048576)) MB)" \
  "300 MB at 1M"
sleep 3 # idle: the memory governor collects after a burst and gives the free memory back
rss_idle=$(status_kb VmRSS)
row "RSS 3 s after the fill (idle): VmRSS; per held lock" "$(mb "$rss_idle") MB; $(((rss_idle - rss_empty) * 1024 / locks)) B" "<= 300 MB at 1M"
go_mem
row "Go heap after a forced GC: live (HeapAlloc) / held (HeapSys) / from the OS (Sys)" \
  "$(b2mb "$heap_alloc") / $(b2mb "$heap_sys") / $(b2mb "$go_sys") MB" ""
row "Live Go heap per held lock" "$(((heap_alloc - heap_empty) / locks)) B" ""

say "load: 16 conns LOCK/UNLOCK on other keys for 6 s, $locks locks held"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
ticks0=$(cpu_ticks)
bin/raftlock-bench -addr "127.0.0.1:$port" -conns 16 -duration 6s -warmup 0s -mode native -keys-prefix load: -json \
  >"$work/load.json" &
tool_pid=$!
rss_peak=0
while kill -0 "$tool_pid" 2>/dev/null; do
  rss_now=$(status_kb VmRSS)
  [ "$rss_now" -gt "$rss_peak" ] && rss_peak=$rss_now
  sleep 0.2
done
wait "$tool_pid"
tool_pid=""
rss_load=$(status_kb VmRSS)
l=$(cat "$work/load.json")
pairs=$(echo "$l" | json 'd["cycles"]')
cpu_us=$(((($(cpu_ticks) - ticks0) * 1000000 / $(getconf CLK_TCK)) / (pairs > 0 ? pairs : 1)))
row "Under load with $locks locks (16 conns LOCK/UNLOCK, 6 s): VmRSS at the end / highest sampled" \
  "$(mb "$rss_load") / $(mb "$rss_peak") MB" "<= 300 MB at 1M"
row "  pairs/s; node CPU per pair (/proc/PID/stat)" "$(echo "$l" | json '"%.0f" % d["cycles_per_sec"]'); $cpu_us µs" ""
if [ -n "${SCALE_PROFILE_DIR:-}" ]; then
  mkdir -p "$SCALE_PROFILE_DIR"
  curl -sf --max-time 60 -o "$SCALE_PROFILE_DIR/heap-full.pb.gz" "http://127.0.0.1:$pprof_port/debug/pprof/heap?gc=1"
fi
row "Automatic snapshots during the fill: last index / snapshots kept" \
  "$(info_field raft raft_last_snapshot_index) of $(info_field raft raft_last_index) / $(info_field raft store_snapshots)" ""
row "Data dir after fill" "$(dir_mb) MB" ""

say "RAFT SNAPSHOT"
cli LOCK scale:snapmark 3600000 >/dev/null # something new, so the snapshot is not refused as empty
t0=$(date +%s%N)
out=$(cli RAFT SNAPSHOT)
snap_ms=$((($(date +%s%N) - t0) / 1000000))
[ "$out" = OK ] || { echo "RAFT SNAPSHOT: $out" >&2; exit 1; }
row "RAFT SNAPSHOT with $locks locks" "$snap_ms ms" ""
row "After the snapshot: VmRSS / VmHWM; data dir" "$(mb "$(status_kb VmRSS)") / $(mb "$(status_kb VmHWM)") MB; $(dir_mb) MB" ""

say "kill -9 and restart"
stop_node 9
start_node
wait_ready scale:0
restart_rows "kill -9" "$r"

say "SIGTERM and restart"
stop_node TERM
row "SIGTERM to exit, $locks locks" "$stop_ms ms" ""
start_node
wait_ready scale:0
restart_rows "SIGTERM" "$r"
fill_rate=$(echo "$f" | json 'int(d["locks_per_sec"])')
stop_node TERM
peak_on=""
row "Peak RSS with $locks locks, every moment (the highest VmHWM of the node's three lives: fill, snapshots and load; after kill -9; after SIGTERM)" \
  "$(mb "$peak_kb") MB" "<= 300 MB at 1M"

say "expiry runs on a fresh node"
rm -rf "$work/data"
start_node
wait_ready
# phase NAME FIELD: FIELD of phase NAME of the expiry run's JSON in $e.
phase() { echo "$e" | json "{p['name']: p for p in d['phases']}['$1']['$2']"; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns / 1e6}'; }
for k in $expiry_runs; do
  # Every lease ends lease_ttl after its fill starts: leave the fill 1.5x the time the big fill
  # needed per lock, and at least 3 s.
  ttl_ms=$((k * 1500 / (fill_rate > 0 ? fill_rate : 1) + 1000))
  ttl_ms=$((ttl_ms > 3000 ? ttl_ms : 3000))
  say "expiry: $k leases, lease-ttl ${ttl_ms}ms"
  tool expiry.json bin/raftlock-bench expiry -addr "127.0.0.1:$port" -leases "$k" -lease-ttl "${ttl_ms}ms" -json ||
    echo "(the expiry run reported failures: see above; its figures follow)" >&2
  e=$(cat "$work/expiry.json")
  [ -n "$e" ] || { echo "expiry run with $k leases printed nothing" >&2; exit 1; }
  row "Expiry of $k leases at one instant: all gone after the deadline" \
    "$(echo "$e" | json '("%.0f ms (%.0f expiries/s)" % (d["drain_lag_ns"]/1e6, d["expiries_per_sec"])) if d["drained"] else "NOT DRAINED"')" ""
  row "  grants/s before / hold / **wave** / after (8 clients, LOCK+UNLOCK)" \
    "$(printf '%.0f / %.0f / **%.0f** / %.0f' "$(phase before per_sec)" "$(phase hold per_sec)" \
      "$(phase wave per_sec)" "$(phase after per_sec)")" "no stall"
  row "  slowest 250 ms of grants/s: before / wave / after" \
    "$(phase before min_window_per_sec | cut -d. -f1) / $(phase wave min_window_per_sec | cut -d. -f1) / $(phase after min_window_per_sec | cut -d. -f1)" \
    "-1: phase under 250 ms"
  row "  grant p99 before / **wave** / after" \
    "$(ms "$(phase before p99_ns)") / **$(ms "$(phase wave p99_ns)")** / $(ms "$(phase after p99_ns)") ms" ""
  row "  grant p999 and max during the wave" \
    "$(ms "$(phase wave p999_ns)") / $(ms "$(phase wave max_ns)") ms" ""
  row "  probe errors / lease fill" \
    "$(echo "$e" | json '"%d / %d leases in %.1f s%s" % (d["probe_errors"], d["fill"]["granted"], d["fill"]["elapsed_ns"]/1e9, (" ABORTED: " + d["aborted"]) if d.get("aborted") else "")')" ""
done
stop_node TERM

echo
echo "raftlock scale figures — $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD)"
echo
echo "| Figure | Value | Target |"
echo "|---|---|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r a b c <<<"$r"
  echo "| $a | $b | $c |"
done
