#!/usr/bin/env bash
# The soak on demand (issue #19; docs/testing.md "Soak"): three stratad on
# loopback under `strata load` at a steady rate for --minutes (default 30),
# every daemon's RSS, descriptors, threads, leases and reservations sampled
# and checked flat. Builds the release build first when it is missing.
#   bash scripts/soak.sh --minutes 30 [--rate 200] [--plot soak.png] [soak.py options]
# Everything but --build DIR is passed to tests/soak/soak.py (--help lists it);
# the samples, the logs and the summary table stay in --workdir (default
# build/soak-<date>).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --build)
        build="$2"
        shift 2
        ;;
    *)
        args+=("$1")
        shift
        ;;
    esac
done
if [ ! -x "$build/cached/stratad" ] || [ ! -x "$build/client/strata" ]; then
    bash scripts/build.sh release
fi
workdir="build/soak-$(date -u +%Y%m%dT%H%M%SZ)"
case " ${args[*]-} " in
*" --workdir "*) ;;
*) args+=(--workdir "$workdir") ;;
esac
exec /usr/bin/python3 tests/soak/soak.py --stratad "$build/cached/stratad" \
    --strata "$build/client/strata" "${args[@]}"
