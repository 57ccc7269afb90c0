#!/usr/bin/env bash
# The README's main-job command: installs what is missing, builds strata,
# starts a local cluster of three stratad daemons on loopback with two
# tenants and TLS, which find each other through etcd (membership on etcd:
# docs/membership.md; a throwaway etcd started by scripts/etcd.sh), and runs
# the engine beside it.
#
# Setup, all in a temporary directory removed at the end: a throwaway CA and a
# certificate for the daemons (tests/tools/make_test_certs.sh, openssl), a
# tenants file with two tenants, `chat` and `batch` (a random token each; the
# file holds only their SHA-256, and each tenant's quotas per daemon), a
# cluster secret and a metrics token in files, and one client config file per
# tenant (etcd, tenant, token, CA), so that no secret is on a command line.
# The daemons serve gRPC over TLS only (peer calls too), `/stats` over HTTPS
# with the metrics token.
#
# Then, as tenant `chat`, `strata-engine` holds a multi-turn long-context
# conversation (an 8192-token history, then three more turns) through the
# cluster, printing per turn the prompt, the tokens reused from the cluster
# and recomputed, time to first token, decode time per token, bytes fetched,
# overlap efficiency and local hit rate, each later turn checked against a
# full recompute (--compare); then a short conversation with a picture in
# two turns (its embeddings encoded once, then read from its VIS object). As
# tenant `batch`, `strata bench` drives the
# cache alone with 64K-token conversations. Last, isolation as the tenants
# see it: each tenant's use and quotas on each node (from /stats), chat's
# first prompt looked up by chat (cached) and by batch under the same model
# name (nothing: another tenant, another seed), batch's token refused on
# chat's namespace, and a plaintext client refused. The cluster is stopped at
# the end, also on failure or Ctrl-C.
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
etcd_pid=""
stop_cluster() {
    for pid in "${pids[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    # After the daemons, which deregister as they stop.
    if [ -n "$etcd_pid" ]; then
        bash scripts/etcd.sh stop "$etcd_pid" || true
    fi
    rm -rf "$work"
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

# Six free loopback ports: gRPC and metrics of each daemon; then etcd's
# client port, whose successor (its peer port) is free too.
mapfile -t ports < <(/usr/bin/python3 - <<'PY'
import socket
socks = []
for _ in range(6):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
for _ in range(100):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", a.getsockname()[1] + 1))
    except OSError:
        continue
    finally:
        b.close()
    print(a.getsockname()[1])
    a.close()
    break
PY
)
nodes="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
etcd="http://127.0.0.1:${ports[6]}"

# Secrets: 128 random bits each, in files of mode 0600.
umask 077
rand() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
sha256() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
rand > "$work/cluster-secret"
rand > "$work/metrics-token"
chat_token="$(rand)"
batch_token="$(rand)"

echo
echo "== setup in $work: a throwaway CA and certificate, two tenants, secrets in files"
bash tests/tools/make_test_certs.sh "$work/tls"
# Quotas per daemon: the two memory quotas fit in a daemon's 768M less the
# index's sixteenth, so each tenant below its quota always finds room.
cat > "$work/tenants" <<TENANTS
# name  SHA-256 of the token (never the token)  quotas per daemon
chat    sha256:$(sha256 "$chat_token")  memory=320M sessions=16 pins=1024 namespaces=2
batch   sha256:$(sha256 "$batch_token")  memory=320M sessions=16 pins=1024 namespaces=2
TENANTS
sed 's/sha256:\([0-9a-f]\{12\}\)[0-9a-f]*/sha256:\1.../' "$work/tenants"
for t in chat batch; do
    token_var="${t}_token"
    # Read by --config: connection settings and the token, off the command line.
    printf 'etcd = %s\ntenant = %s\ntoken = %s\ntls_ca = %s\n' "$etcd" "$t" \
        "${!token_var}" "$work/tls/ca.pem" > "$work/$t.conf"
done

echo
echo "== membership: a throwaway etcd at $etcd (scripts/etcd.sh); the daemons register there"
etcd_pid="$(ETCD_WATCH_PID=$$ bash scripts/etcd.sh start "${ports[6]}" "$work/etcd")"

echo
echo "== starting a local cluster of 3 daemons over TLS: $nodes"
# One host, so the data plane is UCX over shared memory, which checks no
# remote key: a client that reaches a daemon's UCX worker could read any
# tenant's bytes. stratad refuses two tenants on it unless told to accept
# that (--allow-shared-dataplane); readers still check every object, so no
# tenant can be served another's or a changed byte. Across hosts, use
# libfabric (its providers enforce keys: docs/security.md).
echo "   (data plane: UCX shared memory, which enforces no keys: --allow-shared-dataplane)"
for i in 0 1 2; do
    "$bin/cached/stratad" --listen "127.0.0.1:${ports[$i]}" --etcd "$etcd" \
        --cluster-secret-file "$work/cluster-secret" --tenants-file "$work/tenants" \
        --tls-cert "$work/tls/server.pem" --tls-key "$work/tls/server.key" \
        --tls-ca "$work/tls/ca.pem" --memory-limit 768M --allow-shared-dataplane \
        --metrics-listen "127.0.0.1:${ports[$((i + 3))]}" \
        --metrics-tls-cert "$work/tls/server.pem" --metrics-tls-key "$work/tls/server.key" \
        --metrics-token-file "$work/metrics-token" \
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
# The members as etcd holds them: each daemon's record under its lease.
echo "   members in etcd (clients find the cluster there: etcd = $etcd in their config):"
ETCDCTL_API=3 etcdctl --endpoints "$etcd" get --prefix /strata/members/ --print-value-only |
    sed -n 's/^grpc=\(.*\)/     \1/p; s/^state=\(.*\)/       state \1/p'

# Each node's use per tenant, as the operator reads it: /stats over HTTPS with
# the metrics token.
tenant_use() {
    /usr/bin/python3 - "$work/tls/ca.pem" "$work/metrics-token" "${ports[@]}" <<'PY'
import json, ssl, sys, urllib.request
ca, token_file, ports = sys.argv[1], sys.argv[2], sys.argv[3:]
token = open(token_file).read().strip()
ctx = ssl.create_default_context(cafile=ca)
print("%-16s %-6s %17s %9s %10s %9s" % ("node", "tenant", "memory_MiB", "sessions",
                                        "namespaces", "pins"))
for node, port in zip(ports[:3], ports[3:]):  # gRPC ports, then their metrics ports
    req = urllib.request.Request("https://127.0.0.1:%s/stats" % port,
                                 headers={"Authorization": "Bearer " + token})
    stats = json.load(urllib.request.urlopen(req, context=ctx, timeout=5))
    for name, t in sorted(stats.get("tenants", {}).items()):
        def col(key, scale=1):
            used, quota = t.get(key, {}).get("used", 0), t.get(key, {}).get("quota", 0)
            q = "%.0f" % (quota / scale) if quota else "-"  # 0: no quota
            return ("%.1f/%s" if scale > 1 else "%d/%s") % (used / scale, q)
        print("%-16s %-6s %17s %9s %10s %9s" % (
            "127.0.0.1:" + node, name, col("memory_bytes", 1 << 20),
            col("sessions"), col("namespaces"), col("pins")))
PY
}

echo
echo "== tenant chat, the engine: a 4-turn conversation over an 8192-token history, resumed from the cluster"
# UCX one-sided reads; 32 blocks of KV rows kept local per DSA layer, older
# rows read from the cluster while the local ones compute; every later turn
# also computed in full without the cache to compare time and logits.
# shellcheck disable=SC2086
"$bin/engine/strata-engine" --config "$work/chat.conf" --transport ucx --session demo \
    --turns 4 --history-tokens 8192 --turn-tokens 256 --decode-tokens 32 \
    --local-blocks 32 --compare ${STRATA_DEMO_ENGINE_ARGS:-} | tee "$work/engine.out"
model="$(sed -n 's/^strata-engine: model \([^ ]*\).*/\1/p' "$work/engine.out" | head -1)"

echo
echo "== tenant chat, images: a picture in the conversation, encoded once, its embeddings cached"
# A 96 x 64 picture (binary PPM; 6 x 4 patches of 16 pixels, 24 image tokens) in turn 1
# after 200 text tokens, and again in turn 2 after 64: turn 2 resumes turn 1 (the picture's
# KV included) and finds the second copy's embeddings in the picture's VIS object.
/usr/bin/python3 - "$work/picture.ppm" <<'PY'
import sys
w, h = 96, 64
px = bytearray()
for y in range(h):
    for x in range(w):
        inside = (x - 60) ** 2 + (y - 30) ** 2 < 300
        px += bytes((220, 60, 40) if inside else (x * 2, y * 3, 160))
open(sys.argv[1], "wb").write(b"P6\n%d %d\n255\n" % (w, h) + bytes(px))
PY
"$bin/engine/strata-engine" --config "$work/chat.conf" --transport ucx --session demo-images \
    --turns 2 --history-tokens 512 --turn-tokens 128 --decode-tokens 8 \
    --image "$work/picture.ppm@1:200,$work/picture.ppm@2:64" --compare

echo
echo "== tenant batch, the cache alone: 4 conversations of 4 turns over 64K-token prompts (strata bench)"
# shellcheck disable=SC2086
"$bin/client/strata" bench --config "$work/batch.conf" --transport ucx --sessions 4 --turns 4 \
    --prompt-tokens 65536 --turn-tokens 4096 --layers 2 ${STRATA_DEMO_ARGS:-}

echo
echo "== isolation: each tenant's use and quotas per node"
tenant_use

# The engine's first prompt: user token i is XXH3-64(i, seed token_seed 1)
# modulo the vocabulary of 512 (engine/runner.c, rn_token).
/usr/bin/python3 - > "$work/prompt.tokens" <<'PY'
import xxhash
print(" ".join(str(xxhash.xxh3_64_intdigest(i.to_bytes(8, "little"), seed=1) % 512)
               for i in range(8192)))
PY
echo
echo "== isolation: chat's first prompt (8192 tokens, model $model) looked up by each tenant"
echo "\$ strata lookup --config chat.conf --model $model --tokens-file prompt.tokens"
"$bin/client/strata" lookup --config "$work/chat.conf" --model "$model" \
    --tokens-file "$work/prompt.tokens"
echo "\$ strata lookup --config batch.conf --model $model --tokens-file prompt.tokens"
"$bin/client/strata" lookup --config "$work/batch.conf" --model "$model" \
    --tokens-file "$work/prompt.tokens"

echo
echo "== the Python package (client/python/strata, docs/python.md): chat's prompt looked up as an application would"
py_env=(STRATA_LIB="$bin/client/libstrata.so" PYTHONPATH="$PWD/client/python")
# A sanitized build (the test suite's ASan run): python needs the ASan runtime that
# libstrata links first. The path comes from ldd's whole output (awk reads it all: a
# `grep -q` would close the pipe early and pipefail would then count ldd's SIGPIPE).
asan_rt=$(ldd "$bin/client/libstrata.so" 2> /dev/null | awk '$1 ~ /^libasan\.so/ { print $3 }')
if [[ -n "$asan_rt" ]]; then
    py_env+=(LD_PRELOAD="$asan_rt" ASAN_OPTIONS=detect_leaks=0)
fi
env "${py_env[@]}" /usr/bin/python3 - "$work/chat.conf" "$model" "$work/prompt.tokens" <<'PY'
import sys

import strata

conf, model, path = sys.argv[1:]
tokens = [int(t) for t in open(path).read().split()]
with strata.Client.from_config(conf, model=model) as c:
    found = c.lookup(c.hash(tokens))
    print("strata.Client.lookup: %r" % found)
    if found.matched_blocks == 0:
        sys.exit("run-demo: the Python package found none of chat's prompt")
PY

echo
echo "== isolation: batch's token on chat's namespace is refused"
echo "\$ strata lookup --config batch.conf --tenant chat --model $model --tokens-file prompt.tokens"
if "$bin/client/strata" lookup --config "$work/batch.conf" --tenant chat --model "$model" \
    --tokens-file "$work/prompt.tokens"; then
    echo "run-demo: batch's token was let into chat's namespace" >&2
    exit 1
fi

echo
echo "== TLS: without the CA a client speaks plaintext, which the daemons do not serve"
echo "\$ strata lookup --config chat.conf --tls-ca '' --model $model --tokens-file prompt.tokens"
if plain="$("$bin/client/strata" lookup --config "$work/chat.conf" --tls-ca '' --model "$model" \
    --tokens-file "$work/prompt.tokens" 2>&1)"; then
    echo "run-demo: a plaintext client was served" >&2
    exit 1
fi
echo "${plain##*$'\n'}" # its last line: why
