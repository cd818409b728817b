#!/usr/bin/env bash
# oncegate benchmark harness: one command that builds the release binaries,
# runs every scenario on 127.0.0.1, stops everything it started and writes
# results.csv, results.md and PNG plots. See docs/benchmarks.md.
#
#   bench/run.sh                   full run (~6 min on 2 vCPU with an up-to-date
#                                  build), results in docs/benchmarks/
#   BENCH_SMOKE=1 bench/run.sh     1 s per timed run (~100 s), tiny key counts,
#                                  results in a temp dir (printed at the end)
#
# Knobs (environment; defaults full / smoke):
#   BENCH_SECONDS=10/1             duration of each timed wrk / redis run
#   BENCH_THREADS=2  BENCH_CONNECTIONS=50   the loaded scenarios (wrk -t/-c)
#   BENCH_POOL=10000/2000          duplicate key pool d-0..d-(POOL-1)
#   BENCH_BIG_KEYS=10000000/10000  records preloaded for the big-store scenario
#   BENCH_RESTARTS=3               restarts timed (median reported)
#   BENCH_PURGE_KEYS=1000000/10000 expired records purged under load
#   BENCH_PURGE_RUNS=3/1           purge rounds (the median round reported)
#   BENCH_MEM_KEYS=100000/5000     live key actors, small memory measurement
#   BENCH_MEM_KEYS_LARGE=1000000/10000  large memory measurement (0: skip)
#   BENCH_PASSIVATE_KEYS=5000/1000 BENCH_IDLE_TIMEOUT=5s/1s  passivation check
#   BENCH_IDLE_SECONDS=60/1        the core node idle before its load (CPU)
#   BENCH_COLD_KEYS=100000/5000    preloaded keys for the cold-start scenario
#   BENCH_NODE_ARGS=""             extra oncegate options for every node
#   BENCH_MEM_ARGS="--keys.decision-cache=0"  options of the memory nodes
#                                  (the bounded decision cache is measured
#                                  apart from the actors by default)
#   BENCH_FLOOD_KEYS=3000/300      unique 60 KiB signals of the memory flood
#   BENCH_SCENARIOS="core redis nginx upstream big purge memory passivation cold cluster flood"
#   BENCH_OUT=docs/benchmarks/ (smoke: a new temp dir)   where results go
#   BENCH_TMPDIR=${TMPDIR:-/tmp}   data dirs (must be a real disk: fsync)
#   BENCH_BUILD_DIR=build-release  release build dir (configured if missing)
#   ONCEGATE_BIN, ONCEGATE_PRELOAD both set: use these binaries, no build
#   ONCEGATE_COMMIT_FLOOR          the commit_floor tool with given binaries
#                                  (default: next to ONCEGATE_PRELOAD)
#   WRK_TIMEOUT=10s                wrk's per-request timeout
#
# Exit status: 0 when every scenario group succeeded, 1 otherwise (results
# are written either way; failures are listed in results.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=$ROOT/bench/lib
WRK_DIR=$ROOT/bench/wrk
START_EPOCH=$EPOCHREALTIME

