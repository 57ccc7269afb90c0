#!/usr/bin/env bash
# test_slow_handshake.sh STRATAD STRATA - a TLS handshake slower than 100 ms
# still connects. A proxy in front of a TLS-only stratad holds each new
# connection for 400 ms before it relays a byte (a loaded host, a far one);
# `strata lookup` through it must find the node up. libstrata's channels once
# set gRPC's minimum reconnect backoff to 100 ms, which gRPC also takes as the
# shortest connection attempt: on a loaded 2-core host about one CLI run in
# ten lost a node at connect ("Handshake read failed"); here every run did.
set -uo pipefail
stratad="$1"
strata="$2"
work="$(mktemp -d)"
pids=""
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    for p in $pids; do
        kill "$p" 2> /dev/null
        wait "$p" 2> /dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT
bash "$(dirname "$0")/make_test_certs.sh" "$work/tls" > /dev/null || exit 1
free_port() {
    /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
port="$(free_port)"
proxy="$(free_port)"
token="slow-handshake-token-0123456789"
printf 'acme sha256:%s\n' "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" > "$work/tenants"
printf 'slow-handshake-secret-0123456789\n' > "$work/secret"
"$stratad" --listen "127.0.0.1:$port" --tenants-file "$work/tenants" \
    --cluster-secret-file "$work/secret" --tls-cert "$work/tls/server.pem" \
    --tls-key "$work/tls/server.key" --tls-ca "$work/tls/ca.pem" --memory-limit 256M --transport none \
    > "$work/out" 2> "$work/log" &
pids="$!"
/usr/bin/python3 - "$proxy" "$port" <<'PY' &
import socket, sys, threading, time
listen, target = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", listen))
srv.listen(16)

def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

def serve(c):
    time.sleep(0.4)  # the slow part: nothing moves for 400 ms
    try:
        u = socket.create_connection(("127.0.0.1", target))
    except OSError:
        c.close()
        return
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    pump(u, c)

while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
pids="$pids $!"
for _ in $(seq 100); do grep -q "stratad ready" "$work/out" 2>/dev/null && break; sleep 0.1; done
if ! grep -q "stratad ready" "$work/out"; then
    echo "FAIL: stratad did not start:"
    sed 's/^/  | /' "$work/log"
    exit 1
fi
printf 'nodes = 127.0.0.1:%s\ntenant = acme\ntoken = %s\ntls_ca = %s\n' "$proxy" "$token" \
    "$work/tls/ca.pem" > "$work/client.conf"
fail=0
for i in 1 2 3; do
    if ! "$strata" lookup --config "$work/client.conf" --random 64 > "$work/run" 2>&1 ||
        grep -q "node down" "$work/run"; then
        echo "FAIL: run $i through a 400 ms handshake lost the node:"
        sed 's/^/  | /' "$work/run"
        fail=1
    else
        echo "ok: run $i: $(tail -1 "$work/run")"
    fi
done
exit "$fail"
