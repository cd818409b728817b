# Sourced by the bench scripts: starts `oncegate` nodes in $D (a temp dir
# the caller owns) and records their pids in PIDS (the caller stops them).
#
#   start_node BIN I [ARGS...]   node I, data in $D/nI, HTTP on a free port:
#                                sets PORT once it printed its ready line
#                                (bounded: 10 s), exits 1 if it did not.
# Variables assigned before the call (VAR=x start_node ...) reach the node.

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
