# raftlock — make run starts one node on 127.0.0.1:6379 (data in ./raftlock-data); make test runs
# every test. See README.md.
GO        ?= go
BIN       := bin
# FUZZTIME, when set (10s, 50000x), overrides every fuzz target's budget below.
FUZZTIME  ?=
BENCHTIME ?= 5s

.PHONY: all build run setup test unit fuzz vet bench bench-compare bench-scale bench-groups cluster chaos chaos-short clients fencing soak clean

all: build

build:
	$(GO) build -o $(BIN)/raftlock ./cmd/raftlock
	$(GO) build -o $(BIN)/raftlock-bench ./cmd/raftlock-bench

run: build
	$(BIN)/raftlock --dir ./raftlock-data --addr 127.0.0.1:6379 --raft-addr 127.0.0.1:7379

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	cd tests/clients && $(GO) vet ./...
	cd tests/bench && $(GO) vet ./... && $(GO) test -count=1 ./...

unit:
	$(GO) test -race -count=1 -timeout 15m ./...

# Each fuzz target runs a number of inputs on top of its seed corpus (the seeds also run in
# `unit`), about 10 s each on two cores. Counts, not durations: Go 1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" when a duration ends while a worker is
# mid-input (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZ_READER   ?= 120000x
FUZZ_REQUESTS ?= 20000x
FUZZ_DECODE   ?= 100000x
FUZZ_RESTORE  ?= 100000x
FUZZ_RAFT     ?= 1000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_READER)) ./resp/
	$(GO) test -run '^$$' -fuzz '^FuzzRequests$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_REQUESTS)) ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_DECODE)) ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzRestore$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_RESTORE)) ./fsm/
	$(GO) test -run '^$$' -fuzz '^FuzzRaftFrames$$' -fuzztime $(or $(FUZZTIME),$(FUZZ_RAFT)) -fuzzminimizetime 1x ./raftnode/

# The lock libraries people use (Go: go-redis, redsync, redislock, rueidislock; Node: ioredis +
# redlock v4/v5, node-redis, redis-semaphore, @sesamecare-oss/redlock, redlock-universal,
# node-redis-warlock, redis-lock; Python: redis-py Lock, django-redis; PHP: Laravel's cache locks
# and Symfony Lock, each with phpredis and predis) against redis-server and raftlock (1 node;
# 3 nodes through the leader and through a follower). Prints the matrix and "N passed, M failed";
# scenarios that need a command raftlock lacks yet are KNOWN_GAPS in tests/clients/run.sh.
clients:
	tests/clients/run.sh

# Fencing end to end (docs/fencing.md): tests/fencing_test.go starts a PostgreSQL server (Debian's,
# as the user nobody when run as root) and a raftlock node, and runs examples/fencing's pause demo
# on a row, a file and an HTTP service, then the redis-py + psycopg2 and ioredis + pg snippets;
# each must refuse the stale holder's write. `unit` runs it too (under -race, with every test);
# this target runs it alone and shows the demo's output. About 15 s.
fencing:
	$(GO) test -count=1 -v -run '^TestFencing$$' ./tests/
	$(GO) test -count=1 ./examples/...

# What the tests need besides Go (Debian and npm packages, git history): installed when run as
# root, otherwise named with the command that installs them, before any test runs.
setup:
	scripts/setup.sh

test: setup
	$(MAKE) --no-print-directory vet unit chaos-short fuzz clients

bench: build
	scripts/bench.sh $(BENCHTIME)

# raftlock side by side with redis-server (appendfsync always / no persistence), Redlock over 3
# Redis through redsync (appendfsync always / no persistence), and etcd 1 and 3 members
# (concurrency.Mutex), in one run: one table with ops/s, p50/p99/p999, the servers' CPU per
# acquire+release pair and raftlock's ratio to each; hand-offs to 16 clients queued on one key
# (COMPARE_WAITERS=16,2000 adds 2000). See docs/performance.md.
bench-compare: build
	scripts/bench-compare.sh

# Raft groups (docs/groups.md): pairs/s, p50/p99 and CPU per pair of a 3-node cluster of G = 1,
# 2, 4, 8 groups, one benchmark per group against its leader, and idle CPU per group.
# GROUPS_LIST, CONNS, DUR, ROUNDS, BENCH_ARGS (e.g. "-pipeline 16"): see the script's header.
bench-groups: build
	scripts/bench-groups.sh

# Scale figures: RSS with 1M held locks, snapshot and restart times, grants while 10k/100k
# leases expire. See docs/performance.md.
bench-scale: build
	scripts/bench-scale.sh

# Three nodes on 127.0.0.1:6379-6381 (raft 7379-7381, HTTP 9121-9123: status page, /readyz,
# /metrics; it prints where), data in ./cluster-data; Ctrl-C stops them.
cluster: build
	scripts/cluster.sh 6379

