#!/usr/bin/env bash
# Interop tests: oncegate against the senders' own signing libraries
# (standardwebhooks, @octokit/webhooks-methods), pinned in package-lock.json.
# Needs Node.js >= 20, npm and ONCEGATE_BIN (the oncegate binary); exits
# non-zero on any failure.
set -euo pipefail
if [[ -z "${ONCEGATE_BIN:-}" ]]; then
  echo "run.sh: set ONCEGATE_BIN to the oncegate binary" >&2
  exit 2
fi
# The tests run from this directory: make a relative path absolute first.
if [[ "$ONCEGATE_BIN" != /* ]]; then
  ONCEGATE_BIN="$PWD/$ONCEGATE_BIN"
fi
export ONCEGATE_BIN
cd "$(dirname "$0")" && npm ci --no-audit --no-fund --silent && node --test interop.test.mjs
