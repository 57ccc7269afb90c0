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
    libmicrohttpd-dev libinih-dev libcmocka-dev libssl-dev libhiredis-dev libpng-dev
    # tests; the demo too (openssl: its CA and certificates; python3-xxhash: its prompt's tokens)
    python3 python3-xxhash python3-numpy python3-grpcio openssl clang-format prometheus chromium
    # the Python package's install test (pip install client/python, offline)
    python3-pip python3-setuptools python3-wheel
    # deploy/ checks: systemd-analyze, kubectl (kustomize, offline parse), yamllint,
    # mdb_copy (docs/operations.md's backup of the SSD tier)
    systemd kubernetes-client yamllint lmdb-utils
    # benchmark peers (iperf3: bench/netns_stream.sh)
    redis-server ucx-utils iperf3
    # the multi-host fault test dumps a hung workload's stacks with gdb
    gdb
    # membership (docs/membership.md): etcd for the tests, the demo and the scripts
    etcd-server etcd-client curl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        # A kubectl of another package (Google Cloud SDK's "kubectl") serves the
        # deploy checks as well, and kubernetes-client cannot be installed beside it.
        if [ "$pkg" = kubernetes-client ] && command -v kubectl >/dev/null; then
            echo "install-deps: kubectl present ($(command -v kubectl)): not installing $pkg"
            continue
        fi
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
