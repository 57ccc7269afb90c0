#!/usr/bin/env bash
# Configures and builds one flavour of strata.
#   scripts/build.sh release   build/release: optimised, warnings are errors
#   scripts/build.sh asan      build/asan: AddressSanitizer + UBSan, debug
#   scripts/build.sh debug     build/debug
set -euo pipefail
cd "$(dirname "$0")/.."

flavour="${1:-release}"
jobs="$(nproc)"
case "$flavour" in
release) args=(-DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON) ;;
debug) args=(-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON) ;;
asan)
    # CUDA code is not instrumented by the sanitizers; the release build
    # compiles and tests the kernels.
    args=(-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON -DSTRATA_SANITIZE=ON -DSTRATA_CUDA=OFF)
    ;;
*)
    echo "usage: scripts/build.sh release|debug|asan" >&2
    exit 2
    ;;
esac

cmake -S . -B "build/$flavour" "${args[@]}"
cmake --build "build/$flavour" -j "$jobs"
