#!/usr/bin/env bash
# tests/clients/run.sh — raftlock's client-library compatibility matrix.
#
# Builds raftlock, then for each setup starts the servers on free loopback ports and runs every
# client suite against them:
#   redis       a real redis-server (plus a one-node cluster-enabled one for cluster clients):
#               the baseline, proving the tests themselves
#   1-node      one raftlock node
#   3-leader    a 3-node raftlock cluster, clients on the leader (the second owner on a follower)
#   3-follower  the same cluster, clients on a follower (the second owner on the other follower)
#   3-groups    three nodes of four raft groups whose leaders are spread over them: clients on
#               every node, cluster-mode clients given every node
# Suites: go (tests/clients: go-redis, redsync, redislock, rueidislock), nodejs (tests/nodejs:
# ioredis+redlock v4/v5, node-redis, redis-semaphore, @sesamecare-oss/redlock, redlock-universal,
# node-redis-warlock, redis-lock), python (tests/python: redis-py Lock, django-redis), php
# (tests/php: Laravel cache locks, Symfony Lock's RedisStore; phpredis and predis). The suites of
# one setup run side by side (each library on keys of its own); setups run one after the other.
# Prints a library x scenario x setup matrix and, last, "N passed, M failed"; exits non-zero on
# any failure. A scenario that has a result on the redis setup and none on a raftlock setup shows
# as MISSING there and counts as failed: a library that ran nothing on raftlock fails each of its
# scenarios (the check needs redis among CLIENTS_SETUPS). Every process it starts is stopped by
# PID on exit, whatever happens.
#
# KNOWN_GAPS (below) lists the scenarios that need a command raftlock does not have yet. They
# still run everywhere; on raftlock their failure shows as "gap" and is not counted, but a gap
# that passes on raftlock fails the run (take it off the list), and so does one that fails on
# redis-server or is listed but not run.
#
# Needs: go, redis-server + redis-cli (Debian: redis-server, redis-tools), node + npm (it runs
# `npm ci` in tests/nodejs when node_modules is missing or older than package-lock.json), python3
# with redis-py and django-redis (Debian: python3-redis, python3-django-redis; Debian's
# /usr/bin/python3 is preferred), php with phpredis, predis, Illuminate cache/redis and Symfony
# Lock (Debian: php-cli php-redis php-predis php-illuminate-cache php-illuminate-redis
# php-symfony-lock). Installs nothing else.
#
# Environment:
#   RAFTLOCK_CLIENTS_TIMEOUT  seconds the whole run (builds, servers, suites) may take, default 600
#                    (a full run takes about 150): past it, the run says so, stops every process
#                    it started and fails, so that a hanging setup cannot hold `make test`.
#   CLIENTS_SETUPS   setups to run (default "redis 1-node 3-leader 3-follower 3-groups")
#   CLIENTS_SUITES   suites to run (default "go nodejs python php")
#   RAFTLOCK_BIN     test this raftlock binary instead of building one
#   RAFTLOCK_TAGS    build tags for `go build ./cmd/raftlock`
#   CLIENTS_KEEP=1   keep the work directory (logs, data) even when everything passed
#   CLIENTS_MARKDOWN=FILE  also write the matrix as a Markdown table to FILE: one row per library,
#                    a column per setup (redis 1-node 3-leader 3-follower 3-groups), each cell "pass (N)"
#                    when all N scenarios of the library passed there, else what did not (e.g.
#                    "2 of 9 fail", "no result" when it ran on redis but left nothing there), or
#                    "-" when it did not run there. A FILE with the lines
#                    <!-- client-matrix:begin --> and <!-- client-matrix:end --> keeps the rest:
#                    the table replaces what is between them (CLIENTS_MARKDOWN=docs/compatibility.md
#                    tests/clients/run.sh). Output and exit status are the same with or without it.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
setups=${CLIENTS_SETUPS:-"redis 1-node 3-leader 3-follower 3-groups"}
suites=${CLIENTS_SUITES:-"go nodejs python php"}
suite_timeout=150 # seconds, per suite and setup; each takes 5-30 s
clients_timeout=${RAFTLOCK_CLIENTS_TIMEOUT:-600}
if [[ ! $clients_timeout =~ ^[1-9][0-9]*$ ]]; then
  echo "RAFTLOCK_CLIENTS_TIMEOUT=$clients_timeout: want a whole number of seconds above 0" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
start_time=$SECONDS
deadline=$((start_time + clients_timeout))

