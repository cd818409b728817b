#!/usr/bin/env bash
# README command 1: install what is missing, build, and start one node on the
# embedded default (HTTP on 127.0.0.1:8080, data under ./data). Extra
# arguments go to oncegate, e.g. --http-port=9090.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec "${ONCEGATE_BUILD_DIR:-build}/tools/oncegate" \
  --config-file=cluster-config/single-node.ini "$@"
