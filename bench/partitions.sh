#!/usr/bin/env bash
# What partitions buy (docs/benchmarks.md, "Partitions"), in one run.
#
#   bench/partitions.sh [ROUNDS] [PARTITIONS]
#
# For each round (default 1), on 127.0.0.1 with free ports and data in a
# temp dir, the build's `oncegate` (ONCEGATE_BIN, default build/tools/
# oncegate) as: one node; a 3-node mutual-TLS cluster of one partition; the
# same cluster with PARTITIONS (default 8) partitions, measured once every
# node leads floor(P/3) or ceil(P/3) of them. wrk with new keys
# (bench/wrk/unique.lua), WRK_SECONDS (default 6) each:
#   - unloaded: one connection to each node in turn (p50, p99);
#   - loaded: 48 connections, 16 to each node at once (one node: all 48 to
#     it), and the CPU (user + system, /proc) of every node over the run.
# Prints per setup: decisions/s, CPU per decision of all nodes together and
# of each node (a node's CPU divided by all the cluster's decisions: what a
# machine of its own would spend per cluster decision), the largest
# node's against one node's, the spread of CPU and of leaderships
# (max/min), unloaded latencies, and the elections (or transfers) during
# the load: the sum over the partitions of their term's rise.
# ELECTION_TIMEOUT (default 500ms) is the clusters' cluster.election-timeout;
# CLUSTER_INI adds [cluster] lines (words, e.g. "max-outstanding=1");
# SETUPS (default "single 1 PARTITIONS") picks the setups, e.g.
# SETUPS=8 WRK_SECONDS=600 C1_SECONDS=5 for ten minutes of load on the partitioned
# cluster alone (a loaded run must see no election). Needs wrk.
# Everything it starts is stopped on exit; every wait is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$ROOT/bench/lib
export WRK_LUA_DIR=$ROOT/bench/wrk
ROUNDS=${1:-1}
PARTS=${2:-8}
BIN=${ONCEGATE_BIN:-$ROOT/build/tools/oncegate}
SECS=${WRK_SECONDS:-6}
C1_SECS=${C1_SECONDS:-$SECS}
ELECTION=${ELECTION_TIMEOUT:-500ms}
SETUPS=${SETUPS:-single 1 $PARTS}
HZ=$(getconf CLK_TCK)
D=$(mktemp -d /tmp/oncegate-parts.XXXXXX)
PIDS=()
WRKS=()
stop_all() {
  for p in "${WRKS[@]}" "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null || true
  done
  PIDS=()
  WRKS=()
}
trap 'stop_all; rm -rf "$D"' EXIT
command -v wrk >/dev/null || { echo "$0: needs wrk" >&2; exit 2; }

. "$LIB/nodes.sh"

start_bin() { start_node "$BIN" "$@"; }
cpu_ticks() { for p in "$@"; do awk '{print $14 + $15}' "/proc/$p/stat"; done; }