# KNOWN_GAPS: "library scenario what raftlock lacks" (the commands the library sends that raftlock
# answers with an unknown-command error, read from the library's source and seen in its error).
# On raftlock these scenarios must fail; on redis-server they must pass.
KNOWN_GAPS=()

# SLOT_GAPS: the same for the 3-groups setup only: "library scenario why" for the scenarios that a
# cluster of several raft groups refuses as Redis Cluster does (keys of different slots in one
# request: CROSSSLOT), which pass on one group and on a standalone redis-server.
SLOT_GAPS=(
  "node/warlock extend its touch script declares the TTL and the lock id as KEYS of the EVALSHA: keys of different slots, refused with CROSSSLOT as on Redis Cluster"
)

work=$(mktemp -d "${TMPDIR:-/tmp}/raftlock-clients.XXXXXX")
pids=()   # servers of the current setup
builds=() # background builds
suite_jobs=() # background suite runners (subshells)

stop_all() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  pids=()
}

# The bound on the whole run: a watchdog sends this shell SIGALRM at the deadline; on_deadline
# says so and exits, and cleanup stops what is running. The shell takes the signal at once while
# it waits for a background job (the suites, the builds), but only after a command it runs in the
# foreground has finished: those are bounded too (cli, npm ci).
watchdog=""
stop_watchdog() {
  [[ -n $watchdog ]] || return 0
  pkill -TERM -P "$watchdog" 2>/dev/null # its sleep: the watchdog then ends without signalling
  wait "$watchdog" 2>/dev/null
  watchdog=""
}
on_deadline() {
  local rows np nf
  rows=$(cat "$work"/rows-*.tsv 2>/dev/null)
  np=$(grep -c $'\tpass\t' <<<"$rows") nf=$(grep -c $'\tfail\t' <<<"$rows")
  log "the run passed its bound of $clients_timeout s (RAFTLOCK_CLIENTS_TIMEOUT)${setup:+ in setup $setup}:" \
    "stopping every process it started; the run fails"
  printf '%s\n' "stopped at the $clients_timeout s bound (RAFTLOCK_CLIENTS_TIMEOUT)${setup:+ in setup $setup}: the matrix is incomplete" \
    "$np passed, $((nf + 1)) failed"
  exit 124
}

keep_work=1
cleanup() {
  trap - EXIT INT TERM
  trap '' ALRM # a watchdog that fires now changes nothing
  stop_watchdog
  local p
  for p in "${builds[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${suite_jobs[@]}"; do
    pkill -TERM -P "$p" 2>/dev/null # its `timeout`, which passes the signal to the suite
    kill -TERM "$p" 2>/dev/null
  done
  stop_all
  if [[ $keep_work == 0 ]]; then
    rm -rf "$work"
  elif [[ $keep_work == 1 ]]; then
    echo "logs and data: $work" >&2
  fi
}
trap cleanup EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM
trap on_deadline ALRM
(sleep "$clients_timeout" && kill -ALRM $$) 2>/dev/null &
watchdog=$!

