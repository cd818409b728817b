#!/usr/bin/env bash
# Smoke test of the benchmark harness: runs `BENCH_SMOKE=1 bench/run.sh`
# (every scenario ~2 s, tiny key counts, results in a temp dir) and checks
# that results.csv has a row with a positive value for every scenario and
# system, that the report and plots were written and that the harness exited
# 0. Prints one line per check and a final `N passed, M failed`.
#
# With ONCEGATE_BIN and ONCEGATE_PRELOAD set (CTest passes the test build's
# binaries) the harness skips its release build; otherwise it builds (or
# incrementally updates) build-release first. Bounded by BENCH_SMOKE_TIMEOUT
# seconds (default 600, build included).
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

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
