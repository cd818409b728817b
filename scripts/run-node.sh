#!/usr/bin/env bash
# README command 1: install what building and running a node needs (not the
# test tools: scripts/setup.sh --node), build the node (the oncegate
# binary, which is also the admin CLI; not the test suites), and start one
# node on the embedded default (HTTP on 127.0.0.1:8080, data under ./data).
# Extra arguments go to oncegate, e.g. --http-port=9090.
set -euo pipefail
cd "$(dirname "$0")/.."
config=cluster-config/single-node.ini
scripts/setup.sh --node
scripts/build.sh oncegate

# One descriptor per HTTP connection plus a reserve (SQLite, logs, upstream
# pools): raise the descriptor limit to fit http.max-connections, from the
# config file or a --http.max-connections= argument. The node checks again
# at start and, if the limit is still short, lowers its cap with a warning.
max_connections=$(awk -F= '/^\[/ { section = $0 }
  section == "[http]" && $1 ~ /^[ \t]*max-connections[ \t]*$/ {
    sub(/;.*/, "", $2); gsub(/[ \t"]/, "", $2); print $2 }' "$config" | tail -n 1)
for arg in "$@"; do
  case "$arg" in
    --http.max-connections=*) max_connections="${arg#*=}" ;;
  esac
done
case "$max_connections" in
  '' | *[!0-9]*) max_connections=10000 ;;
esac
want=$((max_connections + 256))
soft=$(ulimit -Sn)
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -lt "$want" ]; then
    # Only root may raise the hard limit; otherwise go as far as it allows.
    ulimit -Hn "$want" 2>/dev/null || want=$hard
  fi
  if [ "$want" -gt "$soft" ]; then
    ulimit -Sn "$want"
  fi
  if [ "$want" -lt "$((max_connections + 256))" ]; then
    echo "run-node.sh: descriptor limit $want is below http.max-connections" \
      "($max_connections) + 256; the node will lower its connection cap" >&2
  fi
fi

exec "${ONCEGATE_BUILD_DIR:-build}/tools/oncegate" \
  --config-file="$config" "$@"
