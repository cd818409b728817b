#!/usr/bin/env bash
# Which of a single node's threads wake up and spend CPU per new key.
#
#   bench/threads.sh [CONNECTIONS] BIN [BIN ...]      (default: 1 connection)
#
# For each binary in turn: starts one node on 127.0.0.1 (free port, data in
# a temp dir), loads it with wrk (bench/wrk/unique.lua, -t1, CONNECTIONS
# connections, WRK_SECONDS, default 5) and reads every thread's voluntary
# context switches and CPU time (user + system) from /proc before and after.
# Prints p50 / p99 / req/s, then per thread: its name (CAF 0.17 names its
# scheduler workers "caf.multiplexer" and detached actors such as a store
# with `on-scheduler = false` "caf.actor"; a single node's commit thread is
# "oncegate.commit"; the main thread runs HTTP), switches per request and CPU
# microseconds per request. Needs wrk. Everything it starts is stopped on
# exit; every wait is bounded.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONNS=1
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  CONNS=$1
  shift
fi
[ "$#" -ge 1 ] || { echo "usage: $0 [CONNECTIONS] BIN [BIN ...]" >&2; exit 2; }
SECS=${WRK_SECONDS:-5}
LIB=$ROOT/bench/lib
export WRK_LUA_DIR=$ROOT/bench/wrk
. "$LIB/nodes.sh"
own_workdir threads
TICK_US=$((1000000 / $(getconf CLK_TCK)))

# One line per thread of process $1: "name/tid switches ticks".
threads() {
  local t
  for t in /proc/"$1"/task/*; do
    printf '%s/%s %s %s\n' "$(tr ' ' _ <"$t/comm")" "${t##*/}" \
      "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")" \
      "$(awk '{print $14 + $15}' "$t/stat")"
  done | sort
}

i=0
for bin in "$@"; do
  i=$((i + 1))
  start_node "$bin" "$i"
  pid=${PIDS[-1]}
  threads "$pid" >"$D/before"
  timeout $((SECS + 30)) wrk -t1 -c"$CONNS" -d"${SECS}s" --latency \
    -s "$WRK_LUA_DIR/unique.lua" "http://127.0.0.1:$PORT/v1/webhook" \
    -- "threads-$$-$i" >"$D/wrk.out" 2>&1
  threads "$pid" >"$D/after"
  n=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$D/wrk.out")
  echo "[$(basename "$bin")] c$CONNS: $(grep -E '^ +(50|99)%|Requests/sec' \
    "$D/wrk.out" | tr -s ' ' | tr '\n' ' ')"
  join "$D/before" "$D/after" | awk -v n="${n:-0}" -v tick="$TICK_US" '
    n > 0 {
      sw = ($4 - $2) / n; cpu = ($5 - $3) * tick / n
      tsw += sw; tcpu += cpu
      if (sw >= 0.005 || cpu >= 0.5)
        printf "  %-28s switches/req %5.2f  cpu_us/req %6.1f\n", $1, sw, cpu
    }
    END { printf "  %-28s switches/req %5.2f  cpu_us/req %6.1f\n", "(all threads)", tsw, tcpu }'
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
done