SMOKE=${BENCH_SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
  d_secs=1 d_pool=2000 d_big=10000 d_purge=10000 d_mem=5000 d_mem_large=10000
  d_passivate=1000 d_idle=1s d_cold=5000 d_flood=300 d_purge_runs=1
  d_idle_secs=1
else
  d_secs=10 d_pool=10000 d_big=10000000 d_purge=1000000 d_mem=100000
  d_mem_large=1000000 d_passivate=5000 d_idle=5s d_cold=100000 d_flood=3000
  d_purge_runs=3 d_idle_secs=60
fi
FLOOD_KEYS=${BENCH_FLOOD_KEYS:-$d_flood}
SECS=${BENCH_SECONDS:-$d_secs}
THREADS=${BENCH_THREADS:-2}
CONNS=${BENCH_CONNECTIONS:-50}
POOL=${BENCH_POOL:-$d_pool}
BIG_KEYS=${BENCH_BIG_KEYS:-$d_big}
RESTARTS=${BENCH_RESTARTS:-3}
PURGE_KEYS=${BENCH_PURGE_KEYS:-$d_purge}
PURGE_RUNS=${BENCH_PURGE_RUNS:-$d_purge_runs}
MEM_KEYS=${BENCH_MEM_KEYS:-$d_mem}
MEM_KEYS_LARGE=${BENCH_MEM_KEYS_LARGE:-$d_mem_large}
PASSIVATE_KEYS=${BENCH_PASSIVATE_KEYS:-$d_passivate}
IDLE_TIMEOUT=${BENCH_IDLE_TIMEOUT:-$d_idle}
IDLE_SECS=${BENCH_IDLE_SECONDS:-$d_idle_secs}
COLD_KEYS=${BENCH_COLD_KEYS:-$d_cold}
SCENARIOS=${BENCH_SCENARIOS:-core redis nginx upstream big purge memory passivation cold cluster flood}
WRK_TIMEOUT=${WRK_TIMEOUT:-10s}
READY_TIMEOUT=${BENCH_READY_TIMEOUT:-120}
STOP_TIMEOUT=${BENCH_STOP_TIMEOUT:-120}
TMPBASE=${BENCH_TMPDIR:-${TMPDIR:-/tmp}}
NODE_ARGS=${BENCH_NODE_ARGS:-}
# The decision cache is bounded on its own (keys.decision-cache entries):
# measure what the key actors cost.
MEM_ARGS=${BENCH_MEM_ARGS:---keys.decision-cache=0}

# Key counts are split evenly over wrk threads; the duplicate pool must not be
# a multiple of 7919 (duplicates.lua walks it with that stride).
round_up() { echo $(( ($1 + $2 - 1) / $2 * $2 )); }
MEM_KEYS=$(round_up "$MEM_KEYS" "$THREADS")
MEM_KEYS_LARGE=$(round_up "$MEM_KEYS_LARGE" "$THREADS")
PASSIVATE_KEYS=$(round_up "$PASSIVATE_KEYS" "$THREADS")
[ $((POOL % 7919)) -ne 0 ] || POOL=$((POOL + 1))
[ $((COLD_KEYS % 7919)) -ne 0 ] || COLD_KEYS=$((COLD_KEYS + 1))

log() { printf '[bench %6.1fs] %s\n' "$(elapsed_since "$START_EPOCH")" "$*" >&2; }
elapsed_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
py() { python3 "$LIB/benchlib.py" "$@"; }

# ---------------------------------------------------------------- processes
RUN_TMP=$(mktemp -d "$TMPBASE/oncegate-bench.XXXXXX")
LOGS=$RUN_TMP/logs
STAGE=$RUN_TMP/out
mkdir -p "$LOGS" "$STAGE"
CSV=$STAGE/results.csv
RAW=$STAGE/raw.log
FAILURES=$RUN_TMP/failures.txt
TIMINGS=$RUN_TMP/timings.txt
: >"$FAILURES"
: >"$TIMINGS"
: >"$RAW"
echo "scenario,system,metric,value,unit" >"$CSV"
SCOPE=main
GROUP_PID=
RUN_ID=$(date +%s)-$$

# Every started process is recorded as "pid comm" in pids.<scope>; a scope's
# EXIT trap stops what it started, the main EXIT trap whatever is left (only
# pids whose /proc comm still matches, so a reused pid is never signalled).
track() { echo "$1 $2" >>"$RUN_TMP/pids.$SCOPE"; }

alive_as() { [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }

# stop_pid PID [TIMEOUT_S] [SIGNAL]: signal, wait (bounded), then SIGKILL.
stop_pid() {
  local pid=$1 timeout=${2:-30} sig=${3:-TERM} deadline
  if kill -0 "$pid" 2>/dev/null; then
    kill -s "$sig" "$pid" 2>/dev/null || true
    deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
      sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "pid $pid did not stop within ${timeout}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
}

stop_tracked() {  # files...
  local f pid comm deadline
  for f in "$@"; do
    [ -f "$f" ] || continue
    while read -r pid comm; do
      alive_as "$pid" "$comm" && kill -TERM "$pid" 2>/dev/null || true
    done < <(tac "$f")
  done
  deadline=$((SECONDS + 30))
  for f in "$@"; do
    [ -f "$f" ] || continue
    while read -r pid comm; do
      while alive_as "$pid" "$comm" && [ "$SECONDS" -lt "$deadline" ]; do
        sleep 0.05
      done
      alive_as "$pid" "$comm" && kill -KILL "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    done <"$f"
    rm -f "$f"
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "${GROUP_PID:-}" ] && kill -0 "$GROUP_PID" 2>/dev/null; then
    kill -TERM "$GROUP_PID" 2>/dev/null || true
    wait "$GROUP_PID" 2>/dev/null || true
  fi
  stop_tracked "$RUN_TMP"/pids.* 2>/dev/null || true
  rm -rf "$RUN_TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# die MESSAGE: records the failure of the current scenario and leaves it.
die() {
  echo "$SCOPE: $*" >>"$FAILURES"
  log "FAILED $SCOPE: $*"
  exit 1
}

# emit SCENARIO SYSTEM METRIC VALUE UNIT
emit() { printf '%s,%s,%s,%s,%s\n' "$1" "$2" "$3" "$4" "$5" >>"$CSV"; }

# ---------------------------------------------------------------- tools
check_tools() {
  local missing=() t
  for t in cmake wrk redis-server redis-benchmark redis-cli nginx gnuplot \
           python3 curl awk openssl; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "bench/run.sh: missing tools: ${missing[*]}" >&2
    echo "  apt-get install wrk redis-server redis-tools nginx-light gnuplot-nox curl openssl" >&2
    exit 2
  fi
}

build() {
  if [ -n "${ONCEGATE_BIN:-}" ] || [ -n "${ONCEGATE_PRELOAD:-}" ]; then
    [ -x "${ONCEGATE_BIN:-}" ] && [ -x "${ONCEGATE_PRELOAD:-}" ] || {
      echo "bench/run.sh: set both ONCEGATE_BIN and ONCEGATE_PRELOAD to executables" >&2
      exit 2
    }
    COMMIT_FLOOR=${ONCEGATE_COMMIT_FLOOR:-$(dirname "$ONCEGATE_PRELOAD")/commit_floor}
    BUILD_NOTE="given binaries (no build): $ONCEGATE_BIN, $ONCEGATE_PRELOAD, $COMMIT_FLOOR"
    log "using given binaries, no build"
    return
  fi
  local dir=${BENCH_BUILD_DIR:-$ROOT/build-release} gen=()
  [ -f "$dir/CMakeCache.txt" ] || { command -v ninja >/dev/null && gen=(-G Ninja); }
  log "building release binaries in $dir"
  if ! { cmake -S "$ROOT" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
           -DONCEGATE_BUILD_TESTS=OFF \
         && cmake --build "$dir" -j2 --target oncegate preload commit_floor; } \
       >"$RUN_TMP/build.log" 2>&1; then
    tail -n 40 "$RUN_TMP/build.log" >&2
    echo "bench/run.sh: release build failed" >&2
    exit 2
  fi
  ONCEGATE_BIN=$dir/tools/oncegate
  ONCEGATE_PRELOAD=$dir/bench/preload
  COMMIT_FLOOR=$dir/bench/commit_floor
  BUILD_NOTE="Release build in $dir (cmake --build, targets oncegate preload commit_floor)"
}

# ---------------------------------------------------------------- oncegate
# start_node NAME DATA_DIR [ARGS...]: sets NODE_PID and NODE_PORT.
start_node() {
  local name=$1 data=$2 deadline
  shift 2
  NODE_OUT=$LOGS/$name.out
  NODE_ERR=$LOGS/$name.err
  # shellcheck disable=SC2086 # BENCH_NODE_ARGS: words
  "$ONCEGATE_BIN" --http-host=127.0.0.1 --http-port=0 --data-dir="$data" \
    --log-level=warn ${NODE_ARGS} "$@" >"$NODE_OUT" 2>"$NODE_ERR" </dev/null &
  NODE_PID=$!
  track "$NODE_PID" "$(basename "$ONCEGATE_BIN" | cut -c1-15)"
  deadline=$((SECONDS + READY_TIMEOUT))
  until grep -q '^oncegate ready http=' "$NODE_OUT"; do
    kill -0 "$NODE_PID" 2>/dev/null \
      || die "node $name exited before ready: $(tail -n 5 "$NODE_ERR")"
    [ "$SECONDS" -lt "$deadline" ] \
      || die "node $name not ready within ${READY_TIMEOUT}s"
    sleep 0.02
  done
  NODE_PORT=$(sed -n 's/^oncegate ready http=.*:\([0-9][0-9]*\)$/\1/p' \
                "$NODE_OUT" | head -n 1)
  [ -n "$NODE_PORT" ] || die "node $name: cannot parse the ready line"
}

stop_node() { stop_pid "$NODE_PID" "$STOP_TIMEOUT" TERM; }

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
metric() { py metric "$NODE_PORT" "$1"; }
LIVE=oncegate_live_key_actors
NEW_DECISIONS='oncegate_decisions_total{route="default",outcome="new"}'

# preload DATA_DIR PREFIX COUNT [--expired]: prints the seconds it took.
preload() {
  local t0=$EPOCHREALTIME
  "$ONCEGATE_PRELOAD" --data-dir="$1" --prefix="$2" --count="$3" ${4:+"$4"} \
    >>"$LOGS/preload.log" 2>&1 || die "preload $2 x $3 failed: $(tail -n 3 "$LOGS/preload.log")"
  elapsed_since "$t0"
}

# ---------------------------------------------------------------- wrk
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$WRK_RESULT"; }

# check_wrk LABEL EXPECTED_STATUSES LOG: WRK_RESULT := its RESULT line; the
# scenario fails on socket errors (connect/read/write/timeout), on a status
# not in EXPECTED_STATUSES (comma list) or on zero requests. 409s count as
# wrk "errors" (non-2xx) and are fine where expected.
check_wrk() {
  local label=$1 expect=$2 log=$3 se st req s code
  WRK_RESULT=$(grep '^RESULT ' "$log" | tail -n 1 || true)
  [ -n "$WRK_RESULT" ] || die "wrk $label: no RESULT line: $(tail -n 3 "$log")"
  echo "$SCOPE $label $WRK_RESULT" >>"$RAW"
  se=$(kv socket_errors) st=$(kv statuses) req=$(kv requests)
  [ "${req:-0}" -gt 0 ] || die "wrk $label: no requests: $WRK_RESULT"
  [ "$se" = 0 ] || die "wrk $label: $se socket errors: $WRK_RESULT"
  for s in ${st//,/ }; do
    code=${s%%:*}
    case ",$expect," in
      *",$code,"*) ;;
      *) die "wrk $label: unexpected status $code (expected $expect): $WRK_RESULT" ;;
    esac
  done
  log "  $label: rps=$(kv rps) p50=$(kv p50_us)us p99=$(kv p99_us)us statuses=$st"
}

# start_wrk LABEL THREADS CONNS SECONDS SCRIPT PORT [VAR=VALUE...]: wrk in
#   the background, tracked. WRK_PID := its pid, WRK_LOG := its log.
start_wrk() {
  local label=$1 t=$2 c=$3 d=$4 script=$5 port=$6
  shift 6
  WRK_LOG=$LOGS/wrk-$label.log
  env WRK_LUA_DIR="$WRK_DIR" "$@" wrk -t"$t" -c"$c" -d"${d}s" \
    --timeout "$WRK_TIMEOUT" -s "$WRK_DIR/$script" "http://127.0.0.1:$port/" \
    -- "$label-$RUN_ID" >"$WRK_LOG" 2>&1 &
  WRK_PID=$!
  track "$WRK_PID" wrk
}

# run_wrk LABEL EXPECT THREADS CONNS SECONDS SCRIPT PORT [VAR=VALUE...]
run_wrk() {
  local label=$1 expect=$2
  shift 2
  start_wrk "$label" "$@"
  wait "$WRK_PID" || die "wrk $label exited with $?: $(tail -n 3 "$WRK_LOG")"
  check_wrk "$label" "$expect" "$WRK_LOG"
}

# run_wrk_until LABEL EXPECT THREADS CONNS SCRIPT PORT METRIC TARGET TIMEOUT
#   [VAR=VALUE...]: a bounded run (e.g. the script stops its threads after
#   their quota); ends wrk with SIGINT once METRIC >= TARGET on the node (but
#   not before RUN_MIN seconds). WAITED := seconds until METRIC >= TARGET,
#   LOAD_END := the time it was seen.
run_wrk_until() {
  local label=$1 expect=$2 t=$3 c=$4 script=$5 port=$6 metric=$7 target=$8
  local timeout=$9 out
  shift 9
  start_wrk "$label" "$t" "$c" "$((timeout + 5))" "$script" "$port" "$@"
  if ! out=$(py wait-metric "$port" "$metric" ge "$target" "$timeout"); then
    stop_pid "$WRK_PID" 10 INT
    die "wrk $label: $metric did not reach $target within ${timeout}s (last: ${out#* })"
  fi
  WAITED=${out%% *}
  LOAD_END=$EPOCHREALTIME
  # RUN_MIN: keep the load on for at least that many seconds in all.
  awk -v w="$WAITED" -v m="${RUN_MIN:-0}" 'BEGIN { exit !(w < m) }' \
    && sleep "$(awk -v w="$WAITED" -v m="$RUN_MIN" 'BEGIN { print m - w }')"
  stop_pid "$WRK_PID" 10 INT
  check_wrk "$label" "$expect" "$WRK_LOG"
}

# emit_wrk SCENARIO SYSTEM: the current WRK_RESULT as CSV rows.
emit_wrk() {
  local m s
  emit "$1" "$2" rps "$(kv rps)" req/s
  for m in p50_us p90_us p99_us max_us; do
    emit "$1" "$2" "$m" "$(kv "$m")" us
  done
  emit "$1" "$2" requests "$(kv requests)" count
  emit "$1" "$2" seconds "$(kv seconds)" s
  for s in $(kv statuses | tr ',' ' '); do
    emit "$1" "$2" "status_${s%%:*}" "${s#*:}" count
  done
}

# ---------------------------------------------------------------- CPU
# Server CPU (utime+stime of /proc/PID/stat: every thread, exited ones too)
# and context switches (voluntary + nonvoluntary of every thread in
# /proc/PID/task/*/status, summed; threads that exit during a run are
# counted in tasks_exited) of the servers' processes and their descendants,
# sampled right before and right after a measured run.
#
# proc_begin PID...: the "before" snapshot. proc_end REQUESTS: the "after"
# one; PROC_RESULT := cpu_us=.. ctx=.. ... cpu_us_per_req=.. ctx_per_req=..
PROC_N=0
proc_begin() {
  PROC_N=$((PROC_N + 1))
  PROC_SNAP=$LOGS/proc-$SCOPE-$PROC_N
  PROC_PIDS=("$@")
  py proc-sample "$@" >"$PROC_SNAP.0" || die "proc-sample $*: not running"
}
proc_end() {
  py proc-sample "${PROC_PIDS[@]}" >"$PROC_SNAP.1" \
    || die "proc-sample ${PROC_PIDS[*]}: not running after the run"
  PROC_RESULT=$(py proc-delta "$PROC_SNAP.0" "$PROC_SNAP.1" "$1") \
    || die "proc-delta failed"
  echo "$SCOPE proc pids=${PROC_PIDS[*]} requests=$1 $PROC_RESULT" >>"$RAW"
}
# word KEY TEXT: the value of KEY=VALUE among TEXT's words.
word() { sed -nE "s/(^|.* )$1=([^ ]*).*/\2/p" <<<"$2"; }
pkv() { word "$1" "$PROC_RESULT"; }

# side_begin NAME PID... / side_end NAME REQUESTS: CPU of other processes
# (an upstream, a cluster's nodes) over the same run as proc_begin/end's;
# side_end prints the CPU microseconds per request of all of them.
side_begin() {
  local name=$1
  shift
  py proc-sample "$@" >"$LOGS/side-$SCOPE-$name.0" \
    || die "proc-sample $*: not running"
  echo "$*" >"$LOGS/side-$SCOPE-$name.pids"
}
side_end() {
  local res
  # shellcheck disable=SC2046 # the pids: words
  py proc-sample $(cat "$LOGS/side-$SCOPE-$1.pids") >"$LOGS/side-$SCOPE-$1.1" \
    || die "proc-sample: $1 not running after the run"
  res=$(py proc-delta "$LOGS/side-$SCOPE-$1.0" "$LOGS/side-$SCOPE-$1.1" "$2") \
    || die "proc-delta failed"
  echo "$SCOPE side $1 requests=$2 $res" >>"$RAW"
  sed -nE 's/(^|.* )cpu_us_per_req=([^ ]*).*/\2/p' <<<"$res"
}

# emit_proc SCENARIO SYSTEM: the current PROC_RESULT as CSV rows.
emit_proc() {
  emit "$1" "$2" cpu_us_per_req "$(pkv cpu_us_per_req)" us
  emit "$1" "$2" ctx_per_req "$(pkv ctx_per_req)" count
  emit "$1" "$2" cpu_s "$(awk -v v="$(pkv cpu_us)" 'BEGIN { printf "%.3f", v / 1e6 }')" s
  emit "$1" "$2" ctx_switches "$(pkv ctx)" count
  emit "$1" "$2" threads "$(pkv tasks)" count
  emit "$1" "$2" tasks_exited "$(pkv tasks_exited)" count
  log "  $1/$2: $(pkv cpu_us_per_req) us CPU and $(pkv ctx_per_req) context switches per request ($(pkv tasks) threads)"
}

# emit_node_hist SCENARIO SYSTEM PREFIX: the node's own p50/p90/p99 of the
# requests between the histogram snapshots PREFIX.0 and PREFIX.1.
emit_node_hist() {
  local out m
  out=$(py hist-delta "$3.0" "$3.1") || die "hist-delta $3 failed"
  echo "$SCOPE node_hist $1 $out" >>"$RAW"
  for m in p50_us p90_us p99_us; do
    emit "$1" "$2" "node_$m" "$(word "$m" "$out")" us
  done
  emit "$1" "$2" node_count "$(word count "$out")" count
  log "  $1/$2 in the node's histogram: $out"
}

# run_wrk_proc PID LABEL EXPECT THREADS CONNS SECONDS SCRIPT PORT [VAR=VALUE...]:
#   run_wrk with the server process PID sampled around it (PROC_RESULT).
run_wrk_proc() {
  local pid=$1
  shift
  proc_begin "$pid"
  run_wrk "$@"
  proc_end "$(kv requests)"
}

csv_value() {  # SCENARIO SYSTEM METRIC
  awk -F, -v a="$1" -v b="$2" -v c="$3" \
    '$1 == a && $2 == b && $3 == c { v = $4 } END { print v }' "$CSV"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }'; }

# ---------------------------------------------------------------- scenarios
# 1 + 2: one fresh node: unloaded latency, then 50 connections with unique
# keys, duplicates, a 90/10 mix and one hot key.
sc_core() {
  local data=$RUN_TMP/core new0
  measure_commit_floor
  start_node core "$data"
  log "node up on port $NODE_PORT"
  # Idle: no request for IDLE_SECS (threads that spin show here).
  proc_begin "$NODE_PID"
  sleep "$IDLE_SECS"
  proc_end 1
  emit idle oncegate seconds "$IDLE_SECS" s
  emit idle oncegate cpu_pct "$(awk -v c="$(pkv cpu_us)" -v s="$IDLE_SECS" 'BEGIN { printf "%.3f", c / (s * 1e4) }')" "%"
  emit idle oncegate ctx_per_s "$(awk -v c="$(pkv ctx)" -v s="$IDLE_SECS" 'BEGIN { printf "%.1f", c / s }')" count
  log "  idle ${IDLE_SECS}s: $(csv_value idle oncegate cpu_pct) % of one core"
  # The node's own view of the same requests: its request-duration
  # histogram before and after (#31 asks for both).
  py hist-sample "$NODE_PORT" oncegate_request_duration_seconds \
    >"$LOGS/hist-unloaded.0" || die "no request histogram on /metrics"
  run_wrk_proc "$NODE_PID" unloaded 200 1 1 "$SECS" unique.lua "$NODE_PORT"
  py hist-sample "$NODE_PORT" oncegate_request_duration_seconds \
    >"$LOGS/hist-unloaded.1" || die "no request histogram on /metrics"
  emit_wrk unloaded oncegate
  emit_proc unloaded oncegate
  emit_node_hist unloaded oncegate "$LOGS/hist-unloaded"
  run_wrk_proc "$NODE_PID" unique 200 "$THREADS" "$CONNS" "$SECS" unique.lua "$NODE_PORT"
  emit_wrk unique_c50 oncegate
  emit_proc unique_c50 oncegate
  # Prime the duplicate pool with the benchmark's own body (each key claimed
  # once: 200), which also leaves its key actors warm. The requests in flight
  # when the quota is reached repeat pool keys (409).
  new0=$(metric "$NEW_DECISIONS")
  run_wrk_until prime 200,409 1 "$CONNS" duplicates.lua "$NODE_PORT" \
    "$NEW_DECISIONS" "$((new0 + POOL))" 120 WRK_POOL="$POOL" WRK_ONCE=1
  run_wrk_proc "$NODE_PID" duplicates 409 "$THREADS" "$CONNS" "$SECS" \
    duplicates.lua "$NODE_PORT" WRK_POOL="$POOL"
  emit_wrk duplicates_c50 oncegate
  emit_proc duplicates_c50 oncegate
  run_wrk mix 200,409 "$THREADS" "$CONNS" "$SECS" mix.lua "$NODE_PORT" \
    WRK_POOL="$POOL"
  emit_wrk mix_c50 oncegate
  run_wrk hot 409 "$THREADS" "$CONNS" "$SECS" hot.lua "$NODE_PORT"
  emit_wrk hot_c50 oncegate
  stop_node
}

# 1a: the floor under the unloaded latency: bench/commit_floor's one-row
# transactions (BEGIN, INSERT, COMMIT) on one SQLite connection in WAL mode
# with synchronous=FULL, in a data dir on the same disk, for BENCH_SECONDS,
# before the core node starts. A missing tool is a failure of this step
# only (the rest of the core group still runs).
measure_commit_floor() {
  local out m
  if [ ! -x "${COMMIT_FLOOR:-}" ]; then
    echo "$SCOPE: commit_floor not found at ${COMMIT_FLOOR:-?} (build the target commit_floor or set ONCEGATE_COMMIT_FLOOR)" >>"$FAILURES"
    log "FAILED $SCOPE: no commit_floor at ${COMMIT_FLOOR:-?}: floor not measured"
    return 0
  fi
  "$COMMIT_FLOOR" --dir="$RUN_TMP/floor" --seconds="$SECS" \
    >"$LOGS/commit_floor.log" 2>&1 \
    || die "commit_floor failed: $(tail -n 3 "$LOGS/commit_floor.log")"
  out=$(grep '^RESULT ' "$LOGS/commit_floor.log" | tail -n 1)
  [ -n "$out" ] || die "commit_floor: no RESULT line"
  echo "$SCOPE commit_floor $out" >>"$RAW"
  for m in commits seconds rps mean_us p50_us p90_us p99_us max_us; do
    emit commit_floor sqlite_wal_full "$m" \
      "$(sed -n "s/.* $m=\([^ ]*\).*/\1/p" <<<"$out")" \
      "$(case $m in commits) echo count ;; seconds) echo s ;; rps) echo commits/s ;; *) echo us ;; esac)"
  done
  log "  commit floor: $(sed -n 's/.* rps=\([^ ]*\).*/\1/p' <<<"$out") commits/s, p50=$(csv_value commit_floor sqlite_wal_full p50_us)us p99=$(csv_value commit_floor sqlite_wal_full p99_us)us"
}

ms_to_us() { awk -v v="$1" 'BEGIN { printf "%d", v * 1000 }'; }

# 3: Redis SET NX EX with an append-only file, fsync always and everysec.
redis_one() {
  local mode=$1 dir port pid i cal n out rps p50 p95 p99 max
  dir=$RUN_TMP/redis-$mode
  mkdir -p "$dir"
  port=$(py freeport 1 --hold-for $$)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly yes \
    --appendfsync "$mode" --dir "$dir" --daemonize no \
    --logfile "$dir/redis.log" </dev/null >/dev/null 2>&1 &
  pid=$!
  track "$pid" redis-server
  for i in $(seq 100); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
    kill -0 "$pid" 2>/dev/null || die "redis-server exited: $(tail -n 3 "$dir/redis.log")"
    sleep 0.05
  done
  [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] || die "redis-server not up"
  # Calibrate N so that the measured run lasts about BENCH_SECONDS.
  cal=$([ "$SMOKE" = 1 ] && echo 5000 || echo 20000)
  redis-benchmark -q -p "$port" -c 50 -n "$cal" -r 100000000 --csv \
    SET key:__rand_int__ 1 NX EX 86400 >"$LOGS/redis-$mode-cal.csv" 2>&1 \
    || die "redis-benchmark (calibration) failed"
  out=$(py redis-csv "$LOGS/redis-$mode-cal.csv") || die "redis calibration: no result"
  n=$(awk -v r="${out%% *}" -v s="$SECS" -v c="$cal" \
        'BEGIN { n = int(r * s); print (n < c ? c : n) }')
  proc_begin "$pid"
  redis-benchmark -q -p "$port" -c 50 -n "$n" -r 100000000 --csv \
    SET key:__rand_int__ 1 NX EX 86400 >"$LOGS/redis-$mode.csv" 2>&1 \
    || die "redis-benchmark failed: $(tail -n 3 "$LOGS/redis-$mode.csv")"
  proc_end "$n"
  out=$(py redis-csv "$LOGS/redis-$mode.csv") || die "redis-benchmark: no result"
  echo "$SCOPE redis-$mode n=$n $out" >>"$RAW"
  read -r rps p50 p95 p99 max <<<"$out"
  log "  redis appendfsync $mode: rps=$rps p50=${p50}ms p99=${p99}ms (n=$n)"
  emit unique_c50 "redis_$mode" rps "$rps" req/s
  emit unique_c50 "redis_$mode" p50_us "$(ms_to_us "$p50")" us
  emit unique_c50 "redis_$mode" p95_us "$(ms_to_us "$p95")" us
  emit unique_c50 "redis_$mode" p99_us "$(ms_to_us "$p99")" us
  emit unique_c50 "redis_$mode" max_us "$(ms_to_us "$max")" us
  emit unique_c50 "redis_$mode" requests "$n" count
  emit unique_c50 "redis_$mode" keys_in_db "$(redis-cli -p "$port" dbsize)" count
  emit_proc unique_c50 "redis_$mode"
  stop_pid "$pid" 30 TERM
}

sc_redis() {
  redis_one always
  redis_one everysec
}

# 4: nginx returning 200, driven by the oncegate duplicates script.
sc_nginx() {
  local dir=$RUN_TMP/nginx port pid i
  mkdir -p "$dir"
  port=$(py freeport 1 --hold-for $$)
  sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$port|g" "$LIB/nginx.conf.in" \
    >"$dir/nginx.conf"
  nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
    </dev/null >"$dir/stdout.log" 2>&1 &
  pid=$!
  track "$pid" nginx
  for i in $(seq 100); do
    curl -fs -o /dev/null -X POST -d '{}' "http://127.0.0.1:$port/v1/webhook" && break
    kill -0 "$pid" 2>/dev/null || die "nginx exited: $(cat "$dir/stdout.log" "$dir/error.log" | tail -n 3)"
    sleep 0.05
  done
  curl -fs -o /dev/null -X POST -d '{}' "http://127.0.0.1:$port/v1/webhook" \
    || die "nginx does not answer"
  run_wrk_proc "$pid" nginx-duplicates 200 "$THREADS" "$CONNS" "$SECS" \
    duplicates.lua "$port" WRK_POOL="$POOL"
  emit_wrk duplicates_c50 nginx
  emit_proc duplicates_c50 nginx
  stop_pid "$pid" 30 QUIT
}

# 4b: upstream over https vs http: one node with two routes forwarding to
# the same local nginx `return 200` (bench/lib/nginx-upstream.conf.in), one
# over http and one over https (a CA and a server certificate for 127.0.0.1
# made here with the openssl CLI, trusted with the route's
# upstream-ca-file); unique keys with 50 connections against each route.
# ratio_to_http = https req/s / http req/s.
make_upstream_certs() {  # DIR: ca.pem, server.pem, server.key
  local d=$1 ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  mkdir -p "$d"
  {
    openssl req -x509 "${ec[@]}" -days 2 -subj "/CN=oncegate bench CA" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -keyout "$d/ca.key" -out "$d/ca.pem" \
    && openssl req -new "${ec[@]}" -subj "/CN=127.0.0.1" \
      -keyout "$d/server.key" -out "$d/server.csr" \
    && printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
      "extendedKeyUsage=serverAuth" "basicConstraints=CA:FALSE" >"$d/server.ext" \
    && openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" \
      -set_serial "0x$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" -days 2 \
      -extfile "$d/server.ext" -out "$d/server.pem"
  } >"$LOGS/upstream-certs.log" 2>&1 \
    || die "openssl: cannot make the upstream certificates: $(tail -n 3 "$LOGS/upstream-certs.log")"
}

sc_upstream() {
  local dir=$RUN_TMP/upstream ports=() hport sport pid i ini route sys ok
  local http https sent wpid nsys ncpu
  mkdir -p "$dir"
  make_upstream_certs "$dir/tls"
  mapfile -t ports < <(py freeport 2 --hold-for $$)
  [ "${#ports[@]}" = 2 ] || die "freeport: ${ports[*]}"
  hport=${ports[0]} sport=${ports[1]}
  sed -e "s|@DIR@|$dir|g" -e "s|@PORT@|$hport|g" -e "s|@TLS_PORT@|$sport|g" \
      -e "s|@CERT@|$dir/tls/server.pem|g" -e "s|@KEY@|$dir/tls/server.key|g" \
      "$LIB/nginx-upstream.conf.in" >"$dir/nginx.conf"
  nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" \
    </dev/null >"$dir/stdout.log" 2>&1 &
  pid=$!
  track "$pid" nginx
  ok=
  for i in $(seq 100); do
    if curl -fs -o /dev/null -X POST -d '{}' "http://127.0.0.1:$hport/hook" \
       && curl -fs -o /dev/null --cacert "$dir/tls/ca.pem" -X POST -d '{}' \
            "https://127.0.0.1:$sport/hook"; then
      ok=1
      break
    fi
    kill -0 "$pid" 2>/dev/null || die "nginx exited: $(cat "$dir/stdout.log" "$dir/error.log" | tail -n 3)"
    sleep 0.05
  done
  [ -n "$ok" ] || die "nginx (upstream) does not answer over http and https"
  ini=$dir/node.ini
  cat >"$ini" <<EOF_INI
[route.plain]
upstream="http://127.0.0.1:$hport/hook"
[route.tls]
upstream="https://127.0.0.1:$sport/hook"
upstream-ca-file="$dir/tls/ca.pem"
EOF_INI
  start_node upstream "$dir/node" --config-file="$ini"
  log "node up on port $NODE_PORT: route plain -> http://127.0.0.1:$hport, route tls -> https://127.0.0.1:$sport"
  # The upstream's own CPU per request (its one worker process), next to
  # the node's: both ends of the TLS connections share the two cores.
  wpid=$(pgrep -P "$pid" | head -n 1)
  [ -n "$wpid" ] || die "nginx (upstream) has no worker process"
  for route in plain tls; do
    sys=$([ "$route" = tls ] && echo oncegate_https_upstream || echo oncegate_http_upstream)
    nsys=$([ "$route" = tls ] && echo nginx_https_upstream || echo nginx_http_upstream)
    side_begin "nginx-$route" "$wpid"
    run_wrk_proc "$NODE_PID" "upstream-$route" 200 "$THREADS" "$CONNS" "$SECS" \
      unique.lua "$NODE_PORT" WRK_PATH="/v1/webhook/$route"
    emit_wrk upstream_c50 "$sys"
    emit_proc upstream_c50 "$sys"
    ncpu=$(side_end "nginx-$route" "$(kv requests)")
    emit upstream_c50 "$nsys" cpu_us_per_req "$ncpu" us
    log "  upstream_c50/$nsys: $ncpu us CPU per request (the upstream's worker)"
    # Every answer came from the upstream (none released or in doubt).
    sent=$(metric "oncegate_upstream_results_total{route=\"$route\",result=\"response\"}")
    emit upstream_c50 "$sys" upstream_responses "$sent" count
    [ "$sent" -ge "$(status_count 200)" ] \
      || die "route $route: $sent upstream responses for $(status_count 200) answers 200"
  done
  http=$(csv_value upstream_c50 oncegate_http_upstream rps)
  https=$(csv_value upstream_c50 oncegate_https_upstream rps)
  emit upstream_c50 oncegate_https_upstream ratio_to_http "$(ratio "$https" "$http")" x
  log "  https / http upstream: $(ratio "$https" "$http") x ($https vs $http req/s)"
  stop_node
  stop_pid "$pid" 30 QUIT
}

# 5: a big store: restart-to-ready time and unique-key throughput.
sc_big() {
  local data=$RUN_TMP/big secs i out ready stop times=() median
  log "preloading $BIG_KEYS records"
  secs=$(preload "$data" p- "$BIG_KEYS")
  log "  preloaded in ${secs}s"
  emit big_store_restart oncegate keys "$BIG_KEYS" count
  emit big_store_restart oncegate preload_s "$secs" s
  emit big_store_restart oncegate db_mib "$(du -sm "$data" | cut -f1)" MiB
  for i in $(seq "$RESTARTS"); do
    # shellcheck disable=SC2086
    out=$(py ready-time "$READY_TIMEOUT" "$ONCEGATE_BIN" --http-host=127.0.0.1 \
            --http-port=0 --data-dir="$data" --log-level=warn ${NODE_ARGS} \
            2>>"$LOGS/big-restart.err") \
      || die "restart $i: no ready line within ${READY_TIMEOUT}s"
    read -r ready stop <<<"$out"
    times+=("$(awk -v v="$ready" 'BEGIN { printf "%.1f", v * 1000 }')")
    emit big_store_restart oncegate "ready_ms_$i" "${times[-1]}" ms
    emit big_store_restart oncegate "stop_ms_$i" "$(awk -v v="$stop" 'BEGIN { printf "%.1f", v * 1000 }')" ms
  done
  median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  log "  restart to ready: ${times[*]} ms (median $median)"
  emit big_store_restart oncegate ready_ms_median "$median" ms
  start_node big "$data"
  run_wrk big-unique 200 "$THREADS" "$CONNS" "$SECS" unique.lua "$NODE_PORT"
  emit_wrk big_store_unique_c50 oncegate
  stop_node
}

# 6: unique keys while the alarm purges many expired records. wrk starts
# right after the ready line (the alarm purges from start) and is stopped
# when oncegate_purged_records_total reaches the count, so the measured run
# is the purge (at least BENCH_PURGE_MIN_SECONDS, default 1). The p99 of
# one such run is decided by a few stalls and did not repeat (0.42-4.3 x
# for one build): BENCH_PURGE_RUNS rounds, each on a fresh preload, and
# the round with the median p99 is the one reported (every round's p99 is
# kept as p99_us_round_N). Each round's no-purge p99 is measured on the
# same node right after its purge; p99_ratio is against their median.
sc_purge() {
  local data secs base wrk_s purge_s r p99s=() results=() waits=() mid
  local purged=() runs=() bases=() base_mid
  for r in $(seq "$PURGE_RUNS"); do
    data=$RUN_TMP/purge-$r
    log "round $r/$PURGE_RUNS: preloading $PURGE_KEYS expired records"
    secs=$(preload "$data" x- "$PURGE_KEYS" --expired)
    log "  preloaded in ${secs}s"
    start_node "purge-$r" "$data"
    RUN_MIN=${BENCH_PURGE_MIN_SECONDS:-1}
    run_wrk_until "purge-unique-$r" 200 "$THREADS" "$CONNS" unique.lua \
      "$NODE_PORT" oncegate_purged_records_total "$PURGE_KEYS" \
      "${BENCH_PURGE_TIMEOUT:-300}"
    RUN_MIN=0
    p99s[r]=$(kv p99_us)
    results[r]=$WRK_RESULT
    waits[r]=$WAITED
    purged[r]=$(metric oncegate_purged_records_total)
    runs[r]=$(metric oncegate_purge_runs_total)
    # The no-purge baseline on the same node right after, with the same
    # store and live actors, not `core`'s minutes earlier on an empty one.
    # (Rounds once read 39-56 ms after the Redis group and 8-9 ms without
    # it: that was the registry's rehash, 57-209 ms at 100k-500k live keys,
    # landing in whichever run crossed the size; gone since 4c8df1e.)
    run_wrk "purge-base-$r" 200 "$THREADS" "$CONNS" "$SECS" unique.lua "$NODE_PORT"
    bases[r]=$(kv p99_us)
    emit purge_unique_c50 oncegate "p99_us_round_$r" "${p99s[r]}" us
    emit purge_unique_c50 oncegate "no_purge_p99_us_round_$r" "${bases[r]}" us
    log "  round $r: p99 ${p99s[r]} us while purging (${WAITED}s), ${bases[r]} us after it"
    stop_node
    rm -rf "$data"
  done
  # The median round (by p99) is the run reported.
  mid=$(for r in $(seq "$PURGE_RUNS"); do echo "${p99s[r]} $r"; done \
         | sort -n | awk '{ v[NR] = $2 } END { print v[int((NR + 1) / 2)] }')
  WRK_RESULT=${results[mid]}
  purge_s=${waits[mid]}
  emit purge_unique_c50 oncegate purge_keys "$PURGE_KEYS" count
  emit purge_unique_c50 oncegate purge_rounds "$PURGE_RUNS" count
  emit purge_unique_c50 oncegate median_round "$mid" count
  emit_wrk purge_unique_c50 oncegate
  wrk_s=$(kv seconds)
  base_mid=$(printf '%s\n' "${bases[@]}" | sort -n \
              | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  emit purge_unique_c50 oncegate no_purge_p99_us "$base_mid" us
  emit purge_unique_c50 oncegate p99_ratio "$(ratio "$(kv p99_us)" "$base_mid")" x
  # Against core's unique_c50 too (the baseline of earlier runs).
  base=$(csv_value unique_c50 oncegate p99_us)
  if [ -n "$base" ]; then
    emit purge_unique_c50 oncegate p99_ratio_to_core "$(ratio "$(kv p99_us)" "$base")" x
  fi
  emit purge_unique_c50 oncegate purge_s "$purge_s" s
  emit purge_unique_c50 oncegate purged_records "${purged[mid]}" count
  emit purge_unique_c50 oncegate purge_runs "${runs[mid]}" count
  # Share of the measured run during which the purge was still going on.
  emit purge_unique_c50 oncegate purge_overlap "$(awk -v p="$purge_s" -v w="$wrk_s" 'BEGIN { r = p / w; printf "%.2f", (r > 1 ? 1 : r) }')" fraction
  log "  purge of $PURGE_KEYS: p99 per round ${p99s[*]} us (after it: ${bases[*]} us); median round $mid (purge ${purge_s}s, measured run ${wrk_s}s)"
}

# 7: RSS per live key actor (idle timeout 1 h: nothing passivates).
memory_one() {
  local name=$1 keys=$2 data=$RUN_TMP/mem-$1 rss0 rss1 live0 live1 t0
  # shellcheck disable=SC2086 # BENCH_MEM_ARGS: words
  start_node "mem-$name" "$data" --keys.idle-timeout=1h \
    --keys.max-live="$((keys * 2 + 100000))" ${MEM_ARGS}
  # Warm up HTTP, connections and one key actor before the baseline.
  run_wrk "mem-$name-warmup" 200,409 "$THREADS" "$CONNS" 1 hot.lua "$NODE_PORT"
  sleep 0.5
  rss0=$(rss_kib "$NODE_PID")
  live0=$(metric "$LIVE")
  t0=$EPOCHREALTIME
  run_wrk_until "mem-$name" 200,409 "$THREADS" "$CONNS" unique.lua "$NODE_PORT" \
    "$LIVE" "$((live0 + keys))" "${BENCH_MEM_TIMEOUT:-600}" \
    WRK_KEYS_PER_THREAD="$((keys / THREADS))"
  emit "memory_$name" oncegate push_s "$(elapsed_since "$t0")" s
  sleep 1
  rss1=$(rss_kib "$NODE_PID")
  live1=$(metric "$LIVE")
  emit "memory_$name" oncegate keys "$keys" count
  emit "memory_$name" oncegate live_actors "$live1" count
  emit "memory_$name" oncegate rss_before_kib "$rss0" KiB
  emit "memory_$name" oncegate rss_after_kib "$rss1" KiB
  emit "memory_$name" oncegate bytes_per_actor \
    "$(awk -v a="$rss0" -v b="$rss1" -v l0="$live0" -v l1="$live1" \
        'BEGIN { printf "%.0f", (b - a) * 1024 / (l1 - l0) }')" bytes
  log "  $keys live actors: RSS $rss0 -> $rss1 KiB"
  stop_node
}

sc_memory() {
  memory_one small "$MEM_KEYS"
  if [ "$MEM_KEYS_LARGE" -gt 0 ]; then
    memory_one large "$MEM_KEYS_LARGE"
  else
    log "  large memory measurement skipped (BENCH_MEM_KEYS_LARGE=0)"
  fi
}

# 7b: idle actors passivate: live actors drop to 0 after the load stops.
sc_passivation() {
  local data=$RUN_TMP/passivate live out rss1 secs zero_s
  start_node passivate "$data" --keys.idle-timeout="$IDLE_TIMEOUT"
  run_wrk_until passivate 200,409 "$THREADS" "$CONNS" unique.lua "$NODE_PORT" \
    "$NEW_DECISIONS" "$PASSIVATE_KEYS" 120 \
    WRK_KEYS_PER_THREAD="$((PASSIVATE_KEYS / THREADS))"
  live=$(metric "$LIVE")
  rss1=$(rss_kib "$NODE_PID")
  emit passivation oncegate keys "$PASSIVATE_KEYS" count
  emit passivation oncegate live_at_load_end "$live" count
  secs=$(awk -v t="$IDLE_TIMEOUT" 'BEGIN { v = t + 0; if (t ~ /ms$/) v /= 1000; else if (t ~ /min$/) v *= 60; else if (t ~ /h$/) v *= 3600; print int(v * 3 + 15) }')
  out=$(py wait-metric "$NODE_PORT" "$LIVE" le 0 "$secs") \
    || die "live actors still ${out#* } ${secs}s after the load stopped (idle timeout $IDLE_TIMEOUT)"
  # Counted from the moment the node had answered every key of the load.
  zero_s=$(elapsed_since "$LOAD_END")
  emit passivation oncegate seconds_to_zero "$zero_s" s
  emit passivation oncegate live_after "${out#* }" count
  emit passivation oncegate idle_timeout_s "$(awk -v t="$IDLE_TIMEOUT" 'BEGIN { print t + 0 }')" s
  emit passivation oncegate passivated_total "$(metric oncegate_key_actors_passivated_total)" count
  emit passivation oncegate rss_loaded_kib "$rss1" KiB
  emit passivation oncegate rss_after_kib "$(rss_kib "$NODE_PID")" KiB
  log "  $live live actors -> 0 in ${zero_s}s after the load (idle timeout $IDLE_TIMEOUT)"
  stop_node
}

# 8: cold starts: duplicates of preloaded keys on a fresh node, one
# connection, each key once (actor spawn + SQLite read per request).
sc_cold() {
  local data=$RUN_TMP/cold spawned
  preload "$data" c- "$COLD_KEYS" >/dev/null
  start_node cold "$data"
  run_wrk cold 409 1 1 "$SECS" duplicates.lua "$NODE_PORT" \
    WRK_POOL="$COLD_KEYS" WRK_PREFIX=c- WRK_ONCE=1 WRK_BODY='{}'
  emit_wrk cold_start oncegate
  spawned=$(metric oncegate_key_actors_spawned_total)
  emit cold_start oncegate keys "$COLD_KEYS" count
  emit cold_start oncegate cold_starts "$spawned" count
  [ "$spawned" -ge "$(kv requests)" ] \
    || die "only $spawned of $(kv requests) requests were cold starts"
  stop_node
}

# 9: a 3-node Raft cluster on 127.0.0.1 (every decision committed on a
# majority: appended and fsynced by two of the three nodes' Raft logs):
# unloaded latency and 50 connections of unique keys against the leader,
# then 50 connections against a follower (which forwards to the leader).
# Afterwards every node must hold the same number of records, and at least
# as many as were acknowledged with 200.
status_count() {  # CODE: answers with that status in WRK_RESULT
  local s n=0
  for s in $(kv statuses | tr ',' ' '); do
    [ "${s%%:*}" = "$1" ] && n=${s#*:}
  done
  echo "$n"
}

# The 3-node rows twice in one run: mutual TLS between the nodes (the
# default; sys oncegate_cluster3) and cluster.insecure (sys
# oncegate_cluster3_insecure), with the TLS/plain ratio of each row.
sc_cluster() {
  local row tls plain
  cluster_run tls oncegate_cluster3
  cluster_run insecure oncegate_cluster3_insecure
  for row in cluster3_unloaded cluster3_follower_unloaded cluster3_leader_c50 cluster3_follower_c50; do
    tls=$(csv_value "$row" oncegate_cluster3 rps)
    plain=$(csv_value "$row" oncegate_cluster3_insecure rps)
    [ -z "$tls" ] || [ -z "$plain" ] \
      || emit "$row" oncegate_cluster3 ratio_to_insecure "$(ratio "$tls" "$plain")" x
  done
}

cluster_run() {
  local mode=$1 sys=$2 dir=$RUN_TMP/cluster-$1 ini ports=() pids=() tlsargs=()
  local http=() i out lport lid term0 term1 fport fid acked=0 base
  local settle index lid1 counts=() t0
  mkdir -p "$dir"
  ini=$dir/cluster.ini
  mapfile -t ports < <(py freeport 3 --hold-for $$)
  [ "${#ports[@]}" = 3 ] || die "freeport: ${ports[*]}"
  {
    echo '[cluster]'
    echo 'peers=['
    for i in 1 2 3; do
      printf '  "%d=127.0.0.1:%d"%s\n' "$i" "${ports[$(( i - 1 ))]}" \
        "$([ "$i" -lt 3 ] && echo ,)"
    done
    echo ']'
    echo 'election-timeout=500ms'
    echo 'heartbeat-timeout=50ms'
    if [ "$mode" = tls ]; then
      echo "tls-ca=\"$dir/tls/ca.pem\""
    else
      echo 'insecure=true'
    fi
  } >"$ini"
  if [ "$mode" = tls ]; then
    "$ROOT/scripts/cluster-certs.sh" "$dir/tls" 1 2 3 >/dev/null \
      || die "cluster-certs failed"
  fi
  t0=$EPOCHREALTIME
  for i in 1 2 3; do
    tlsargs=()
    [ "$mode" != tls ] || tlsargs=(--cluster.tls-certificate="$dir/tls/node-$i.pem"
                                   --cluster.tls-key="$dir/tls/node-$i.key")
    start_node "cluster-$mode-node$i" "$dir/node$i" --config-file="$ini" \
      --cluster.id="$i" "${tlsargs[@]}"
    pids[i]=$NODE_PID
    http[i]=$NODE_PORT
  done
  out=$(py cluster-wait "$READY_TIMEOUT" "${http[1]}" "${http[2]}" "${http[3]}") \
    || die "cluster not ready with a leader within ${READY_TIMEOUT}s: ${out#* }"
  read -r _ lport lid term0 <<<"$out"
  emit cluster3_store "$sys" start_s "$(elapsed_since "$t0")" s
  for i in 1 2 3; do
    if [ "$i" != "$lid" ]; then fid=$i; fport=${http[i]}; break; fi
  done
  log "cluster ready $(elapsed_since "$t0")s after the first node's start: leader node $lid (port $lport, term $term0), follower node $fid (port $fport)"

  run_wrk "cluster-$mode-unloaded" 200 1 1 "$SECS" unique.lua "$lport"
  emit_wrk cluster3_unloaded "$sys"
  acked=$((acked + $(status_count 200)))
  # The same via a follower: it forwards each request over the node link.
  run_wrk "cluster-$mode-follower-unloaded" 200 1 1 "$SECS" unique.lua "$fport"
  emit_wrk cluster3_follower_unloaded "$sys"
  acked=$((acked + $(status_count 200)))
  base=$(csv_value unique_c50 oncegate rps)
  # CPU per decision of the three nodes together and of the leader: the
  # cluster and wrk share the two cores, so the sum bounds the rate.
  side_begin "cluster-$mode-leader-all" "${pids[1]}" "${pids[2]}" "${pids[3]}"
  side_begin "cluster-$mode-leader-leader" "${pids[lid]}"
  run_wrk "cluster-$mode-leader" 200 "$THREADS" "$CONNS" "$SECS" unique.lua "$lport"
  emit_wrk cluster3_leader_c50 "$sys"
  emit cluster3_leader_c50 "$sys" cpu_us_per_req \
    "$(side_end "cluster-$mode-leader-all" "$(kv requests)")" us
  emit cluster3_leader_c50 "$sys" cpu_us_per_req_leader \
    "$(side_end "cluster-$mode-leader-leader" "$(kv requests)")" us
  acked=$((acked + $(status_count 200)))
  [ -z "$base" ] || emit cluster3_leader_c50 "$sys" ratio_to_single "$(ratio "$(kv rps)" "$base")" x
  side_begin "cluster-$mode-follower-all" "${pids[1]}" "${pids[2]}" "${pids[3]}"
  side_begin "cluster-$mode-follower-leader" "${pids[lid]}"
  run_wrk "cluster-$mode-follower" 200 "$THREADS" "$CONNS" "$SECS" unique.lua "$fport"
  emit_wrk cluster3_follower_c50 "$sys"
  emit cluster3_follower_c50 "$sys" cpu_us_per_req \
    "$(side_end "cluster-$mode-follower-all" "$(kv requests)")" us
  emit cluster3_follower_c50 "$sys" cpu_us_per_req_leader \
    "$(side_end "cluster-$mode-follower-leader" "$(kv requests)")" us
  acked=$((acked + $(status_count 200)))
  [ -z "$base" ] || emit cluster3_follower_c50 "$sys" ratio_to_single "$(ratio "$(kv rps)" "$base")" x

  out=$(py cluster-settle 30 "${http[1]}" "${http[2]}" "${http[3]}") \
    || die "nodes did not apply the whole log within 30s: ${out#* }"
  read -r settle index lid1 term1 <<<"$out"
  emit cluster3_store "$sys" settle_s "$settle" s
  emit cluster3_store "$sys" applied_index "$index" count
  # Elections during the runs (the leader runs were against node $lid).
  emit cluster3_store "$sys" elections_during_runs "$((term1 - term0))" count
  [ "$term1" = "$term0" ] \
    || log "  WARNING: term $term0 -> $term1 during the runs (leader node $lid -> $lid1)"
  # Stop all three at once, then count each node's records from its file.
  t0=$EPOCHREALTIME
  for i in 1 2 3; do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  for i in 1 2 3; do stop_pid "${pids[i]}" "$STOP_TIMEOUT" TERM; done
  emit cluster3_store "$sys" stop_s "$(elapsed_since "$t0")" s
  log "  nodes stopped in $(elapsed_since "$t0")s"
  out=$(py sqlite-count records "$dir"/node{1,2,3}/oncegate.db) \
    || die "cannot count the records in the nodes' SQLite files"
  mapfile -t counts <<<"$out"
  counts=("" "${counts[@]}")  # counts[N]: node N
  [ "${#counts[@]}" = 4 ] || die "sqlite-count: $(tr '\n' ' ' <<<"$out")"
  for i in 1 2 3; do
    [[ "${counts[i]}" =~ ^[0-9]+$ ]] || die "record count of node $i: ${counts[i]}"
    emit cluster3_store "$sys" "records_node$i" "${counts[i]}" count
  done
  emit cluster3_store "$sys" acknowledged "$acked" count
  log "  records per node: ${counts[1]} ${counts[2]} ${counts[3]} (acknowledged with 200: $acked)"
  if [ "${counts[1]}" = "${counts[2]}" ] && [ "${counts[2]}" = "${counts[3]}" ]; then
    emit cluster3_store "$sys" records_equal 1 bool
  else
    emit cluster3_store "$sys" records_equal 0 bool
    die "nodes differ in their record counts: ${counts[1]} ${counts[2]} ${counts[3]}"
  fi
  [ "${counts[1]}" -ge "$acked" ] \
    || die "${counts[1]} records, fewer than the $acked acknowledged"
}

# 10: memory under a flood of large signals (bench/lib/flood.py): unique
# keys with 60 KiB bodies, 60 KiB upstream answers on a replay route, one
# node and a 3-node cluster; the peak RSS of every node against the bound
# its byte limits promise (docs/benchmarks.md).
sc_flood() {
  local mode out
  for mode in single cluster; do
    out=$(python3 "$LIB/flood.py" "$ONCEGATE_BIN" "$mode" "$FLOOD_KEYS" 8 \
            "$RUN_TMP") || { printf '%s\n' "$out" >>"$CSV"; die "flood $mode: a peak over its bound or failed requests (see the log)"; }
    printf '%s\n' "$out" >>"$CSV"
    log "  flood $mode: $(grep -E 'rss_peak_kib|bound_kib' <<<"$out" | cut -d, -f3,4 | tr '\n' ' ')"
  done
}

# ---------------------------------------------------------------- report
machine_info() {
  local m=$STAGE/machine.txt
  {
    printf 'date\t%s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    printf 'nproc\t%s\n' "$(nproc)"
    printf 'cpu\t%s\n' "$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    printf 'memory\t%s\n' "$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    printf 'kernel\t%s\n' "$(uname -sr)"
    printf 'os\t%s\n' "$( . /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-?}")"
    printf 'data dir fs\t%s (%s, %s)\n' "$(df --output=fstype "$TMPBASE" | tail -n 1 | tr -d ' ')" \
      "$(df --output=source "$TMPBASE" | tail -n 1 | tr -d ' ')" "$TMPBASE"
    printf 'commit\t%s%s\n' "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')" \
      "$([ -n "$(git -C "$ROOT" --no-optional-locks status --porcelain --untracked-files=no 2>/dev/null)" ] && echo ' (working tree modified)')"
    printf 'binaries\t%s\n' "$BUILD_NOTE"
    printf 'tools\t%s; %s; %s\n' "$(wrk -v 2>&1 | head -n 1 | awk '{ print $1, $2 }')" \
      "$(redis-server --version | awk '{ print $1, $2, $3 }')" "$(nginx -v 2>&1 | sed 's/.*: //')"
    printf 'mode\t%s\n' "$([ "$SMOKE" = 1 ] && echo 'smoke (BENCH_SMOKE=1)' || echo full)"
    printf 'knobs\tBENCH_SECONDS=%s BENCH_THREADS=%s BENCH_CONNECTIONS=%s BENCH_POOL=%s BENCH_BIG_KEYS=%s BENCH_PURGE_KEYS=%s BENCH_MEM_KEYS=%s BENCH_MEM_KEYS_LARGE=%s BENCH_PASSIVATE_KEYS=%s BENCH_IDLE_TIMEOUT=%s BENCH_COLD_KEYS=%s BENCH_RESTARTS=%s BENCH_NODE_ARGS="%s" BENCH_MEM_ARGS="%s"\n' \
      "$SECS" "$THREADS" "$CONNS" "$POOL" "$BIG_KEYS" "$PURGE_KEYS" "$MEM_KEYS" \
      "$MEM_KEYS_LARGE" "$PASSIVATE_KEYS" "$IDLE_TIMEOUT" "$COLD_KEYS" "$RESTARTS" \
      "$NODE_ARGS" "$MEM_ARGS"
  } >"$m"
}

run_group() {
  local g=$1 t0=$EPOCHREALTIME rc
  log "== $g"
  # The group runs in a background subshell that the main shell waits for:
  # `wait` returns at once on SIGINT/SIGTERM, so the main traps can stop
  # everything (a foreground subshell would run to its end first).
  set +e
  (
    set -e
    SCOPE=$g
    trap 'stop_tracked "$RUN_TMP/pids.$SCOPE"' EXIT
    "sc_$g"
  ) &
  GROUP_PID=$!
  wait "$GROUP_PID"
  rc=$?
  GROUP_PID=
  set -e
  printf '%s\t%s\t%s\n' "$g" "$(elapsed_since "$t0")" "$([ $rc = 0 ] && echo ok || echo failed)" >>"$TIMINGS"
  if [ $rc -ne 0 ]; then
    grep -q "^$g:" "$FAILURES" || echo "$g: failed (exit $rc), see the log above" >>"$FAILURES"
    GROUPS_FAILED=$((GROUPS_FAILED + 1))
  fi
  log "== $g done in $(elapsed_since "$t0") s ($([ $rc = 0 ] && echo ok || echo FAILED))"
}

# ---------------------------------------------------------------- main
check_tools
build
log "oncegate: $ONCEGATE_BIN"
if [ "$SMOKE" = 1 ]; then
  OUT=${BENCH_OUT:-$(mktemp -d "$TMPBASE/oncegate-bench-smoke.XXXXXX")}
else
  OUT=${BENCH_OUT:-$ROOT/docs/benchmarks}
fi
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
case "$(df --output=fstype "$TMPBASE" | tail -n 1 | tr -d ' ')" in
  tmpfs|ramfs) log "WARNING: $TMPBASE is $(df --output=fstype "$TMPBASE" | tail -n 1): fsync is free there, numbers are not representative" ;;
esac

machine_info
GROUPS_FAILED=0
for g in $SCENARIOS; do
  declare -F "sc_$g" >/dev/null || { echo "unknown scenario group $g" >>"$FAILURES"; continue; }
  run_group "$g"
done

# The targets' verdicts (bench/lib/targets.py), from this run's rows.
if ! python3 "$LIB/targets.py" "$CSV" >"$RUN_TMP/targets.csv" 2>"$LOGS/targets.log"; then
  echo "targets: bench/lib/targets.py failed: $(tail -n 3 "$LOGS/targets.log")" >>"$FAILURES"
  log "targets.py failed: $(tail -n 3 "$LOGS/targets.log")"
fi
cat "$RUN_TMP/targets.csv" >>"$CSV"
TOTAL=$(elapsed_since "$START_EPOCH")
python3 "$LIB/report.py" --csv "$CSV" --machine "$STAGE/machine.txt" \
  --failures "$FAILURES" --timings "$TIMINGS" --total "$TOTAL" --out "$STAGE"
plots=""
for p in throughput latency; do
  # a header line and at least one data row
  [ "$(wc -l <"$STAGE/$p.dat")" -gt 1 ] && plots="$plots $p"
done
if ! gnuplot -e "dir='$STAGE'; plots='$plots'" "$LIB/plots.gp" 2>"$LOGS/gnuplot.log"; then
  echo "plots: gnuplot failed: $(tail -n 3 "$LOGS/gnuplot.log")" >>"$FAILURES"
  log "gnuplot failed: $(tail -n 3 "$LOGS/gnuplot.log")"
fi
# Replace this harness's own files in OUT (nothing else there), so that no
# stale plot of an earlier run survives.
written=()
for f in results.csv results.md raw.log throughput.png latency.png; do
  rm -f "${OUT:?}/$f"
  if [ -f "$STAGE/$f" ]; then
    cp "$STAGE/$f" "$OUT/$f"
    written+=("$f")
  fi
done
log "results in $OUT (${written[*]}); total ${TOTAL}s"
if [ -s "$FAILURES" ]; then
  log "failures:"
  sed 's/^/  /' "$FAILURES" >&2
  exit 1
fi
