#!/usr/bin/env bash
# Smoke test of the benchmark harness: runs `BENCH_SMOKE=1 bench/run.sh`
# (1 s per timed run, tiny key counts, results in a temp dir) and checks
# that results.csv has a row with a positive value for every scenario and
# system, that the report and plots were written and that the harness exited
# 0. Prints one line per check and a final `N passed, M failed`.
#
# With ONCEGATE_BIN and ONCEGATE_PRELOAD set (CTest passes the test build's
# binaries) the harness skips its release build and takes bench/commit_floor
# from ONCEGATE_COMMIT_FLOOR or else from ONCEGATE_PRELOAD's directory;
# otherwise it builds (or incrementally updates) build-release first. Every
# target row (targets,<measure>,value|target_*|met) must be there with a
# value; whether the target is met is not checked (a smoke run is tiny).
# Bounded by BENCH_SMOKE_TIMEOUT seconds (default 600, build included).
# With ONCEGATE_BIN it also runs bench/threads.sh for one second.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/oncegate-bench-smoke-test.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

BENCH_SMOKE=1 BENCH_OUT="$OUT" timeout "${BENCH_SMOKE_TIMEOUT:-600}" \
  "$ROOT/bench/run.sh"
rc=$?

passed=0
failed=0
check() {  # NAME OK(0/1) [DETAIL]
  if [ "$2" = 0 ]; then
    passed=$((passed + 1))
    echo "PASS $1"
  else
    failed=$((failed + 1))
    echo "FAIL $1${3:+: $3}"
  fi
}

csv=$OUT/results.csv
check "bench/run.sh exit status" "$([ "$rc" = 0 ] && echo 0 || echo 1)" \
  "exit $rc"

# scenario,system pairs that must have a positive value
pairs="
unloaded oncegate
unique_c50 oncegate
unique_c50 redis_always
unique_c50 redis_everysec
duplicates_c50 oncegate
duplicates_c50 nginx
commit_floor sqlite_wal_full
upstream_c50 oncegate_http_upstream
upstream_c50 oncegate_https_upstream
upstream_c50 nginx_http_upstream
upstream_c50 nginx_https_upstream
mix_c50 oncegate
hot_c50 oncegate
big_store_restart oncegate
big_store_unique_c50 oncegate
purge_unique_c50 oncegate
memory_small oncegate
memory_large oncegate
passivation oncegate
cold_start oncegate
cluster3_unloaded oncegate_cluster3
cluster3_follower_unloaded oncegate_cluster3
cluster3_leader_c50 oncegate_cluster3
cluster3_follower_c50 oncegate_cluster3
cluster3_store oncegate_cluster3
cluster3_leader_c50 oncegate_cluster3_insecure
cluster3_follower_c50 oncegate_cluster3_insecure
flood_single oncegate
flood_cluster oncegate_cluster3
"
while read -r scenario system; do
  [ -n "$scenario" ] || continue
  ok=1
  if [ -f "$csv" ] && awk -F, -v a="$scenario" -v b="$system" '
       $1 == a && $2 == b && $4 ~ /^[0-9.eE+-]+$/ && $4 + 0 > 0 { found = 1 }
       END { exit !found }' "$csv"; then
    ok=0
  fi
  check "$scenario/$system" "$ok" "no row with a positive value"
done <<<"$pairs"

# Server CPU (positive) and context switches (a number: a run of cached
# duplicates may switch less than once per 10 000 requests) per request,
# sampled around the runs.
for row in unloaded,oncegate unique_c50,oncegate duplicates_c50,oncegate \
           unique_c50,redis_always duplicates_c50,nginx \
           upstream_c50,oncegate_http_upstream upstream_c50,oncegate_https_upstream; do
  for m in cpu_us_per_req ctx_per_req; do
    ok=1
    [ -f "$csv" ] && awk -F, -v r="$row" -v m="$m" '
      $1 "," $2 == r && $3 == m && $4 ~ /^[0-9.]+$/ \
        && (m == "ctx_per_req" || $4 + 0 > 0) { f = 1 }
      END { exit !f }' "$csv" && ok=0
    check "$row/$m" "$ok" "no row with a number (positive for the CPU)"
  done
