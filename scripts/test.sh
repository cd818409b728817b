#!/usr/bin/env bash
# README command 2: install what is missing, build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd "${ONCEGATE_BUILD_DIR:-build}"
ctest --output-on-failure -j 2 "$@"
