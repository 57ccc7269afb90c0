#!/usr/bin/env bash
# Installs exactly the Debian 12 packages that strata's build, tests and demo
# need, and nothing else. Idempotent: when every package is present it does
# nothing; otherwise it runs apt-get update, then installs what is missing.
# Run as root (or through sudo).
set -euo pipefail

PACKAGES=(
    # build
    build-essential cmake pkg-config
    libucx-dev libfabric-dev libxxhash-dev liblmdb-dev
    libprotobuf-c-dev protobuf-c-compiler libgrpc-dev
    libmicrohttpd-dev libinih-dev libcmocka-dev libssl-dev libhiredis-dev
    # tests; the demo too (openssl: its CA and certificates; python3-xxhash: its prompt's tokens)
    python3 python3-xxhash python3-numpy python3-grpcio openssl clang-format prometheus chromium
    # benchmark peers
    redis-server ucx-utils
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#PACKAGES[@]} packages present"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
