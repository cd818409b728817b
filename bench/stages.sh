#!/usr/bin/env bash
# Where an unloaded request's time goes, hand-off by hand-off.
#
#   bench/stages.sh [single|leader|follower] [REQUESTS]     (default: follower 2000)
#
# Builds build-trace/ (-DONCEGATE_STAGE_TRACE=ON) unless ONCEGATE_TRACE_BIN
# names such a binary, starts one node or a 3-node mutual-TLS cluster on
# 127.0.0.1 (free ports, data in a temp dir), sends REQUESTS new keys one
# after the other on one connection to the node named, stops the nodes
# (each writes its trace at exit) and prints bench/lib/stages.py's table
# (and, for a cluster, its split of the Raft commit).
# STAGES_WRK_SECONDS=S: the load is wrk -t1 -c1 for S seconds instead (the
# harness's client; needs wrk). CLUSTER_INSECURE=1: the cluster speaks
# plain text between its nodes (cluster.insecure). Everything it starts is stopped on exit;
# every wait is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VIA=${1:-follower}
N=${2:-2000}
case "$VIA" in single|leader|follower) ;; *) echo "usage: $0 [single|leader|follower] [REQUESTS]" >&2; exit 2 ;; esac
LIB=$ROOT/bench/lib
BIN=${ONCEGATE_TRACE_BIN:-}
if [ -z "$BIN" ]; then
  cmake -S "$ROOT" -B "$ROOT/build-trace" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DONCEGATE_STAGE_TRACE=ON -DONCEGATE_BUILD_TESTS=OFF >/dev/null
  cmake --build "$ROOT/build-trace" --target oncegate -j"$(nproc)" >/dev/null
  BIN=$ROOT/build-trace/tools/oncegate
fi
. "$LIB/nodes.sh"
own_workdir stages

# Starts node $1 with the remaining arguments (sets PORT); each writes its
# stage trace at exit.
start() {
  local i=$1
  shift
  ONCEGATE_STAGE_TRACE=$D/n$i.trace start_node "$BIN" "$i" "$@"
}

if [ "$VIA" = single ]; then
  start 1
  target=$PORT receiver=1 files=("$D/n1.trace")
else
  start_cluster start
  lport=$LPORT lid=$LID
  receiver=$lid
  if [ "$VIA" = follower ]; then
    for i in 1 2 3; do [ "$i" = "$lid" ] || { receiver=$i; break; }; done
  fi
  target=${HTTP[$receiver]}
  files=("$D/n1.trace" "$D/n2.trace" "$D/n3.trace")
fi
if [ -n "${STAGES_WRK_SECONDS:-}" ]; then
  WRK_LUA_DIR=$ROOT/bench/wrk timeout $((STAGES_WRK_SECONDS + 30)) \
    wrk -t1 -c1 -d"${STAGES_WRK_SECONDS}s" --latency -s "$ROOT/bench/wrk/unique.lua" \
    "http://127.0.0.1:$target/v1/webhook" -- "stages-$$" \
    | grep -E '^ +(50|90|99)%|Requests/sec' | tr -s ' ' | tr '\n' ' '
  echo "(wrk)"
else
  python3 "$LIB/stages.py" send "$target" "$N" "stages-$$"
fi
# SIGTERM: each node writes its trace file as it exits.
for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${PIDS[@]}"; do
  for t in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
done
python3 "$LIB/stages.py" table "$receiver" "${files[@]}"
[ "$VIA" = single ] || python3 "$LIB/stages.py" commit "${files[@]}"
