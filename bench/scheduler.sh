#!/usr/bin/env bash
# Compares CAF scheduler policies and thread counts on this machine with
# claim_bench (in-process: registry -> key actor -> SQLite). Each cell runs
# three times; the median rate is reported. Bounded: --requests per run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${ONCEGATE_BUILD_DIR:-build}/bench/claim_bench"
requests="${REQUESTS:-60000}"
printf '| mode | policy | threads | clients | median claims/s | p50 us | p99 us |\n'
printf '|---|---|---|---|---|---|---|\n'
for mode in unique hot; do
  for clients in 1 64; do
    for policy in sharing stealing; do
      for threads in 2 4; do
        n=$requests
        [ "$clients" = 1 ] && n=$((requests / 20))
        runs=()
        for i in 1 2 3; do
          runs+=("$("$bin" --scheduler.policy="'$policy'" \
            --scheduler.max-threads=$threads --mode=$mode --clients=$clients \
            --requests=$n 2>/dev/null | grep '^mode=')")
        done
        median=$(printf '%s\n' "${runs[@]}" \
          | sed 's/.*rate=\([0-9]*\).*p50_us=\([0-9]*\) p99_us=\([0-9]*\)/\1 \2 \3/' \
          | sort -n | sed -n 2p)
        set -- $median
        printf '| %s | %s | %s | %s | %s | %s | %s |\n' \
          "$mode" "$policy" "$threads" "$clients" "$1" "$2" "$3"
      done
    done
  done
done
