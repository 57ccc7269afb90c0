#!/usr/bin/env bash
# Streaming across network namespaces against iperf3, over UCX tcp and
# libfabric tcp;ofi_rxm (issue #23; docs/performance.md, "Across namespaces
# (issue #23)"). Root only (namespaces); needs iperf3 (scripts/install-deps.sh).
#   bash bench/netns_stream.sh [build/release] [extra netns_stream.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
shift || true
for t in ucx libfabric; do
    /usr/bin/python3 bench/netns_stream.py --stratad "$build/cached/stratad" \
        --lib "$build/client/libstrata.so" --transport "$t" "$@"
done
