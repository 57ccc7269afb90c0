#!/usr/bin/env bash
# scripts/etcd.sh - a throwaway etcd (Debian's etcd-server) for tests, the
# demo and benches: every user starts its own, none is assumed to be running.
#
#   scripts/etcd.sh start PORT DATA_DIR [HOST]
#       starts etcd serving clients on http://HOST:PORT (HOST default
#       127.0.0.1; peers on PORT+1), data in DATA_DIR (created; its log is
#       DATA_DIR/etcd.log), waits until it answers its health check (at most
#       ETCD_WAIT_S seconds, default 20) and prints its pid on stdout.
#       Exit status 0 once it is healthy; 1 (and the log's tail on stderr)
#       when it did not start; 2 for bad arguments or no etcd binary.
#   scripts/etcd.sh stop PID
#       SIGTERM, then SIGKILL after 5 s; waits until it is gone.
#   scripts/etcd.sh health PORT [HOST]
#       exit 0 when http://HOST:PORT/health says {"health":"true"}.
#
# ETCD=/path/to/etcd picks another binary (default: etcd on PATH, Debian's
# /usr/bin/etcd). ETCD_WATCH_PID=PID: etcd is also stopped once that process
# has gone (a test that crashed or was killed leaves no etcd behind). The
# data dir is the caller's to remove.
set -u

etcd_bin=${ETCD:-$(command -v etcd || echo /usr/bin/etcd)}

usage() {
    sed -n '2,20p' "$0" >&2
    exit 2
}

health() {
    local port=$1 host=${2:-127.0.0.1}
    if command -v curl >/dev/null 2>&1; then
        curl -s -m 1 "http://$host:$port/health" 2>/dev/null | grep -q '"health":"true"'
    else
        /usr/bin/python3 - "$host" "$port" <<'PY' >/dev/null 2>&1
import sys, urllib.request
r = urllib.request.urlopen("http://%s:%s/health" % (sys.argv[1], sys.argv[2]), timeout=1)
sys.exit(0 if b'"health":"true"' in r.read() else 1)
PY
    fi
}

start() {
    local port=$1 dir=$2 host=${3:-127.0.0.1}
    local peer=$((port + 1)) wait_s=${ETCD_WAIT_S:-20} pid i
    if [ ! -x "$etcd_bin" ]; then
        echo "etcd.sh: no etcd binary at $etcd_bin (install etcd-server: scripts/install-deps.sh)" >&2
        exit 2
    fi
    case $port in '' | *[!0-9]*) echo "etcd.sh: bad port '$port'" >&2; exit 2 ;; esac
    mkdir -p "$dir" || exit 2
    # Its own process group: a test that is killed leaves no etcd behind
    # when its harness kills the group; stdin closed, output to the log.
    setsid "$etcd_bin" --name "strata-$port" --data-dir "$dir/data" \
        --listen-client-urls "http://$host:$port" --advertise-client-urls "http://$host:$port" \
        --listen-peer-urls "http://$host:$peer" --initial-advertise-peer-urls "http://$host:$peer" \
        --initial-cluster "strata-$port=http://$host:$peer" --initial-cluster-state new \
        --log-level warn --logger zap </dev/null >"$dir/etcd.log" 2>&1 &
    pid=$!
    for ((i = 0; i < wait_s * 10; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "etcd.sh: etcd exited at start (port $port); its log:" >&2
            tail -n 20 "$dir/etcd.log" >&2
            exit 1
        fi
        if health "$port" "$host"; then
            if [ -n "${ETCD_WATCH_PID:-}" ]; then
                # Detached: ends with etcd, or stops it once the watched process is gone.
                (
                    while kill -0 "$ETCD_WATCH_PID" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do
                        sleep 1
                    done
                    kill -TERM "$pid" 2>/dev/null
                ) </dev/null >/dev/null 2>&1 &
            fi
            echo "$pid"
            exit 0
        fi
        sleep 0.1
    done
    echo "etcd.sh: etcd not healthy after ${wait_s}s (port $port); its log:" >&2
    tail -n 20 "$dir/etcd.log" >&2
    kill -9 "$pid" 2>/dev/null
    exit 1
}

stop() {
    local pid=$1 i
    case $pid in '' | *[!0-9]*) echo "etcd.sh: bad pid '$pid'" >&2; exit 2 ;; esac
    kill -TERM "$pid" 2>/dev/null || exit 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    for ((i = 0; i < 20; i++)); do
        kill -0 "$pid" 2>/dev/null || exit 0
        sleep 0.1
    done
    exit 0
}

case ${1:-} in
start) [ $# -ge 3 ] || usage; start "$2" "$3" "${4:-127.0.0.1}" ;;
stop) [ $# -ge 2 ] || usage; stop "$2" ;;
health) [ $# -ge 2 ] || usage; health "$2" "${3:-127.0.0.1}" ;;
*) usage ;;
esac
