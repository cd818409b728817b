#!/usr/bin/env bash
# Installs the Debian 12 packages oncegate needs to build and test, and does
# nothing when they are all present. Never installs libboost-dev (1.74): it
# conflicts with Boost 1.81.
set -euo pipefail

packages=(
  g++ cmake ninja-build make
  libcaf-dev libsqlite3-dev sqlite3
  libboost1.81-dev libboost-json1.81-dev
  libspdlog-dev libssl-dev
  libraft-dev libuv1-dev pkg-config
  python3 curl openssl
  # fuzz targets (libFuzzer ships in clang's runtime package)
  clang libclang-rt-14-dev
  # `promtool check metrics` in the metrics test
  prometheus
  # the benchmark harness (bench/run.sh, also its smoke test)
  wrk redis-server redis-tools nginx-light gnuplot-nox
  # a real reverse proxy in front of a node (tests/process/test_reverse_proxy.py)
  nginx
  # libfaketime: one node's wall clock stepped at run time (the clock-jump
  # drill, tests/process/test_clock.py)
  faketime
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Interop tests sign requests with the senders' own npm libraries. Node.js
# may come from elsewhere than Debian (with its own npm): only install
# Debian's when there is no npm at all.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
