#!/usr/bin/env bash
# README command 2: install what is missing (the node's packages and the test
# and benchmark tools: scripts/setup.sh --test), build, and run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
scripts/build.sh
cd "${ONCEGATE_BUILD_DIR:-build}"
# One test more than cores: most tests wait on their nodes (elections,
# restarts, timers) far more than they compute: on 2 cores the tests took
# 634 s two at a time, 503 s three at a time (636 s of CPU in all).
ctest --output-on-failure -j "$(( $(nproc) + 1 ))" "$@"
