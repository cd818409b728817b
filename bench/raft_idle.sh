#!/usr/bin/env bash
# What an idle 3-node cluster costs per Raft group (partition): for each
# group count, three `raft_idle` processes (one node each, plain TCP on
# 127.0.0.1, free ports, data in a temp dir) start together, wait until
# every group has a leader, stay idle for SECONDS and report their CPU.
#
#   bench/raft_idle.sh [SECONDS] [GROUPS...]     (default: 60 s; 1 8 32)
#
# RAFT_IDLE_BIN names the binary (default build/bench/raft_idle);
# RAFT_IDLE_HEARTBEAT_MS / RAFT_IDLE_ELECTION_MS the timing (default 50 /
# 500, bench/run.sh's). Prints a line per node and one per group count:
# total CPU of the three nodes in % of one core, and per group. Everything
# it starts is stopped on exit; every wait is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-60}
shift || true
COUNTS=("$@")
[ "${#COUNTS[@]}" -gt 0 ] || COUNTS=(1 8 32)
BIN=${RAFT_IDLE_BIN:-$ROOT/build/bench/raft_idle}
[ -x "$BIN" ] || { echo "no $BIN (cmake --build build --target raft_idle)" >&2; exit 2; }
HB=${RAFT_IDLE_HEARTBEAT_MS:-50}
EL=${RAFT_IDLE_ELECTION_MS:-500}
D=$(mktemp -d /tmp/oncegate-raft-idle.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT

for n in "${COUNTS[@]}"; do
  mapfile -t P < <(python3 "$ROOT/bench/lib/benchlib.py" freeport 3 --hold-for $$)
  peers="1=127.0.0.1:${P[0]},2=127.0.0.1:${P[1]},3=127.0.0.1:${P[2]}"
  PIDS=()
  for i in 1 2 3; do
    mkdir -p "$D/g$n/n$i"
    "$BIN" --id="$i" --peers="$peers" --dir="$D/g$n/n$i" --groups="$n" \
      --seconds="$SECS" --heartbeat-ms="$HB" --election-ms="$EL" \
      --linger=15 >"$D/g$n/n$i.out" 2>"$D/g$n/n$i.err" &
    PIDS+=($!)
  done
  # Each prints its line SECS after every group has a leader (60 s at most).
  for t in $(seq $(( (SECS + 90) * 10 ))); do
    done_count=0
    for i in 1 2 3; do grep -q '^RESULT' "$D/g$n/n$i.out" && done_count=$((done_count + 1)); done
    [ "$done_count" = 3 ] && break
    for p in "${PIDS[@]}"; do
      kill -0 "$p" 2>/dev/null || { cat "$D"/g$n/n*.err >&2; exit 1; }
    done
    sleep 0.1
  done
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  total=0
  for i in 1 2 3; do
    line=$(grep '^RESULT' "$D/g$n/n$i.out") || { echo "node $i of $n groups printed nothing" >&2; cat "$D/g$n/n$i.err" >&2; exit 1; }
    echo "$line"
    pct=$(sed -n 's/.*cpu_pct=\([0-9.]*\).*/\1/p' <<<"$line")
    total=$(awk -v a="$total" -v b="$pct" 'BEGIN { print a + b }')
  done
  awk -v n="$n" -v t="$total" -v hb="$HB" 'BEGIN { printf "groups=%d heartbeat_ms=%d idle_cpu_pct_3_nodes=%.2f per_group=%.3f\n", n, hb, t, t / n }'
  for p in "${PIDS[@]}"; do
    for t in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  done
done
