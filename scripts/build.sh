#!/usr/bin/env bash
# Configures and builds oncegate into ./build (or $ONCEGATE_BUILD_DIR):
# every target (the node, the test suites, the benchmarks), or only the
# targets named as arguments, e.g. `scripts/build.sh oncegate` for the node
# and its admin CLI (one binary, tools/oncegate), as scripts/run-node.sh
# and scripts/cluster.sh build it.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${ONCEGATE_BUILD_DIR:-build}"
build_type="${ONCEGATE_BUILD_TYPE:-RelWithDebInfo}"
generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
targets=()
for target in "$@"; do
  targets+=(--target "$target")
done
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type"
fi
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
