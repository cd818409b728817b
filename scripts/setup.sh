#!/usr/bin/env bash
# Installs the Debian 12 packages oncegate needs, and does nothing when they
# are all present. Never installs libboost-dev (1.74): it conflicts with
# Boost 1.81.
#
#   scripts/setup.sh --node   build and run a node (scripts/run-node.sh)
#   scripts/setup.sh --test   that, and the tools the tests and the benchmark
#                             harness run (scripts/test.sh; the default)
#   scripts/setup.sh --list [--node|--test]   print the packages, install
#                                             nothing
set -euo pipefail

mode=test
list=0
for arg in "$@"; do
  case "$arg" in
    --node) mode=node ;;
    --test) mode=test ;;
    --list) list=1 ;;
    *)
      echo "usage: scripts/setup.sh [--node | --test] [--list]" >&2
      exit 2
      ;;
  esac
done

# Building (every target: the node, the test suites, the benchmark
# programs) and running a node, its cluster certificates and the README's
# examples.
node_packages=(
  g++ cmake ninja-build make pkg-config
  libcaf-dev libsqlite3-dev
  libboost1.81-dev libboost-json1.81-dev
  libspdlog-dev libssl-dev
  libraft-dev libuv1-dev
  # CMake's test configuration needs Python 3, the drill and the toy
  # upstream run on it
  python3
  # the README's requests; the cluster certificates (scripts/cluster-certs.sh)
  curl openssl
  # `sqlite3 FILE 'PRAGMA integrity_check'` on a backup (docs/operations.md)
  sqlite3
)

test_packages=(
  # fuzz targets (libFuzzer ships in clang's runtime package)
  clang libclang-rt-14-dev
  # `promtool check metrics` in the metrics test, `promtool check/test
  # rules` on the shipped alert rules (tests/packaging)
  prometheus
  # the benchmark harness (bench/run.sh, also its smoke test)
  wrk redis-server redis-tools nginx-light gnuplot-nox
  # a real reverse proxy in front of a node (tests/process/test_reverse_proxy.py)
  nginx
  # libfaketime: one node's wall clock stepped at run time (the clock-jump
  # drill, tests/process/test_clock.py)
  faketime
  # the Debian package (tests/packaging/test_deb.py): cpack's
  # dpkg-shlibdeps, lintian on the .deb, `file` on its binary
  dpkg-dev lintian file
)

packages=("${node_packages[@]}")
if [ "$mode" = test ]; then
  packages+=("${test_packages[@]}")
fi

if [ "$list" = 1 ]; then
  printf '%s\n' "${packages[@]}"
  if [ "$mode" = test ]; then
    echo "nodejs npm  # only when there is no npm"
  fi
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Interop tests sign requests with the senders' own npm libraries. Node.js
# may come from elsewhere than Debian (with its own npm): only install
# Debian's when there is no npm at all.
if [ "$mode" = test ] && ! command -v npm >/dev/null 2>&1; then
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