log() { printf '[%3ds] %s\n' $((SECONDS - start_time)) "$*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
# left prints the seconds left before the deadline, at least 1.
left() { echo $((deadline - SECONDS > 1 ? deadline - SECONDS : 1)); }
# cli PORT ARGS...: redis-cli on PORT, 2 s at most: a server that accepts and never answers must
# not hold this shell, nor the deadline's trap, which waits for a command in the foreground.
cli() { timeout 2 redis-cli -p "$@"; }

# free_port prints a port nothing listens on, below the ephemeral range, not handed out before.
used_ports=" "
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    [[ $used_ports == *" $p "* ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      used_ports+="$p "
      echo "$p"
      return
    fi
  done
}

# Rows: library<TAB>scenario<TAB>pass|fail|skip<TAB>detail. The suites write
# rows-SETUP-SUITE.tsv; this script's own rows (servers, runners) go to rows-SETUP.tsv.
add_row() { printf '%s\t%s\t%s\t%s\n' "$2" "$3" "$4" "$5" >>"$work/rows-$1.tsv"; }

# --- builds (in the background: the Redis baseline's Node and Python suites run meanwhile) -------
have redis-cli || { echo "redis-cli is needed (apt-get install redis-tools)" >&2; echo "0 passed, 1 failed"; exit 1; }
if [[ -z ${RAFTLOCK_BIN:-} ]]; then
  bin=$work/raftlock
  log "building raftlock${RAFTLOCK_TAGS:+ (tags: $RAFTLOCK_TAGS)} and the Go client tests"
  go -C "$root" build ${RAFTLOCK_TAGS:+-tags "$RAFTLOCK_TAGS"} -o "$bin" ./cmd/raftlock >"$work/build.log" 2>&1 &
  build_raftlock=$!
  builds+=($!)
else
  bin=$RAFTLOCK_BIN build_raftlock=""
fi
build_go=""
if [[ " $suites " == *" go "* ]]; then
  go -C "$root/tests/clients" test -c -o "$work/clients.test" . >"$work/build-go.log" 2>&1 &
  build_go=$!
  builds+=($!)
fi

suite_problem=() # "suite: why it cannot run"
for s in $suites; do
  case $s in
  go) ;;
  nodejs)
    if ! have node || ! have npm; then
      suite_problem+=("node: node/npm not installed")
    elif [[ ! -d $root/tests/nodejs/node_modules \
      || $root/tests/nodejs/package-lock.json -nt $root/tests/nodejs/node_modules/.package-lock.json ]]; then
      log "npm ci in tests/nodejs"
      if ! (cd "$root/tests/nodejs" && timeout -k 5 "$(left)" npm ci --no-audit --no-fund) >"$work/npm-ci.log" 2>&1; then
        suite_problem+=("node: npm ci failed: $(tail -3 "$work/npm-ci.log" | tr '\n' ' ')")
      fi
    fi
    ;;
  python)
    python=
    for py in /usr/bin/python3 python3; do
      if have "$py" && "$py" -c 'import redis' 2>/dev/null; then python=$py && break; fi
    done
    [[ -n $python ]] || suite_problem+=("python: no python3 with redis-py (apt-get install python3-redis)")
    if [[ -n $python ]] && ! "$python" -c 'import django_redis' 2>/dev/null; then
      suite_problem+=("python: $python has no django-redis (apt-get install python3-django-redis)")
    fi
    ;;
  php)
    if ! have php; then
      suite_problem+=("php: php not installed (apt-get install php-cli)")
    elif ! php -r 'exit(extension_loaded("redis") && stream_resolve_include_path("Predis/autoload.php")
        && stream_resolve_include_path("Illuminate/Cache/RedisLock.php")
        && stream_resolve_include_path("Illuminate/Redis/RedisManager.php")
        && stream_resolve_include_path("Symfony/Component/Lock/Store/RedisStore.php") ? 0 : 1);'; then
      suite_problem+=("php: a library is missing (apt-get install php-redis php-predis php-illuminate-cache php-illuminate-redis php-symfony-lock)")
    fi
    ;;
  *) suite_problem+=("$s: unknown suite") ;;
  esac
done

go_ready="" raftlock_ready=""
wait_go_build() {
  [[ -n $go_ready || -z $build_go ]] && return
  wait "$build_go"
  local rc=$?
  go_ready=1
  if ((rc != 0)); then
    suite_problem+=("go: go test -c failed: $(tail -5 "$work/build-go.log" | tr '\n' ' ')")
    cat "$work/build-go.log" >&2
  fi
}
wait_raftlock_build() { # -> 0 when the binary is there
  if [[ -z $raftlock_ready && -n $build_raftlock ]]; then
    wait "$build_raftlock"
    raftlock_ready=$?
    ((raftlock_ready == 0)) || cat "$work/build.log" >&2
  fi
  [[ -x $bin && ${raftlock_ready:-0} == 0 ]]
}

# --- servers ------------------------------------------------------------------------------------
# wait_info PORT SECTION PATTERN: until `INFO SECTION` on PORT matches PATTERN (10 s at most).
wait_info() {
  local end=$((SECONDS + 10))
  until cli "$1" INFO "$2" 2>/dev/null | grep -q "$3"; do
    ((SECONDS < end)) || return 1
    sleep 0.1
  done
}

start_redis() { # -> addrs, cluster_addrs
  have redis-server || return 1
  local p1 p2 p3 i
  # The cluster bus port is given explicitly: by default it is the client port + 10000, which
  # free_port did not check (a collision there once made the baseline fail to start). The
  # announced IP too: a one-node cluster names itself "" in CLUSTER SLOTS otherwise, which
  # ioredis's cluster client cannot dial (go-redis takes the address it asked).
  p1=$(free_port) p2=$(free_port) p3=$(free_port)
  mkdir -p "$work/redis"
  redis-server --port "$p1" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/redis" \
    >"$work/redis/plain.log" 2>&1 &
  pids+=($!)
  redis-server --port "$p2" --bind 127.0.0.1 --save '' --appendonly no --dir "$work/redis" \
    --cluster-enabled yes --cluster-port "$p3" --cluster-config-file "$work/redis/nodes-$p2.conf" \
    --cluster-announce-ip 127.0.0.1 \
    >"$work/redis/cluster.log" 2>&1 &
  pids+=($!)
  wait_info "$p1" server redis_version || return 1
  wait_info "$p2" server redis_version || return 1
  cli "$p2" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null || return 1
  for i in $(seq 100); do
    cli "$p2" CLUSTER INFO | grep -q 'cluster_state:ok' && break
    sleep 0.1
  done
  addrs=127.0.0.1:$p1 cluster_addrs=127.0.0.1:$p2
}