# wrk against port $1 with $2 connections, output in $3, for $4 seconds
# (default WRK_SECONDS).
wrk_to() {
  local secs=${4:-$SECS}
  timeout $((secs + 30)) wrk -t1 -c"$2" -d"${secs}s" --latency \
    -s "$WRK_LUA_DIR/unique.lua" "http://127.0.0.1:$1/v1/webhook" \
    -- "parts-$$-$RANDOM-$1" >"$3" 2>&1
}
requests() { sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$1"; }
pct() { sed -n "s/^ *$2% *\([0-9.]*[mu]*s\).*/\1/p" "$1"; }

# Unloaded: one connection to each of ports $@ in turn.
unloaded() {
  local tag=$1 i=0
  shift
  for port in "$@"; do
    i=$((i + 1))
    wrk_to "$port" 1 "$D/c1.out" "$C1_SECS"
    echo "$tag c1 via node $i: p50 $(pct "$D/c1.out" 50) p99 $(pct "$D/c1.out" 99)" \
      "($(requests "$D/c1.out") requests)"
  done
}

# Loaded: $1 connections spread over ports ${PORTS[@]} at once; CPU of
# ${PIDS[@]}. Sets RATE (decisions/s) and prints the per-node costs.
loaded() {
  local tag=$1 conns=$2 before after n=0 i total=0 max=0 min=0 one
  before=($(cpu_ticks "${PIDS[@]}"))
  WRKS=()
  i=0
  for port in "${PORTS[@]}"; do
    i=$((i + 1))
    wrk_to "$port" $((conns / ${#PORTS[@]})) "$D/load$i.out" &
    WRKS+=($!)
  done
  for w in "${WRKS[@]}"; do wait "$w"; done
  WRKS=()
  after=($(cpu_ticks "${PIDS[@]}"))
  for i in $(seq ${#PORTS[@]}); do n=$((n + $(requests "$D/load$i.out"))); done
  RATE=$(awk -v n="$n" -v s="$SECS" 'BEGIN { printf "%.0f", n / s }')
  local per=""
  for i in $(seq 0 $((${#PIDS[@]} - 1))); do
    one=$(( (after[i] - before[i]) * 1000000 / HZ / n ))
    total=$((total + one))
    per+="$one/"
    [ "$one" -gt "$max" ] && max=$one
    { [ "$min" = 0 ] || [ "$one" -lt "$min" ]; } && min=$one
  done
  NODE_MAX=$max
  TOTAL=$total
  echo "$tag c$conns: $RATE decisions/s ($n in ${SECS}s); CPU us per decision:" \
    "all nodes $total, per node ${per%/}, spread max/min" \
    "$(awk -v a="$max" -v b="$min" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')"
}

# The sum of the partitions' terms as node port $1 reports them.
terms() {
  python3 - "$1" <<'EOF'
import json, sys, urllib.request
with urllib.request.urlopen("http://127.0.0.1:%s/v1/cluster" % sys.argv[1],
                            timeout=5) as r:
    print(sum(p["term"] for p in json.load(r)["partitions"]))
EOF
}

# The partitions' leaders as every node reports them: "a b c" (counts per
# node 1..3) once all nodes agree and the spread is floor/ceil; bounded.
wait_spread() {
  python3 - "$@" <<'EOF'
import json, sys, time, urllib.request
ports = sys.argv[1:]
deadline = time.monotonic() + 60
while True:
    try:
        views = []
        for p in ports:
            with urllib.request.urlopen("http://127.0.0.1:%s/v1/cluster" % p,
                                        timeout=2) as r:
                doc = json.load(r)
            views.append({x["partition"]: x["leader_id"]
                          for x in doc["partitions"]})
        first = views[0]
        if all(v == first for v in views) and all(first.values()):
            counts = [sum(1 for l in first.values() if l == i)
                      for i in range(1, len(ports) + 1)]
            lo, hi = len(first) // len(ports), -(-len(first) // len(ports))
            if all(lo <= c <= hi for c in counts):
                print(" ".join(map(str, counts)))
                sys.exit(0)
    except OSError:
        pass
    if time.monotonic() > deadline:
        print("no spread within 60 s")
        sys.exit(1)
    time.sleep(0.2)
EOF
}

single_cpu=0 single_rate=0
for r in $(seq "$ROUNDS"); do
  for p in $SETUPS; do
    rm -rf "$D"/n* "$D/tls"
    if [ "$p" = single ]; then
      start_node "$BIN" 1
      unloaded "round $r single" "$PORT"
      PORTS=("$PORT")
      loaded "round $r single" "${LOAD_CONNS:-48}"
      single_cpu=$TOTAL single_rate=$RATE
      stop_all
      continue
    fi
    # shellcheck disable=SC2086 # CLUSTER_INI: more [cluster] lines
    start_cluster start_bin "election-timeout=$ELECTION" "partitions=$p" \
      ${CLUSTER_INI:-}
    PORTS=("${HTTP[1]}" "${HTTP[2]}" "${HTTP[3]}")
    if [ "$p" = 1 ]; then
      echo "round $r P=1: leader node $LID"
    else
      spread=$(wait_spread "${PORTS[@]}") || { echo "round $r P=$p: $spread" >&2; exit 1; }
      echo "round $r P=$p: partitions led per node $spread (max/min" \
        "$(awk -v s="$spread" 'BEGIN { n = split(s, a, " "); mx = a[1]; mn = a[1]; for (i = 2; i <= n; i++) { if (a[i] > mx) mx = a[i]; if (a[i] < mn) mn = a[i] } if (mn > 0) printf "%.2f", mx / mn; else print "-" }'))"
    fi
    unloaded "round $r P=$p" "${PORTS[@]}"
    t0=$(terms "${PORTS[0]}")
    loaded "round $r P=$p" "${LOAD_CONNS:-48}"
    t1=$(terms "${PORTS[0]}")
    echo "round $r P=$p: elections or transfers during the load: $((t1 - t0))" \
      "(election timeout $ELECTION)"
    [ "$single_cpu" != 0 ] || { stop_all; continue; }
    echo "round $r P=$p: rate $(awk -v a="$RATE" -v b="$single_rate" 'BEGIN { printf "%.2f", a / b }')x one node's;" \
      "all nodes' CPU per decision $(awk -v a="$TOTAL" -v b="$single_cpu" 'BEGIN { printf "%.2f", a / b }')x," \
      "the busiest node's $(awk -v a="$NODE_MAX" -v b="$single_cpu" 'BEGIN { printf "%.2f", a / b }')x one node's ($single_cpu us)"
    stop_all
  done
done
