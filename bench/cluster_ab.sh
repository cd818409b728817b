#!/usr/bin/env bash
# A/B of builds on the cluster's request path, in one run.
#
#   bench/cluster_ab.sh ROUNDS BIN [BIN ...]
#
# For each round and each `oncegate` binary, alternating: one node, then a
# 3-node mutual-TLS cluster, on 127.0.0.1 (free ports, data in a temp dir,
# election timeout 500 ms). wrk with new keys (bench/wrk/unique.lua),
# WRK_SECONDS (default 6) each: one connection, then 50 (two threads); on
# the cluster via the leader and via a follower. Prints one line per
# measurement: p50, p99, req/s, for the single node and for 50 connections
# the node's CPU (user + system, from /proc) per request, on the cluster per
# node (leader / receiving follower / other follower when a follower
# receives; leader / followers otherwise), and the cluster's rate as a
# ratio of the same binary's single node in the same round
# (AB_SINGLE_ONLY=1: the single node only). Needs wrk. Everything it
# starts is stopped on exit; every wait is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/bench/lib
export WRK_LUA_DIR=$ROOT/bench/wrk
[ $# -ge 2 ] || { echo "usage: $0 ROUNDS BIN [BIN ...]" >&2; exit 2; }
ROUNDS=$1
shift
SECS=${WRK_SECONDS:-6}
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/oncegate-ab.XXXXXX)
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for t in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null || true
  done
  PIDS=()
}
trap 'stop_all; rm -rf "$D"' EXIT

. "$LIB/nodes.sh"

# Node I of the binary under test (see start_cluster).
start_bin() { start_node "$BIN" "$@"; }

cpu_ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done; }

# wrk against port $1 with $2 connections and $3 threads; sets LINE and N.
load() {
  timeout $((SECS + 30)) wrk -t"$3" -c"$2" -d"${SECS}s" --latency \
    -s "$WRK_LUA_DIR/unique.lua" "http://127.0.0.1:$1/v1/webhook" \
    -- "ab-$$-$RANDOM" >"$D/wrk.out" 2>&1
  N=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$D/wrk.out")
  LINE=$(grep -E '^ +(50|99)%|Requests/sec' "$D/wrk.out" | tr -s ' ' | tr '\n' ' ')
  RATE=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$D/wrk.out")
}

# Loads port $1 with 50 connections (CONNS=1: one), setting CPU to the CPU
# us per request of each of $2...
loaded() {
  local port=$1
  shift
  local before after per="" i=0 conns=${CONNS:-50}
  before=($(cpu_ticks "$@"))
  load "$port" "$conns" $((conns > 1 ? 2 : 1))
  after=($(cpu_ticks "$@"))
  for p in "$@"; do
    per+="$(( (after[i] - before[i]) * 1000000 / HZ / N ))/"
    i=$((i + 1))
  done
  CPU=${per%/}
}

for r in $(seq "$ROUNDS"); do
  for BIN in "$@"; do
    # A build's binary (DIR/build/tools/oncegate) is named by DIR, any
    # other file by its own name.
    tag=$(basename "$BIN")
    [ "$tag" = oncegate ] && tag=$(basename "$(dirname "$(dirname "$(dirname "$BIN")")")")
    rm -rf "$D"/n* "$D/tls"
    start_node "$BIN" 1
    CONNS=1 loaded "$PORT" "${PIDS[0]}"
    echo "round $r [$tag] single c1: $LINE cpu_us/req=$CPU"
    loaded "$PORT" "${PIDS[0]}"
    single=$RATE
    echo "round $r [$tag] single c50: $LINE cpu_us/req=$CPU"
    stop_all
    [ -n "${AB_SINGLE_ONLY:-}" ] && continue
    rm -rf "$D"/n*
    start_cluster start_bin 'election-timeout=500ms'
    lport=$LPORT lid=$LID
    fid=0 oid=0
    for i in 1 2 3; do
      [ "$i" = "$lid" ] && continue
      if [ "$fid" = 0 ]; then fid=$i; else oid=$i; fi
    done
    lp=${PIDS[$((lid - 1))]} fp=${PIDS[$((fid - 1))]} op=${PIDS[$((oid - 1))]}
    load "$lport" 1 1
    echo "round $r [$tag] cluster c1 via leader: $LINE"
    load "${HTTP[$fid]}" 1 1
    echo "round $r [$tag] cluster c1 via follower: $LINE"
    loaded "$lport" "$lp" "$fp" "$op"
    echo "round $r [$tag] cluster c50 via leader: $LINE cpu_us/req=$CPU" \
      "ratio=$(echo "scale=2; $RATE / $single" | bc)"
    loaded "${HTTP[$fid]}" "$lp" "$fp" "$op"
    echo "round $r [$tag] cluster c50 via follower: $LINE cpu_us/req=$CPU" \
      "ratio=$(echo "scale=2; $RATE / $single" | bc)"
    stop_all
  done
done
