#!/usr/bin/env bash
# test_demo.sh BUILD_DIR - the README's main job (scripts/run-demo.sh) on a
# short workload against an existing build: it runs to the end, the engine's
# tenant finds its prompt cached, the picture turn hits its VIS object, the other tenant finds nothing of it under
# the same model name, the other tenant's token is refused on the first's
# namespace with its reason, a plaintext client is not served, bench reads no
# wrong bytes, /stats over HTTPS lists both tenants, and neither token nor the
# cluster secret reaches the output or a daemon's command line.
set -uo pipefail
build="$(cd "${1:?usage: test_demo.sh BUILD_DIR}" && pwd)"
cd "$(dirname "$0")/../.." || exit 1
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
fail=0
check() { # check DESCRIPTION REGEX
    if grep -Eq -- "$2" "$out"; then
        echo "ok: $1"
    else
        echo "FAIL: $1 (no line matches '$2')"
        fail=1
    fi
}

STRATA_DEMO_BUILD="$build" STRATA_DEMO_ENGINE_ARGS="--history-tokens 1024 --turns 2" \
    STRATA_DEMO_ARGS="--sessions 1 --turns 2 --prompt-tokens 4096 --turn-tokens 1024" \
    bash scripts/run-demo.sh > "$out" 2>&1 &
demo=$!
# While it runs: no secret on a daemon's command line (what `ps` shows).
for _ in $(seq 400); do
    [ "$(pgrep -c -P "$demo" stratad)" -ge 3 ] && break
    sleep 0.05
done
daemons="$(pgrep -P "$demo" stratad)"
if [ "$(echo "$daemons" | wc -w)" != 3 ]; then
    echo "FAIL: not 3 stratad under run-demo.sh: ${daemons:-none}"
    fail=1
fi
for pid in $daemons; do
    args="$(tr '\0' ' ' < "/proc/$pid/cmdline")"
    case "$args" in
    *--cluster-secret\ * | *--auth-token* | *--metrics-token\ * | *--token*)
        echo "FAIL: a secret on stratad's command line: $args"
        fail=1
        ;;
    *--tenants-file*--tls-cert*) ;;
    *)
        echo "FAIL: stratad without a tenants file and TLS: $args"
        fail=1
        ;;
    esac
done
wait "$demo"
rc=$?
if [ "$rc" != 0 ]; then
    echo "FAIL: run-demo.sh exited $rc"
    fail=1
fi

check "the engine ran as tenant chat" 'namespace chat/reference-'
check "the picture was encoded once and hit its VIS object in turn 2" \
    '^result turns=2 .* images=2 vis_hits=1 vis_misses=1 '
check "the image turn's logits equal the full recompute" '^ +2 +.* 1/1 +[0-9.]+ +[0-9.]+ +[0-9.]+x +(0|[0-9.]+e-[0-9]+)$'
check "bench read no wrong bytes" 'wrong bytes: 0$'
check "/stats over HTTPS lists tenant chat" '^127\.0\.0\.1:[0-9]+ +chat '
check "/stats over HTTPS lists tenant batch" '^127\.0\.0\.1:[0-9]+ +batch '
check "chat finds its prompt" '^tokens=8192 blocks=128 matched_blocks=16 matched_tokens=1024 '
check "batch finds nothing of chat's prompt" '^tokens=8192 blocks=128 matched_blocks=0 '
check "batch's token is refused on chat's namespace" \
    "this token is tenant batch's: it may not open tenant chat \(permission denied\)"
check "a plaintext client is not served" '^strata: cannot connect to .*\(unavailable\)$'
# The tenants file is shown with its hashes cut; no 32-hex token or secret is printed.
if grep -Eq '[0-9a-f]{32}' "$out"; then
    echo "FAIL: a token-like hex string in the output:"
    grep -En '[0-9a-f]{32}' "$out"
    fail=1
fi
if [ "$fail" != 0 ]; then
    echo "--- run-demo.sh output"
    cat "$out"
fi
exit "$fail"