done
# The other processes' CPU over the same runs: the upstream's worker, and
# the cluster's three nodes (with the leader's share).
for row in upstream_c50,nginx_http_upstream,cpu_us_per_req \
           upstream_c50,nginx_https_upstream,cpu_us_per_req \
           cluster3_leader_c50,oncegate_cluster3,cpu_us_per_req \
           cluster3_leader_c50,oncegate_cluster3,cpu_us_per_req_leader \
           cluster3_follower_c50,oncegate_cluster3,cpu_us_per_req \
           cluster3_follower_c50,oncegate_cluster3,cpu_us_per_req_leader; do
  ok=1
  [ -f "$csv" ] && awk -F, -v r="$row" '
    $1 "," $2 "," $3 == r && $4 ~ /^[0-9.]+$/ && $4 + 0 > 0 { f = 1 }
    END { exit !f }' "$csv" && ok=0
  check "$row" "$ok" "no positive value"
done
for row in commit_floor,sqlite_wal_full,p50_us commit_floor,sqlite_wal_full,p99_us \
           upstream_c50,oncegate_https_upstream,ratio_to_http \
           purge_unique_c50,oncegate,p99_ratio; do
  ok=1
  [ -f "$csv" ] && grep -Eq "^$row,[0-9.]+," "$csv" && ok=0
  check "$row" "$ok" "missing or not a number"
done

# Every target of bench/lib/targets.py: a measured value, its bound and a
# verdict 0 or 1 (not required to be 1 here).
targets=$(python3 -B -c 'import sys; sys.path.insert(0, sys.argv[1]); import targets; print(" ".join(targets.IDS))' "$ROOT/bench/lib")
[ -n "$targets" ] || check "bench/lib/targets.py IDS" 1 "cannot list the targets"
for t in $targets; do
  ok=1
  [ -f "$csv" ] \
    && grep -Eq "^targets,$t,value,-?[0-9.]+(e[-+]?[0-9]+)?," "$csv" \
    && grep -Eq "^targets,$t,target_(max|min),-?[0-9.]+," "$csv" \
    && grep -Eq "^targets,$t,met,[01],bool$" "$csv" && ok=0
  check "targets/$t" "$ok" "$(grep "^targets,$t," "$csv" 2>/dev/null | tr '\n' ' ')"
done
ok=1
[ -f "$OUT/results.md" ] && grep -q '^## Targets' "$OUT/results.md" \
  && ! grep -q '^| [^|]* | not measured |' "$OUT/results.md" && ok=0
check "results.md Targets table (every row measured)" "$ok" "missing or a row not measured"

# Every cluster node held the same number of records after the run.
ok=1
[ -f "$csv" ] && grep -q '^cluster3_store,oncegate_cluster3,records_equal,1,' "$csv" && ok=0
check "cluster3_store/records_equal" "$ok" "missing or not 1"
ok=1
[ -f "$csv" ] && grep -q '^cluster3_leader_c50,oncegate_cluster3,ratio_to_insecure,' "$csv" && ok=0
check "cluster3_leader_c50/ratio_to_insecure" "$ok" "missing"

# Under the flood, every node's peak RSS stayed within its bound.
for row in flood_single,oncegate,node flood_cluster,oncegate_cluster3,node1 \
           flood_cluster,oncegate_cluster3,node2 \
           flood_cluster,oncegate_cluster3,node3; do
  ok=1
  [ -f "$csv" ] && grep -q "^${row}_peak_within_bound,1," "$csv" && ok=0
  check "${row}_peak_within_bound" "$ok" "missing or not 1"
done

for f in results.md throughput.png latency.png; do
  check "$f" "$([ -s "$OUT/$f" ] && echo 0 || echo 1)" "missing or empty"
done

# bench/threads.sh (per-thread switches and CPU per request) on this
# build's node, one second: a line per thread and the total, each positive.
if [ -n "${ONCEGATE_BIN:-}" ]; then
  out=$(WRK_SECONDS=1 timeout 120 "$ROOT/bench/threads.sh" 1 "$ONCEGATE_BIN" 2>&1)
  ok=1
  echo "$out" | grep -Eq 'Requests/sec: *[1-9]' \
    && echo "$out" | grep -Eq '^  \(all threads\) +switches/req +[0-9.]*[1-9][0-9.]* +cpu_us/req +[0-9.]*[1-9]' \
    && ok=0
  check "bench/threads.sh" "$ok" "$(echo "$out" | tail -3 | tr '\n' ' ')"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
