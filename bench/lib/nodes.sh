# Sourced by the bench scripts (which set ROOT and LIB, and D, a temp dir
# they own, or call own_workdir): starts `oncegate` nodes in $D and records
# their pids in PIDS (the caller stops them).
#
#   start_node BIN I [ARGS...]   node I, data in $D/nI, HTTP on a free port:
#                                sets PORT once it printed its ready line
#                                (bounded: 10 s), exits 1 if it did not.
# Variables assigned before the call (VAR=x start_node ...) reach the node.
#
#   own_workdir NAME             makes D (/tmp/oncegate-NAME.XXXXXX) and an
#                                empty PIDS; on exit every process in PIDS
#                                is killed and D removed.

own_workdir() {
  D=$(mktemp -d "/tmp/oncegate-$1.XXXXXX")
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; rm -rf "$D"' EXIT
}

start_node() {
  local bin=$1 i=$2 t
  shift 2
  mkdir -p "$D/n$i"
  "$bin" --data-dir="$D/n$i" --http-port=0 --log-level=warn "$@" \
    >"$D/n$i.out" 2>"$D/n$i.err" &
  PIDS+=($!)
  disown "$!" # no job notice when it is stopped
  PORT=
  for t in $(seq 200); do
    PORT=$(sed -n 's/^oncegate ready http=127.0.0.1:\([0-9]*\).*/\1/p' "$D/n$i.out")
    [ -n "$PORT" ] && return 0
    kill -0 "${PIDS[-1]}" 2>/dev/null || break
    sleep 0.05
  done
  echo "node $i did not start:" >&2
  cat "$D/n$i.err" >&2
  exit 1
}

#   start_cluster STARTER [INI_LINE...]
#                                a 3-node mutual-TLS cluster on 127.0.0.1
#                                (certificates in $D/tls, free link ports,
#                                INI_LINEs added to [cluster]): runs
#                                `STARTER I ARGS...` for each node (it
#                                starts node I with ARGS and sets PORT),
#                                then waits (30 s at most) for a ready
#                                leader. Sets HTTP[1..3] (HTTP ports), LPORT
#                                and LID (the leader's port and id).
#                                CLUSTER_INSECURE=1: plain text between the
#                                nodes (cluster.insecure), no certificates.
start_cluster() {
  local starter=$1 i out tls=()
  shift
  mapfile -t P < <(python3 "$LIB/benchlib.py" freeport 3 --hold-for $$)
  [ "${CLUSTER_INSECURE:-0}" = 1 ] \
    || "$ROOT/scripts/cluster-certs.sh" "$D/tls" 1 2 3 >/dev/null
  {
    echo '[cluster]'
    echo "peers=[\"1=127.0.0.1:${P[0]}\",\"2=127.0.0.1:${P[1]}\",\"3=127.0.0.1:${P[2]}\"]"
    if [ "${CLUSTER_INSECURE:-0}" = 1 ]; then
      echo 'insecure=true'
    else
      echo "tls-ca=\"$D/tls/ca.pem\""
    fi
    for line in "$@"; do echo "$line"; done
  } >"$D/cluster.ini"
  declare -gA HTTP
  for i in 1 2 3; do
    [ "${CLUSTER_INSECURE:-0}" = 1 ] \
      || tls=(--cluster.tls-certificate="$D/tls/node-$i.pem"
              --cluster.tls-key="$D/tls/node-$i.key")
    "$starter" "$i" --config-file="$D/cluster.ini" --cluster.id="$i" "${tls[@]}"
    HTTP[$i]=$PORT
  done
  out=$(python3 "$LIB/benchlib.py" cluster-wait 30 "${HTTP[1]}" "${HTTP[2]}" "${HTTP[3]}") \
    || { echo "no ready leader within 30 s: $out" >&2; exit 1; }
  read -r _ LPORT LID _ <<<"$out"
}
