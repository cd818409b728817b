#!/usr/bin/env bash
# Configures and builds oncegate into ./build (or $ONCEGATE_BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${ONCEGATE_BUILD_DIR:-build}"
build_type="${ONCEGATE_BUILD_TYPE:-RelWithDebInfo}"
generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="$build_type"
fi
cmake --build "$build_dir" -j "$(nproc)"