node_ports=()
start_raftlock() { # N [GROUPS] -> node_ports (client ports), leader, followers
  local n=$1 groups=${2:-1} i peers="" raft=()
  node_ports=()
  for ((i = 1; i <= n; i++)); do
    node_ports+=("$(free_port)")
    raft+=("$(free_port)")
    peers+="${peers:+,}n$i=127.0.0.1:${raft[i - 1]}"
  done
  for ((i = 1; i <= n; i++)); do
    local dir=$work/raftlock-$n-g$groups
    local args=(--id "n$i" --dir "$dir/n$i" --addr "127.0.0.1:${node_ports[i - 1]}"
      --raft-addr "127.0.0.1:${raft[i - 1]}" --groups "$groups")
    ((n > 1)) && args+=(--peers "$peers")
    mkdir -p "$dir/n$i"
    "$bin" "${args[@]}" >"$dir/n$i.log" 2>&1 &
    pids+=($!)
  done
  find_leader
}

# group_leaders PORT: the leader of each raft group, as the node at PORT names them (INFO raft).
group_leaders() {
  cli "$1" INFO raft 2>/dev/null | tr -d '\r' | sed -n 's/^raft_group[0-9]*:.*leader=\([^,]*\).*/\1/p' | tr '\n' ' '
}

# group_terms PORT: each raft group's leader and term (leader@term), as the node at PORT has them:
# unchanged across a run only if no group changed leader during it, even and back.
group_terms() {
  cli "$1" INFO raft 2>/dev/null | tr -d '\r' | sed -n 's/^raft_group[0-9]*:.*leader=\([^,]*\),term=\([0-9]*\).*/\1@\2/p' | tr '\n' ' '
}

# wait_spread: until every node names, for each of the four raft groups, the leader the balancer
# places it on (cluster/balance.go: group g on the voter g mod 3 by ID), so that no hand-off is
# still to come during the run; 40 s at most.
wait_spread() {
  local p first ok end=$((SECONDS + 40))
  while ((SECONDS < end)); do
    ok=1 first=""
    for p in "${node_ports[@]}"; do
      local l
      l=$(group_leaders "$p")
      [[ -z $first ]] && first=$l
      [[ $l == "$first" && $l != *" "" "* && -n $l ]] || ok=0
    done
    if ((ok)) && [[ $first == "n1 n2 n3 n1 " ]]; then
      spread=$first
      return 0
    fi
    sleep 0.2
  done
  return 1
}

