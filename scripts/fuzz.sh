#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz and runs each for a while.
#
#   scripts/fuzz.sh [target...]     default: every target
#
# Environment:
#   FUZZ_SECONDS    seconds per target (default 60); 0 only replays the seed
#                   corpus once (a quick regression run)
#   FUZZ_BUILD_DIR  build directory (default build/fuzz); binaries, logs,
#                   the working corpora and crash artifacts all go there
#   FUZZ_CXX        compiler (default clang++, else clang++-14)
#
# Prints one line per target and ends with `N passed, M failed`; exits
# non-zero when a target fails to build, crashes, times out or runs out of
# memory. See tests/fuzz/README.md.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD

build_dir="${FUZZ_BUILD_DIR:-build/fuzz}"
seconds="${FUZZ_SECONDS:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
  echo "fuzz.sh: FUZZ_SECONDS must be a whole number of seconds" >&2
  exit 2
fi

cxx="${FUZZ_CXX:-}"
if [ -z "$cxx" ]; then
  if command -v clang++ >/dev/null 2>&1; then
    cxx=clang++
  else
    cxx=clang++-14
  fi
fi
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz.sh: $cxx not found (apt-get install clang libclang-rt-14-dev)" >&2
  exit 2
fi

all_targets=(fuzz_request fuzz_canonical_json fuzz_standard_webhooks
             fuzz_idempotency_key fuzz_link_frames)

# Product sources each target needs (relative to the repository root).
sources_of() {
  case "$1" in
    fuzz_request)
      echo api/payload.cpp api/canonical_number.cpp api/json_rejection.cpp \
           api/json_text.cpp common/sha256.cpp api/idempotency_key.cpp ;;
    fuzz_canonical_json)
      echo api/payload.cpp api/canonical_number.cpp api/json_rejection.cpp \
           api/json_text.cpp common/sha256.cpp ;;
    fuzz_standard_webhooks)
      echo api/auth.cpp api/url.cpp common/sha256.cpp ;;
    fuzz_idempotency_key)
      echo api/idempotency_key.cpp api/json_text.cpp \
           common/sha256.cpp api/auth.cpp api/url.cpp ;;
    fuzz_link_frames)
      echo link/frames.cpp persistence/codec.cpp ;;
  esac
}

# Libraries beyond the common ones.
libs_of() {
  case "$1" in
  esac
}

dict_of() {
  case "$1" in
    fuzz_request | fuzz_canonical_json) echo tests/fuzz/dict/json.dict ;;
    fuzz_standard_webhooks) echo tests/fuzz/dict/webhooks.dict ;;
    fuzz_idempotency_key) echo tests/fuzz/dict/key.dict ;;
  esac
}

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  targets=("${all_targets[@]}")
fi
for t in "${targets[@]}"; do
  if [ -z "$(sources_of "$t")" ]; then
    echo "fuzz.sh: unknown target '$t' (known: ${all_targets[*]})" >&2
    exit 2
  fi
done

flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined -I"$root")
libs=(-lboost_json -lcrypto)
obj_dir="$build_dir/obj"
bin_dir="$build_dir/bin"
log_dir="$build_dir/logs"
mkdir -p "$obj_dir" "$bin_dir" "$log_dir"

jobs="$(nproc 2>/dev/null || echo 2)"

# Runs "name command..." lines with at most $jobs at once; records each
# failed name in $failed_file.
failed_file="$build_dir/.failed"
: >"$failed_file"
throttle() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n 2>/dev/null || true
  done
}
spawn() {
  local name="$1" log="$2"
  shift 2
  throttle
  ( "$@" >"$log" 2>&1 || echo "$name" >>"$failed_file" ) &
}

object_of() {
  local src="$1"
  echo "$obj_dir/$(echo "${src%.cpp}" | tr / _).o"
}

# -- build ----------------------------------------------------------------------

