#!/usr/bin/env bash
# Makes everything a chainstore cluster with TLS and mutual TLS needs, with openssl:
#
#   ca.crt, ca.key               a new CA (keep ca.key offline: it can mint any node or role)
#   node-N.crt, node-N.key       node N's certificate: URI SAN chainstore://node/N (its identity),
#                                DNS SANs for its host name, localhost and 127.0.0.1; usable to
#                                serve and as the client certificate it presents to its peers
#   client-ROLE.crt/.key         client certificates for the roles read, write and admin
#                                (URI SAN chainstore://role/ROLE)
#   tokens                       a tokens file with one fresh random bearer token per role
#
# usage: deploy/tls/gen-certs.sh OUT_DIR [HOST_OF_NODE_1 HOST_OF_NODE_2 ...]   (default: n1 n2 n3)
#
# Environment: CHAINSTORE_CERT_NAMES, extra DNS names (comma-separated) every node certificate
# also carries (the client service's name, say); CHAINSTORE_CERT_DAYS, the validity of the node
# and client certificates (default 365; the CA gets ten times as long); CHAINSTORE_CA_DIR, an
# existing CA (ca.crt, ca.key) to sign with instead of making one, for renewals and rotations.
# Keys are written mode 0600; give them to the user the node runs as (uid 10001 in the image).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
out=$1
shift
hosts=("$@")
[ ${#hosts[@]} -gt 0 ] || hosts=(n1 n2 n3)
days=${CHAINSTORE_CERT_DAYS:-365}
command -v openssl >/dev/null || { echo "gen-certs.sh needs openssl" >&2; exit 1; }
mkdir -p "$out"
umask 077

if [ -n "${CHAINSTORE_CA_DIR:-}" ]; then
  ca_crt=$CHAINSTORE_CA_DIR/ca.crt ca_key=$CHAINSTORE_CA_DIR/ca.key
  [ "$CHAINSTORE_CA_DIR" -ef "$out" ] || cp "$ca_crt" "$out/ca.crt"
else
  ca_crt=$out/ca.crt ca_key=$out/ca.key
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -keyout "$ca_key" -out "$ca_crt" -days $((days * 10)) -subj "/CN=chainstore CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
fi

# sign NAME CN SAN EKU: NAME.key and NAME.crt, signed by the CA.
sign() {
  local name=$1 cn=$2 san=$3 eku=$4 ext
  ext=$(mktemp)
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' \
    "$eku" "$san" >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -sha256 \
    -keyout "$out/$name.key" -out "$out/$name.csr" -subj "/CN=$cn" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$ca_crt" -CAkey "$ca_key" -set_serial "0x$(openssl rand -hex 16)" \
    -days "$days" -sha256 -extfile "$ext" -out "$out/$name.crt" 2>/dev/null
  rm -f "$out/$name.csr" "$ext"
  chmod 0644 "$out/$name.crt"
}

extra=
IFS=',' read -r -a names <<<"${CHAINSTORE_CERT_NAMES:-}"
for name in "${names[@]}"; do [ -n "$name" ] && extra+=",DNS:$name"; done
for i in "${!hosts[@]}"; do
  id=$((i + 1))
  sign "node-$id" "chainstore-node-$id" \
    "URI:chainstore://node/$id,DNS:${hosts[$i]},DNS:localhost,IP:127.0.0.1$extra" "serverAuth,clientAuth"
done
for role in read write admin; do
  sign "client-$role" "chainstore-$role-client" "URI:chainstore://role/$role" "clientAuth"
done
if [ ! -e "$out/tokens" ]; then
  {
    echo "# role:token, one a line. Give each client the token of the role it needs."
    for role in read write admin; do echo "$role:$(openssl rand -hex 24)"; done
  } >"$out/tokens"
fi
chmod 0644 "$ca_crt" "$out/ca.crt" 2>/dev/null || true
echo "wrote the CA, ${#hosts[@]} node certificates, client certificates and tokens to $out"
