#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds strata and
# runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh release

echo
echo "strata is built in build/release."
echo "The main job (a local cluster serving a multi-turn long-context workload)"
echo "arrives with the daemon; for now this runs the one component that exists"
echo "end to end, hashing a 1M-token sequence into its block-hash chain:"
echo
build/release/bench/bench_hash --rounds 11