find_leader() { # -> leader (port), followers (ports); 15 s at most
  local p end=$((SECONDS + 15))
  while ((SECONDS < end)); do
    leader="" followers=()
    for p in "${node_ports[@]}"; do
      if cli "$p" INFO raft 2>/dev/null | grep -q '^raft_state:Leader'; then
        leader=$p
      else
        followers+=("$p")
      fi
    done
    if [[ -n $leader ]] && cli "$leader" INFO raft | grep -q '^raft_ready:true'; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# --- suites ---------------------------------------------------------------------------------------
# run_suite SETUP SUITE: one suite against $addrs / $cluster_addrs, rows into rows-SETUP-SUITE.tsv.
run_suite() {
  local setup=$1 s=$2 rows=$work/rows-$1-$2.tsv logf=$work/$1-$2.log rc
  : >"$rows"
  local env=(RAFTLOCK_ADDRS="$addrs" RAFTLOCK_CLUSTER_ADDRS="$cluster_addrs" RAFTLOCK_MATRIX="$rows")
  case $s in
  go)
    # Twice: in database 0, then in database 9 (its libraries named "...@db9"; cluster-mode
    # clients, which have database 0 only, skip).
    env "${env[@]}" timeout -k 5 "$suite_timeout" "$work/clients.test" -test.count=1 -test.v \
      -test.timeout "$((suite_timeout - 10))s" >"$logf" 2>&1
    rc=$?
    env "${env[@]}" RAFTLOCK_DB=9 timeout -k 5 "$suite_timeout" "$work/clients.test" -test.count=1 \
      -test.v -test.timeout "$((suite_timeout - 10))s" >>"$logf" 2>&1 && ((rc == 0))
    ;;
  nodejs)
    (cd "$root/tests/nodejs" && env "${env[@]}" timeout -k 5 "$suite_timeout" \
      node --test --test-concurrency=2 --test-reporter=spec) >"$logf" 2>&1
    ;;
  python)
    (cd "$root/tests/python" && env "${env[@]}" timeout -k 5 "$suite_timeout" \
      "$python" -m unittest -v test_redis_lock test_django_redis) >"$logf" 2>&1
    ;;
  php)
    (cd "$root/tests/php" && env "${env[@]}" timeout -k 5 "$suite_timeout" php locks.php) >"$logf" 2>&1
    ;;
  esac
  rc=$?
  if ((rc != 0)) && ! grep -q $'\tfail\t' "$rows"; then
    # The runner failed without a failed scenario (a crash, a timeout, a test outside the matrix).
    printf '%s\t%s\t%s\t%s\n' "$s-suite" runner fail "exit status $rc; see $logf" >>"$rows"
  elif [[ ! -s $rows ]]; then
    printf '%s\t%s\t%s\t%s\n' "$s-suite" runner fail "ran no scenario; see $logf" >>"$rows"
  fi
}

