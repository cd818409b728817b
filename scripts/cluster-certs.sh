#!/usr/bin/env bash
# Creates the certificates of an oncegate cluster with the openssl CLI: one
# cluster CA and one certificate per node, each naming its node id.
#
#   scripts/cluster-certs.sh DIR ID...        # CA (if missing) + missing nodes
#   scripts/cluster-certs.sh --renew DIR ID...  # new certificates, same CA
#
# DIR gets ca.pem (give it to every node), ca.key (keep it offline: whoever
# has it can make members), and node-ID.pem / node-ID.key per node (each
# node gets only its own pair). A node certificate names its node id as the
# DNS name node-ID.oncegate (subjectAltName): a node accepts a peer only if
# the peer's certificate chains to ca.pem and names the id the peer claims.
# Keys are EC P-256, files 0600; node certificates are valid for
# ONCEGATE_CERT_DAYS days (default 825), the CA for 3650. Both start a day
# in the past, so that a node whose clock is behind (a step back, a VM
# restored from a snapshot) still accepts them.
set -euo pipefail

renew=0
if [[ ${1:-} == --renew ]]; then
  renew=1
  shift
fi
if [[ $# -lt 2 ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
dir=$1
shift
days=${ONCEGATE_CERT_DAYS:-825}
for id in "$@"; do
  if ! [[ $id =~ ^[1-9][0-9]{0,18}$ ]]; then
    echo "cluster-certs: node id must be a positive integer: $id" >&2
    exit 2
  fi
done
command -v openssl >/dev/null || {
  echo "cluster-certs: openssl not found (apt-get install openssl)" >&2
  exit 1
}
mkdir -p "$dir"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date -u -d '-1 day' +%Y%m%d%H%M%SZ)

# sign CSR OUT DAYS EXTFILE ARGS...: `openssl ca` (it can backdate the
# start, `openssl x509 -req` cannot) with a throw-away database.
sign() {
  local csr=$1 out=$2 days=$3 ext=$4
  shift 4
  rm -rf "$tmp/db" && mkdir "$tmp/db" && touch "$tmp/db/index.txt"
  openssl rand -hex 16 >"$tmp/db/serial"
  printf '%s\n' "[ca]" "default_ca = cluster" "[cluster]" \
    "database = $tmp/db/index.txt" "new_certs_dir = $tmp/db" \
    "serial = $tmp/db/serial" "default_md = sha256" "policy = any" \
    "unique_subject = no" "copy_extensions = none" "[any]" \
    "commonName = supplied" >"$tmp/db/ca.cnf"
  openssl ca -batch -notext -config "$tmp/db/ca.cnf" -in "$csr" -out "$out" \
    -startdate "$start" \
    -enddate "$(date -u -d "+$days days" +%Y%m%d%H%M%SZ)" \
    -extfile "$ext" "$@" 2>/dev/null
}

if [[ ! -f $dir/ca.pem || ! -f $dir/ca.key ]]; then
  if [[ -f $dir/ca.pem || -f $dir/ca.key ]]; then
    echo "cluster-certs: $dir has only one of ca.pem and ca.key" >&2
    exit 1
  fi
  openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/ca.key"
  # A name of its own: while a CA is replaced, nodes trust the old and the
  # new one, and a certificate's issuer must name exactly one of them.
  openssl req -new -key "$tmp/ca.key" \
    -subj "/CN=oncegate cluster CA $(date -u +%Y%m%d%H%M%S) $(openssl rand -hex 4)" \
    -out "$tmp/ca.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:TRUE,pathlen:0" \
    "keyUsage=critical,keyCertSign,cRLSign" \
    "subjectKeyIdentifier=hash" >"$tmp/ca.ext"
  sign "$tmp/ca.csr" "$tmp/ca.pem" 3650 "$tmp/ca.ext" -selfsign \
    -keyfile "$tmp/ca.key"
  mv "$tmp/ca.key" "$dir/ca.key"
  mv "$tmp/ca.pem" "$dir/ca.pem"
  chmod 644 "$dir/ca.pem"
  echo "cluster-certs: new cluster CA $dir/ca.pem (keep $dir/ca.key offline)"
fi

for id in "$@"; do
  pem=$dir/node-$id.pem
  key=$dir/node-$id.key
  if [[ $renew == 0 && -f $pem && -f $key ]]; then
    continue
  fi
  openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/node.key"
  openssl req -new -key "$tmp/node.key" -subj "/CN=node-$id.oncegate" \
    -out "$tmp/node.csr" 2>/dev/null
  cat >"$tmp/ext.cnf" <<EOF
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:node-$id.oncegate
authorityKeyIdentifier=keyid:always
EOF
  sign "$tmp/node.csr" "$tmp/node.pem" "$days" "$tmp/ext.cnf" \
    -cert "$dir/ca.pem" -keyfile "$dir/ca.key"
  # Replaced by rename: a node reading the files sees the old or the new.
  mv "$tmp/node.key" "$key.new"
  mv "$tmp/node.pem" "$pem.new"
  mv "$key.new" "$key"
  mv "$pem.new" "$pem"
  chmod 644 "$pem"
  echo "cluster-certs: node $id: $pem $key"
done
