#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds strata,
# starts a local cluster of three stratad daemons on loopback, and serves a
# multi-turn long-context workload through it with `strata bench`, which
# prints every turn (prompt, reused, resumable and recomputed tokens, lookup
# and write times) and a summary of hit rates and timings. The cluster is
# stopped at the end, also on failure.
#
#   STRATA_DEMO_ARGS="--sessions 8 --prompt-tokens 131072" bash scripts/run-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
bash scripts/build.sh release

bin=build/release
work="$(mktemp -d /tmp/strata-demo.XXXXXX)"
pids=()
stop_cluster() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap stop_cluster EXIT

# Three free loopback ports.
mapfile -t ports < <(/usr/bin/python3 - <<'PY'
import socket
socks = []
for _ in range(3):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PY
)
nodes="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
secret="demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

echo
echo "== starting a local cluster of 3 daemons: $nodes"
for i in 0 1 2; do
    "$bin/cached/stratad" --listen "127.0.0.1:${ports[$i]}" --peers "$nodes" \
        --cluster-secret "$secret" --memory-limit 768M \
        > "$work/stratad-$i.out" 2> "$work/stratad-$i.log" &
    pids+=("$!")
done
for i in 0 1 2; do
    for _ in $(seq 100); do
        grep -q "stratad ready" "$work/stratad-$i.out" 2>/dev/null && break
        sleep 0.1
    done
    if ! grep -q "stratad ready" "$work/stratad-$i.out"; then
        echo "stratad $i did not start:"
        cat "$work/stratad-$i.log"
        exit 1
    fi
done
"$bin/client/strata" status --nodes "$nodes"

echo
echo "== a multi-turn long-context workload"
# shellcheck disable=SC2086
"$bin/client/strata" bench --nodes "$nodes" --transport ucx --sessions 4 --turns 4 \
    --prompt-tokens 65536 --turn-tokens 4096 --layers 2 ${STRATA_DEMO_ARGS:-}

echo
echo "== the cluster afterwards"
"$bin/client/strata" status --nodes "$nodes"