# run_setup SETUP: the suites side by side (the Go suite last to start: it may still be building).
run_setup() {
  local setup=$1 s p why bg=()
  log "$setup: clients -> $addrs${cluster_addrs:+ (cluster clients -> $cluster_addrs)}"
  for s in $(printf '%s\n' $suites | grep -vx go) $(printf '%s\n' $suites | grep -x go); do
    [[ $s == go ]] && wait_go_build
    why=""
    for p in "${suite_problem[@]}"; do [[ $p == "$s: "* ]] && why=${p#"$s: "}; done
    if [[ -n $why ]]; then
      add_row "$setup" "$s-suite" runner fail "$why"
      continue
    fi
    run_suite "$setup" "$s" &
    bg+=($!)
    suite_jobs+=($!)
  done
  for p in "${bg[@]}"; do wait "$p"; done
  suite_jobs=()
  log "$setup: done ($(cat "$work"/rows-"$setup"-*.tsv 2>/dev/null | grep -c $'\tpass\t') passed," \
    "$(cat "$work"/rows-"$setup"*.tsv 2>/dev/null | grep -c $'\tfail\t') failed, known gaps included)"
}

setup_failed() { add_row "$1" servers start fail "$2"; log "$1: $2"; }

for setup in $setups; do
  : >"$work/rows-$setup.tsv"
  case $setup in
  redis)
    if start_redis; then
      run_setup redis
    else
      setup_failed redis "could not start redis-server (apt-get install redis-server)"
    fi
    stop_all
    ;;
  1-node)
    stop_all
    if ! wait_raftlock_build; then
      setup_failed 1-node "no raftlock binary (build failed: see $work/build.log)"
    elif start_raftlock 1; then
      addrs=127.0.0.1:$leader cluster_addrs=""
      run_setup 1-node
    else
      setup_failed 1-node "no leader after 15 s; see $work/raftlock-1-g1"
    fi
    stop_all
    node_ports=()
    ;;
  3-leader | 3-follower)
    if ! wait_raftlock_build; then
      setup_failed "$setup" "no raftlock binary (build failed: see $work/build.log)"
      continue
    fi
    if [[ ${#node_ports[@]} -ne 3 ]] || ! find_leader; then
      stop_all
      start_raftlock 3 || { setup_failed "$setup" "no leader after 15 s; see $work/raftlock-3-g1"; continue; }
    fi
    if [[ $setup == 3-leader ]]; then
      addrs=127.0.0.1:$leader,127.0.0.1:${followers[0]},127.0.0.1:${followers[1]}
    else
      addrs=127.0.0.1:${followers[0]},127.0.0.1:${followers[1]},127.0.0.1:$leader
    fi
    cluster_addrs="" before=$leader
    run_setup "$setup"
    if ! find_leader || [[ $leader != "$before" ]]; then
      add_row "$setup" raftlock stable-leader fail "the leader changed during the run ($before -> ${leader:-none}): the setup was not what it says"
    else
      add_row "$setup" raftlock stable-leader pass ""
    fi
    ;;
  3-groups)
    # Three nodes running four raft groups (docs/groups.md) whose leaders sit on all three: plain
    # clients spread over the nodes, cluster-mode clients given every node.
    stop_all
    if ! wait_raftlock_build; then
      setup_failed "$setup" "no raftlock binary (build failed: see $work/build.log)"
      continue
    fi
    start_raftlock 3 4 || { setup_failed "$setup" "no leader after 15 s; see $work/raftlock-3-g4"; stop_all; continue; }
    wait_spread || { setup_failed "$setup" "the groups' leaders did not spread over the nodes in 40 s; see $work/raftlock-3-g4"; stop_all; continue; }
    addrs=127.0.0.1:${node_ports[0]},127.0.0.1:${node_ports[1]},127.0.0.1:${node_ports[2]}
    cluster_addrs=$addrs
    before=$(group_terms "${node_ports[0]}")
    run_setup "$setup"
    after=$(group_terms "${node_ports[0]}")
    if [[ -z $before || $after != "$before" ]]; then
      add_row "$setup" raftlock stable-leader fail "a group's leader or term changed during the run ($before -> ${after:-none})"
    else
      add_row "$setup" raftlock stable-leader pass ""
    fi
    stop_all
    node_ports=()
    ;;
  *) setup_failed "$setup" "unknown setup" ;;
  esac
done
stop_all
stop_watchdog # the bound covers the builds, servers and suites; the matrix is quick

# --- the matrix -----------------------------------------------------------------------------------
# Rows of every setup, ordered by suite, library, then scenario in flow order.
for setup in $setups; do
  for s in $suites runner; do
    f=$work/rows-$setup-$s.tsv
    [[ $s == runner ]] && f=$work/rows-$setup.tsv
    [[ -f $f ]] || continue
    awk -F'\t' -v OFS='\t' -v setup="$setup" -v suite="$s" -v suites="$suites runner" '
      BEGIN {
        n = split(suites, S, " "); for (i = 1; i <= n; i++) rank[S[i]] = i
        m = split("connect acquire contend lock-0s extend refresh auto-refresh reacquire wrong-owner " \
          "release restore force-release wait block expiry add shared cache-db1", C, " ")
        for (i = 1; i <= m; i++) sc[C[i]] = i
      }
      { print rank[suite], $1, ($2 in sc) ? sc[$2] : 99, $2, setup, $3, $4 }' "$f"
  done
done | sort -t$'\t' -s -k1,1n -k2,2 -k3,3n >"$work/matrix.tsv"

# KNOWN_GAPS and SLOT_GAPS as library<TAB>scenario<TAB>what raftlock lacks<TAB>the setups it
# applies to (* for every raftlock setup).
{
  for g in "${KNOWN_GAPS[@]}"; do
    read -r glib gsc gwhat <<<"$g"
    printf '%s\t%s\t%s\t*\n' "$glib" "$gsc" "$gwhat"
  done
  for g in "${SLOT_GAPS[@]}"; do
    read -r glib gsc gwhat <<<"$g"
    printf '%s\t%s\t%s\t3-groups\n' "$glib" "$gsc" "$gwhat"
  done
} >"$work/gaps.tsv"

# write_markdown TABLE FILE: FILE becomes TABLE; or, when FILE has the lines
# "<!-- client-matrix:begin -->" and "<!-- client-matrix:end -->" (docs/compatibility.md), only
# what is between them is replaced.
write_markdown() {
  local begin='<!-- client-matrix:begin -->' end='<!-- client-matrix:end -->'
  if [[ -f $2 ]] && grep -qxF "$begin" "$2" && grep -qxF "$end" "$2"; then
    awk -v begin="$begin" -v end="$end" -v table="$1" '
      $0 == end { while ((getline l <table) > 0) print l; skip = 0 }
      !skip { print }
      $0 == begin { skip = 1 }' "$2" >"$work/spliced.md" && cat "$work/spliced.md" >"$2"
  else
    cp "$1" "$2"
  fi
} 2>/dev/null

set -- $setups
matrix=$(awk -F'\t' -v setups="$*" -v suites="$suites" -v md="$work/matrix.md" '
BEGIN {
  ns = split(setups, S, " ")
  nsu = split(suites, SU, " "); for (i = 1; i <= nsu; i++) selected[SU[i]] = 1
}
FILENAME == ARGV[1] { gap[$1 SUBSEP $2] = $3; gapset[$1 SUBSEP $2] = $4; ng++; glib[ng] = $1; gsc[ng] = $2; gsets[ng] = $4; next }
{
  k = $2 SUBSEP $4
  if (!(k in seen)) { seen[k] = 1; order[++n] = k; lib[n] = $2; sc[n] = $4 }
  r = $6; d = $7
  # A known gap, on raftlock: its failure is expected; its success means the list is out of date.
  if ((k in gap) && $5 != "redis" && (gapset[k] == "*" || gapset[k] == $5)) {
    if (r == "fail") {
      r = "gap"
      # listed once per library and lack, with its scenarios and the first error seen
      g = $2 SUBSEP gap[k]
      if (!(g in gapi)) { gapi[g] = ++ngl; gaplib[ngl] = $2; gapwhat[ngl] = gap[k]; gapsaw[ngl] = d }
      if (!((g, $4) in gapsc)) { gapsc[g, $4] = 1; gapscs[gapi[g]] = gapscs[gapi[g]] " " $4 }
    } else if (r == "pass") {
      r = "fail"; d = "a known gap passes now: take it off KNOWN_GAPS or SLOT_GAPS in tests/clients/run.sh"
    }
  }
  # a scenario recorded twice in one setup (it should not be): the worse result wins
  if (!((k, $5) in cell) || r == "fail") cell[k, $5] = r
  if (r == "fail") fails[++nf] = sprintf("%-11s %-22s %-13s %s", $5, $2, $4, d)
}
END {
  # A known gap of a suite that ran must have run on every raftlock setup it applies to.
  for (j = 1; j <= ng; j++) {
    su = glib[j]; sub(/\/.*/, "", su)
    if (su == "node") su = "nodejs"
    else if (su != "python" && su != "php") su = "go"
    if (!(su in selected)) continue
    for (i = 1; i <= ns; i++) {
      if (S[i] == "redis" || (gsets[j] != "*" && gsets[j] != S[i]) || ((glib[j] SUBSEP gsc[j], S[i]) in cell)) continue
      fails[++nf] = sprintf("%-11s %-22s %-13s %s", S[i], glib[j], gsc[j], "a known gap did not run (renamed? take it off KNOWN_GAPS or SLOT_GAPS)")
      nfail++
    }
  }
  # A scenario with a result on redis-server and none on a raftlock setup: its suite dropped it
  # without a word (a library that ran nothing there, a test that returned early). It fails, one
  # line per library and setup. Not the setup checks, the runners or a known gap (checked above).
  for (i = 1; i <= ns; i++) if (S[i] == "redis") baseline = 1
  for (j = 1; baseline && j <= n; j++) {
    k = order[j]
    if (lib[j] == "servers" || lib[j] == "raftlock" || sc[j] == "runner" || !((k, "redis") in cell)) continue
    nred[lib[j]]++
    for (i = 1; i <= ns; i++) {
      # a known gap of this setup was checked above
      if (S[i] == "redis" || ((k, S[i]) in cell) || ((k in gap) && (gapset[k] == "*" || gapset[k] == S[i]))) continue
      cell[k, S[i]] = "missing"
      m = lib[j] SUBSEP S[i]
      if (!(m in nmiss)) { mlib[++nm] = lib[j]; msetup[nm] = S[i] }
      nmiss[m]++; mscs[m] = mscs[m] (nmiss[m] > 1 ? "," : "") sc[j]
    }
  }
  for (i = 1; i <= nm; i++) {
    m = mlib[i] SUBSEP msetup[i]
    if (nmiss[m] == nred[mlib[i]]) fails[++nf] = sprintf("%-11s %-22s %-13s %s", msetup[i], mlib[i], "all " nmiss[m], "no result on this setup, though the library ran on redis-server")
    else fails[++nf] = sprintf("%-11s %-22s %-13s %s", msetup[i], mlib[i], mscs[m], "no result on this setup, though it ran on redis-server")
  }
  wl = 7; for (j = 1; j <= n; j++) if (length(lib[j]) > wl) wl = length(lib[j])
  printf "\n%-*s  %-14s", wl, "library", "scenario"
  for (i = 1; i <= ns; i++) printf "  %-10s", S[i]
  printf "\n"
  for (j = 1; j <= n; j++) {
    k = order[j]
    printf "%-*s  %-14s", wl, lib[j], sc[j]
    for (i = 1; i <= ns; i++) {
      r = ((k, S[i]) in cell) ? cell[k, S[i]] : "-"
      if (r == "fail") r = "FAIL"
      else if (r == "missing") r = "MISSING"
      printf "  %-10s", r
      if (r == "pass") np++
      else if (r == "FAIL" || r == "MISSING") nfail++
      else if (r == "skip") nskip++
      else if (r == "gap") ngap++
    }
    printf "\n"
  }
  if (nf) {
    printf "\nfailures (setup, library, scenario, first error):\n"
    for (i = 1; i <= nf; i++) print "  " fails[i]
  }
  if (ngl) {
    printf "\nknown gaps on raftlock (library: scenarios; what raftlock lacks; what the library saw first):\n"
    for (i = 1; i <= ngl; i++) printf "  %s:%s\n      lacks %s\n      saw   %s\n", gaplib[i], gapscs[i], gapwhat[i], substr(gapsaw[i], 1, 150)
  }
  markdown()
  printf "\n%d skipped (a scenario they need did not pass); - = not applicable; MISSING = no result, counted as failed\n", nskip
  printf "%d known gaps (failed on raftlock as KNOWN_GAPS expects, not counted)\n", ngap
  printf "%d passed, %d failed\n", np + 0, nfail + 0
  exit (nfail > 0 || np == 0)
}
# markdown writes md: a row per library (the setup checks "servers" and "raftlock" excepted: their
# failures are listed under the table), a column per setup of the full matrix.
function markdown(   cols, nc, i, j, c, L, nl, libs, seen2, cnt, bad, what) {
  nc = split("redis 1-node 3-leader 3-follower 3-groups", cols, " ")
  printf "<!-- generated by tests/clients/run.sh (CLIENTS_SETUPS=\"%s\" CLIENTS_SUITES=\"%s\") -->\n", setups, suites >md
  printf "| library |" >md
  for (c = 1; c <= nc; c++) printf " %s |", cols[c] >md
  printf "\n|---|" >md
  for (c = 1; c <= nc; c++) printf "---|" >md
  printf "\n" >md
  for (j = 1; j <= n; j++) if (!(lib[j] in seen2)) { seen2[lib[j]] = 1; libs[++nl] = lib[j] }
  for (i = 1; i <= nl; i++) {
    L = libs[i]
    if (L == "servers" || L == "raftlock") continue
    printf "| %s |", L >md
    for (c = 1; c <= nc; c++) {
      delete cnt
      for (j = 1; j <= n; j++) {
        if (lib[j] != L || !((order[j], cols[c]) in cell)) continue
        cnt["all"]++; cnt[cell[order[j], cols[c]]]++
      }
      if (!cnt["all"]) what = "-"
      else if (cnt["pass"] == cnt["all"]) what = "pass (" cnt["all"] ")"
      else if (cnt["missing"] == cnt["all"]) what = "no result"
      else {
        if (cnt["fail"]) what = cnt["fail"] " of " cnt["all"] " fail"
        else what = (cnt["pass"] + 0) " of " cnt["all"] " pass"
        if (cnt["skip"]) what = what ", " cnt["skip"] " skipped"
        if (cnt["gap"]) what = what ", " cnt["gap"] " known gap" (cnt["gap"] > 1 ? "s" : "")
        if (cnt["missing"]) what = what ", " cnt["missing"] " missing"
      }
      printf " %s |", what >md
    }
    printf "\n" >md
  }
  bad = 0
  for (i = 1; i <= nl; i++) {
    L = libs[i]
    if (L != "servers" && L != "raftlock") continue
    for (j = 1; j <= n; j++) {
      if (lib[j] != L) continue
      for (c = 1; c <= nc; c++)
        if (((order[j], cols[c]) in cell) && cell[order[j], cols[c]] == "fail") {
          if (!bad++) printf "\nSetup checks that failed (the columns they name are not what they say):\n" >md
          printf "- %s: %s %s\n", cols[c], L, sc[j] >md
        }
    }
  }
  close(md)
}' "$work/gaps.tsv" "$work/matrix.tsv")
rc=$?
if [[ -n ${CLIENTS_MARKDOWN:-} ]]; then
  if write_markdown "$work/matrix.md" "$CLIENTS_MARKDOWN"; then
    log "Markdown table: $CLIENTS_MARKDOWN"
  else
    log "could not write the Markdown table to $CLIENTS_MARKDOWN"
  fi
fi
log "finished"
if ((rc != 0)) || [[ -n ${CLIENTS_KEEP:-} ]]; then
  echo "logs and data: $work" >&2
  keep_work=2
else
  keep_work=0
fi
# The last line of output is the matrix's "N passed, M failed" (CI reads it).
printf '%s\n' "$matrix"
exit "$rc"
