#!/usr/bin/env bash
# The README's test command: installs what is missing, builds strata twice
# (release, and address+undefined sanitizers) and runs the whole suite in both.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/check-format.sh

export CTEST_OUTPUT_ON_FAILURE=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

echo "=== release build ==="
bash scripts/build.sh release
ctest --test-dir build/release --timeout 600

echo "=== sanitizer build (address, undefined) ==="
bash scripts/build.sh asan
ctest --test-dir build/asan --timeout 900
