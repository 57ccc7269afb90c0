#!/usr/bin/env bash
# make_test_certs.sh DIR [CLIENT_CN...] - a throwaway CA and certificates for
# the TLS tests, made with the openssl CLI (Debian package openssl).
#
# Writes into DIR (created if missing):
#   ca.pem ca.key              a self-signed CA (CN "strata test CA")
#   server.pem server.key      server certificate, SAN IP:127.0.0.1, DNS:localhost
#   server2.pem server2.key    a second server certificate (CN "strata test server 2"),
#                              same SANs and CA: what a renewal would install
#   client-NAME.pem/.key       one client certificate per CLIENT_CN, subject CN=NAME
#   other-ca.pem, client-rogue.pem/.key, server-other.pem/.key
#                              a second CA, a client certificate (CN "rogue") and a
#                              server certificate (same SANs) it signed, which the
#                              first CA does not trust
# Keys are P-256, unencrypted; certificates are valid for two days.
set -euo pipefail
dir=${1:?usage: make_test_certs.sh DIR [CLIENT_CN...]}
shift
mkdir -p "$dir"
cd "$dir"

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# ca NAME CN: a self-signed CA certificate NAME.pem with key NAME.key.
ca() {
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem" 2>/dev/null
}

# leaf CA NAME CN EXT: NAME.pem with key NAME.key, signed by CA, with extensions EXT.
leaf() {
    key "$2.key"
    openssl req -new -key "$2.key" -subj "/CN=$3" -out "$2.csr" 2>/dev/null
    printf '%s\n' "$4" > "$2.ext"
    openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" -CAcreateserial -sha256 \
        -days 2 -extfile "$2.ext" -out "$2.pem" 2>/dev/null
    rm -f "$2.csr" "$2.ext"
}

server_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost'
client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth'

ca ca "strata test CA"
leaf ca server "strata test server" "$server_ext"
leaf ca server2 "strata test server 2" "$server_ext"
for cn in "$@"; do
    leaf ca "client-$cn" "$cn" "$client_ext"
done
ca other-ca "strata other CA"
leaf other-ca client-rogue rogue "$client_ext"
leaf other-ca server-other "strata other server" "$server_ext"
rm -f ./*.srl
