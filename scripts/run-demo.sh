#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds strata,
# starts a local cluster of three stratad daemons on loopback, and runs the
# engine beside it: `strata-engine` holds a multi-turn long-context
# conversation (an 8192-token history, then three more turns) through the
# cluster, printing per turn the prompt, the tokens reused from the cluster
# and recomputed, time to first token, decode time per token, bytes fetched,
# overlap efficiency and local hit rate, each later turn checked against a
# full recompute (--compare). Then `strata bench` drives the cache alone with
# 64K-token conversations. The cluster is stopped at the end, also on failure
# or Ctrl-C.
#
#   STRATA_DEMO_ENGINE_ARGS="--history-tokens 16384" bash scripts/run-demo.sh
#   STRATA_DEMO_ARGS="--sessions 8 --prompt-tokens 131072" bash scripts/run-demo.sh  # bench
#   STRATA_DEMO_BUILD=build-mine bash scripts/run-demo.sh  # an existing build; no install, no build
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${STRATA_DEMO_BUILD:-}" ]; then
    bin="$STRATA_DEMO_BUILD"
else
    bash scripts/install-deps.sh
    bash scripts/build.sh release
    bin=build/release
fi

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
trap 'exit 130' INT TERM

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
echo "== the engine: a 4-turn conversation over an 8192-token history, resumed from the cluster"
# UCX one-sided reads; 32 blocks of KV rows kept local per DSA layer, older
# rows read from the cluster while the local ones compute; every later turn
# also computed in full without the cache to compare time and logits.
# shellcheck disable=SC2086
"$bin/engine/strata-engine" --nodes "$nodes" --transport ucx --session demo \
    --turns 4 --history-tokens 8192 --turn-tokens 256 --decode-tokens 32 \
    --local-blocks 32 --compare ${STRATA_DEMO_ENGINE_ARGS:-}

echo
echo "== the cache alone: 4 conversations of 4 turns over 64K-token prompts (strata bench)"
# shellcheck disable=SC2086
"$bin/client/strata" bench --nodes "$nodes" --transport ucx --sessions 4 --turns 4 \
    --prompt-tokens 65536 --turn-tokens 4096 --layers 2 ${STRATA_DEMO_ARGS:-}

echo
echo "== the cluster afterwards"
"$bin/client/strata" status --nodes "$nodes"
