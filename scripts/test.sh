#!/usr/bin/env bash
# README command 2: install what is missing (the node's packages and the test
# and benchmark tools: scripts/setup.sh --test), build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
scripts/build.sh
cd "${ONCEGATE_BUILD_DIR:-build}"
ctest --output-on-failure -j 2 "$@"