echo "fuzz.sh: building ${targets[*]} with $cxx into $build_dir"
declare -A needed=()
for t in "${targets[@]}"; do
  for src in $(sources_of "$t"); do
    needed[$src]=1
  done
done
for src in "${!needed[@]}"; do
  spawn "$src" "$log_dir/build-$(echo "${src%.cpp}" | tr / _).log" \
    "$cxx" "${flags[@]}" -c "$src" -o "$(object_of "$src")"
done
wait

for t in "${targets[@]}"; do
  objs=()
  missing=""
  for src in $(sources_of "$t"); do
    objs+=("$(object_of "$src")")
    grep -qxF "$src" "$failed_file" && missing="$src"
  done
  rm -f "$bin_dir/$t"
  if [ -n "$missing" ]; then
    echo "$t" >>"$failed_file"
    { echo "cannot link: $missing failed to compile:"
      cat "$log_dir/build-$(echo "${missing%.cpp}" | tr / _).log"
    } >"$log_dir/build-$t.log"
    continue
  fi
  spawn "$t" "$log_dir/build-$t.log" \
    "$cxx" "${flags[@]}" "tests/fuzz/$t.cpp" "${objs[@]}" "${libs[@]}" \
    $(libs_of "$t") -o "$bin_dir/$t"
done
wait

# -- run ------------------------------------------------------------------------

symbolizer="$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)"
if [ -n "$symbolizer" ]; then
  export ASAN_SYMBOLIZER_PATH="$symbolizer"
fi
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}${UBSAN_OPTIONS:+:}print_stacktrace=1:halt_on_error=1"

passed=0
failed=0
summary=()
for t in "${targets[@]}"; do
  bin="$bin_dir/$t"
  if grep -qxF "$t" "$failed_file" || [ ! -x "$bin" ]; then
    summary+=("$t: BUILD FAILED, see $log_dir/build-$t.log")
    tail -n 20 "$log_dir/build-$t.log" >&2
    failed=$((failed + 1))
    continue
  fi

  # The run mutates its corpus, so it works on a copy under the build dir
  # (kept between runs so that longer campaigns build on earlier ones).
  corpus="$build_dir/corpus/$t"
  artifacts="$build_dir/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  if [ -d "tests/fuzz/corpus/$t" ]; then
    cp -f "tests/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  fi
  run_flags=(-max_len=65536 -timeout=10 -rss_limit_mb=2048
             -print_final_stats=1 -artifact_prefix="$artifacts")
  dict="$(dict_of "$t")"
  [ -f "$dict" ] && run_flags+=(-dict="$dict")
  if [ "$seconds" -eq 0 ]; then
    run_flags+=(-runs=0)
  else
    run_flags+=(-max_total_time="$seconds")
  fi

  log="$log_dir/$t.log"
  echo "fuzz.sh: running $t for ${seconds}s (log: $log)"
  started=$(date +%s)
  # libFuzzer stops itself after max_total_time; the outer limit only
  # guards against a run that cannot stop.
  timeout --signal=INT --kill-after=30 $((seconds + 300)) \
    "$bin" "${run_flags[@]}" "$corpus" >"$log" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - started))

  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)"
  if [ -z "$runs" ]; then
    runs="$(sed -n 's/^#\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)"
  fi
  units="$(ls -1 "$corpus" | wc -l)"
  stats="${runs:-0} runs in ${elapsed} s (${rate:-?} exec/s), corpus ${units} inputs"
  if [ "$rc" -eq 0 ]; then
    summary+=("$t: ok, $stats")
    passed=$((passed + 1))
  else
    artifact="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
    reason="$(grep -m 1 -E 'fuzz invariant violated|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|==ERROR|deadly signal' "$log")"
    summary+=("$t: FAILED (exit $rc) after $stats; ${reason:-see log}; artifact ${artifact:-none}; log $log")
    failed=$((failed + 1))
  fi
done

echo
for line in "${summary[@]}"; do
  echo "$line"
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
