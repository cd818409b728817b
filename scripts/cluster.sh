#!/usr/bin/env bash
# Starts, inspects and stops a local oncegate cluster described by a directory
# of per-node INI files (cluster-config/three-node, cluster-config/five-node).
#
#   scripts/cluster.sh start  cluster-config/three-node   # set up, build, start, wait
#   scripts/cluster.sh status cluster-config/three-node   # role of each node
#   scripts/cluster.sh kill-leader cluster-config/three-node  # SIGKILL it
#   scripts/cluster.sh restart cluster-config/three-node 2    # (re)start node 2
#   scripts/cluster.sh stop   cluster-config/three-node   # SIGTERM all
#
# Logs and pid files go to each node's data dir (node.log, node.pid). On a
# cluster with an admin token, export ONCEGATE_TOKEN for status and
# kill-leader (they read GET /v1/cluster).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

[[ $# -ge 2 ]] || usage
cmd=$1
dir=${2%/}
[[ -d $dir ]] || { echo "no such cluster config dir: $dir" >&2; exit 2; }
bin=${ONCEGATE_BIN:-${ONCEGATE_BUILD_DIR:-build}/tools/oncegate}

# ini_get FILE KEY: the first `KEY=value` of FILE, quotes removed.
ini_get() {
  sed -n "s/^$2=\"\\{0,1\\}\\([^\"]*\\)\"\\{0,1\\}\$/\\1/p" "$1" | head -n1
}

nodes() {
  ls "$dir"/node*.ini | sort -V
}

data_dir() { ini_get "$1" data-dir; }
http_port() { ini_get "$1" http-port; }
node_id() { ini_get "$1" id; }

# tls_dir FILE: the directory of the node's certificates, from tls-ca.
tls_dir() {
  local ca
  ca=$(ini_get "$1" tls-ca)
  [[ -n $ca ]] && dirname "$ca"
}

# The cluster CA and each node's certificate (scripts/cluster-certs.sh),
# where the configs name them and they are missing.
make_certs() {
  local ini d ids=()
  d=$(tls_dir "$(nodes | head -n1)") || return 0
  for ini in $(nodes); do ids+=("$(node_id "$ini")"); done
  scripts/cluster-certs.sh "$d" "${ids[@]}" >/dev/null
}

pid_of() {
  local f
  f="$(data_dir "$1")/node.pid"
  [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null && cat "$f"
}

start_one() {
  local ini=$1 dd pid
  dd=$(data_dir "$ini")
  mkdir -p "$dd"
  if pid=$(pid_of "$ini"); then
    echo "node $(node_id "$ini") already running (pid $pid)"
    return
  fi
  "$bin" --config-file="$ini" >>"$dd/node.log" 2>&1 &
  echo $! >"$dd/node.pid"
  echo "node $(node_id "$ini") started (pid $!, http 127.0.0.1:$(http_port "$ini"), log $dd/node.log)"
}

# cluster_json INI: GET /v1/cluster of that node (empty when down). With
# ONCEGATE_TOKEN set (a cluster with admin.token-env), it is sent as the
# bearer token, from a file descriptor rather than the command line.
cluster_json() {
  local url="http://127.0.0.1:$(http_port "$1")/v1/cluster"
  if [[ -n ${ONCEGATE_TOKEN:-} ]]; then
    curl -s --max-time 1 -H @<(printf 'Authorization: Bearer %s\n' "$ONCEGATE_TOKEN") \
      "$url" || true
  else
    curl -s --max-time 1 "$url" || true
  fi
}

wait_ready() {
  local deadline=$((SECONDS + ${ONCEGATE_START_TIMEOUT:-30})) ini ready
  while ((SECONDS < deadline)); do
    ready=0
    for ini in $(nodes); do
      if curl -sf --max-time 1 -o /dev/null \
        "http://127.0.0.1:$(http_port "$ini")/readyz"; then
        ready=$((ready + 1))
      fi
    done
    if ((ready == $(nodes | wc -l))); then
      echo "all $ready nodes ready"
      return 0
    fi
    sleep 0.2
  done
  echo "not every node became ready; see the node.log files" >&2
  return 1
}

status() {
  local ini
  for ini in $(nodes); do
    printf 'node %s pid=%s http=%s %s\n' "$(node_id "$ini")" \
      "$(pid_of "$ini" || echo -)" "$(http_port "$ini")" \
      "$(cluster_json "$ini" | tr -d '\n' | cut -c1-200)"
  done
}

leader_ini() {
  local ini
  for ini in $(nodes); do
    if cluster_json "$ini" | grep -q '"role":"leader"'; then
      echo "$ini"
      return 0
    fi
  done
  return 1
}

case $cmd in
  start)
    if [[ -z ${ONCEGATE_BIN:-} ]]; then
      # Installs what is missing (apt-get), then builds the node
      # (incremental; not the test suites).
      scripts/setup.sh --node
      scripts/build.sh oncegate >/dev/null
    fi
    make_certs
    for ini in $(nodes); do start_one "$ini"; done
    wait_ready
    status
    ;;
  restart)
    [[ $# -ge 3 ]] || usage
    make_certs
    start_one "$dir/node$3.ini"
    ;;
  status)
    status
    ;;
  kill-leader)
    ini=$(leader_ini) || { echo "no leader found" >&2; exit 1; }
    pid=$(pid_of "$ini")
    kill -9 "$pid"
    echo "killed leader: node $(node_id "$ini") (pid $pid)"
    ;;
  stop)
    for ini in $(nodes); do
      # A node that ended between the look and the signal (one killed a
      # moment ago, reaped only now) is stopped already.
      if pid=$(pid_of "$ini") && kill -TERM "$pid" 2>/dev/null; then
        echo "node $(node_id "$ini") stopping (pid $pid)"
      fi
    done
    for ini in $(nodes); do
      for _ in $(seq 100); do
        pid_of "$ini" >/dev/null || break
        sleep 0.1
      done
    done
    ;;
  *)
    usage
    ;;
esac