# The fault harness (tests/chaos), short mode: a 3-node cluster through three scenarios
# (partitions/pauses/kills, clocks/membership/snapshots, mixed), about 35 s of faults each,
# every checker. The test runs without -race (unit runs under -race, where the chaos run skips
# itself); the nodes are built with -race, so their logs show data races (CHAOS_RACE=0: not).
# CHAOS_SEEDS=1,2 picks the seeds (default: one from the clock, printed in each summary line).
CHAOS_SEEDS ?=
chaos-short:
	@out=$$(mktemp); \
	$(GO) test -count=1 -timeout 20m -run '^TestChaosShort$$' -v ./tests/chaos/ $(if $(CHAOS_SEEDS),-args -chaos.seeds=$(CHAOS_SEEDS)) >$$out 2>&1; \
	status=$$?; grep -E '^(chaos:|ok|FAIL|PASS)|^ *--- ' $$out; \
	if [ $$status -ne 0 ]; then grep -vE '^ *(=== RUN|--- |faults.go)|^(chaos:|ok|FAIL|PASS)' $$out | tail -60; fi; \
	rm -f $$out; exit $$status

# The long mode: tests/chaos/cmd/raftlock-chaos, a 5-node cluster (nodes built with -race unless
# CHAOS_RACE=0), every fault kind mixed, for CHAOS_DURATION per seed; one summary line per
# seed. make chaos CHAOS_DURATION=10m SEEDS=1,2,3; CHAOS_NODE_ARGS="--group-commit no" passes
# flags to every node; CHAOS_FAULTS=kill,pause,... picks the fault kinds (default all).
# CHAOS_GROUPS=4 runs the nodes with --groups 4 (docs/groups.md) and every fault kind, slot
# moves among them (slot-move): make chaos CHAOS_NODES=3 CHAOS_GROUPS=4. CHAOS_NOFLOOR=1 builds the nodes with the tag chaos_nofloor,
# whose slot moves drop the fence floor (a deliberately broken build the token check must catch).
SEEDS          ?= 1,2,3
CHAOS_DURATION ?= 10m
CHAOS_NODES    ?= 5
CHAOS_GROUPS   ?=
GROUP_FAULTS   := partition-leader,partition-minority,bridge,pause,kill,kill-all,slow,clock-skew,clock-jump,membership,snapshot-install,disk-fail,disk-full,slot-move
CHAOS_FAULTS   ?= $(if $(CHAOS_GROUPS),$(GROUP_FAULTS))
chaos:
	$(if $(filter 1,$(CHAOS_NOFLOOR)),GOFLAGS=-tags=chaos_nofloor) $(GO) run ./tests/chaos/cmd/raftlock-chaos -duration $(CHAOS_DURATION) -seeds $(SEEDS) -nodes $(CHAOS_NODES) \
		-race=$(if $(filter 0,$(CHAOS_RACE)),false,true) -node-args "$(CHAOS_NODE_ARGS)$(if $(CHAOS_GROUPS), --groups $(CHAOS_GROUPS))" $(if $(CHAOS_FAULTS),-faults $(CHAOS_FAULTS))

# The soak (tests/soak, docs/soak.md), not part of test: a 3-node cluster of bin/raftlock under a
# steady mix (LOCK ... WAIT, SET NX + EVALSHA, pub/sub, hashes/sets/lists, leases left to expire)
# at SOAK_LOAD of the capacity it measures first, n2 and n3 restarted in turn every
# SOAK_RESTART_EVERY (each alternating SIGTERM and SIGKILL), every node's RSS, goroutines and open
# files and the load's latency sampled every SOAK_INTERVAL into soak.csv, latency.csv and a plot,
# soak.svg, in SOAK_OUT (default a fresh directory under /tmp, printed). It fails on a process's
# growth over its own life, p99 drift from the run's first third to its last, most requests through
# a node failing, a pub/sub message lost, a node exiting on its own, or the load unserved for 30 s.
# A short try: make soak SOAK_DURATION=3m SOAK_RESTART_EVERY=40s SOAK_INTERVAL=15s
SOAK_DURATION      ?= 30m
SOAK_RESTART_EVERY ?= 4m
SOAK_LOAD          ?= 0.7
SOAK_INTERVAL      ?= 1m
SOAK_OUT           ?=
soak: build
	$(GO) build -o $(BIN)/raftlock-soak ./tests/soak/cmd/raftlock-soak
	$(BIN)/raftlock-soak -bin $(BIN)/raftlock -duration $(SOAK_DURATION) -restart-every $(SOAK_RESTART_EVERY) \
		-load $(SOAK_LOAD) -interval $(SOAK_INTERVAL) $(if $(SOAK_OUT),-out $(SOAK_OUT))

clean:
	rm -rf $(BIN)
