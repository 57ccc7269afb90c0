#!/usr/bin/env bash
# load_sweep.sh - strata under load against Redis, from the same generator
# (`strata load`, docs/cli.md; issue #19).
#
#   bench/load_sweep.sh [BUILD_DIR [OUT_DIR]]      (defaults build/release, BUILD_DIR/load_sweep)
#
# Starts three stratad on loopback with a memory limit well below the working
# set (MEM each, default 128M, the smallest a daemon takes) and an SSD tier
# each (eviction spills to it), and one redis-server with maxmemory REDIS_MEM
# (default 256mb: about what the three daemons' arenas hold) and allkeys-lru.
# Then, with ENGINES simulated engines (default 64) of SESSIONS sessions each
# (default 4: about 0.3 GB of first turns, which every run writes before its
# clock starts):
#   1. sweeps the offered rate up through RATES (calls/s), each rate against
#      strata then against Redis, WARMUP + DURATION each;
#   2. runs the lowest rate again on strata after the highest (recovery);
#   3. REPS times (default 2), at BIG_RATE: small gets with and without
#      --big-load (one more engine loading a 1M-token prefix whole, again and
#      again), on strata and on Redis, alternating.
# Writes every run's JSON report and output to OUT_DIR, the table
# OUT_DIR/load_sweep.dat, the plot OUT_DIR/load_sweep.png (gnuplot, when
# installed), the nodes' status and hits (from SSD, too) and Redis's INFO
# at the end, and a summary on stdout (bench/load_sweep.py). STRATAD_ARGS
# adds flags to every stratad, e.g. admission control (docs/daemon.md,
# "Fairness and admission"): STRATAD_ARGS="--max-serving-calls 3
# --max-queued-calls 64" (default: none, the daemon's defaults). Everything it
# starts it stops. The daemons, Redis and the generator share this
# machine's cores: say so with the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

build="${1:-build/release}"
out="${2:-$build/load_sweep}"
RATES="${RATES:-50 100 200 400 800}"
DURATION="${DURATION:-10s}"
WARMUP="${WARMUP:-3s}"
ENGINES="${ENGINES:-64}"
SESSIONS="${SESSIONS:-4}"
REPS="${REPS:-2}"
BIG_RATE="${BIG_RATE:-100}"
MEM="${MEM:-128M}"
REDIS_MEM="${REDIS_MEM:-256mb}"
read -r -a stratad_args <<< "${STRATAD_ARGS:-}"

strata="$build/client/strata"
stratad="$build/cached/stratad"
for bin in "$strata" "$stratad"; do
    if [ ! -x "$bin" ]; then
        echo "load_sweep: $bin is not built (cmake --build $build)" >&2
        exit 2
    fi
done
if ! command -v redis-server > /dev/null; then
    echo "load_sweep: redis-server is not installed (scripts/install-deps.sh)" >&2
    exit 2
fi
mkdir -p "$out"
work="$(mktemp -d /tmp/strata-load-sweep-XXXXXX)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2> /dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2> /dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

base=$((20000 + RANDOM % 8000))
peers="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
for i in 0 1 2; do
    mkdir -p "$work/data-$i"
    "$stratad" --listen "127.0.0.1:$((base + i))" --peers "$peers" --memory-limit "$MEM" \
        --data-dir "$work/data-$i" --ssd-map-size 8G "${stratad_args[@]}" \
        > "$work/stratad-$i.out" 2> "$out/stratad-$i.log" &
    pids+=("$!")
done
redis_port=$((base + 3))
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --maxmemory "$REDIS_MEM" --maxmemory-policy allkeys-lru --loglevel warning \
    > "$out/redis.log" 2>&1 &
pids+=("$!")
for i in 0 1 2; do
    for _ in $(seq 200); do
        grep -q "stratad ready" "$work/stratad-$i.out" 2> /dev/null && break
        sleep 0.1
    done
    if ! grep -q "stratad ready" "$work/stratad-$i.out"; then
        echo "load_sweep: stratad $i did not start; see $out/stratad-$i.log" >&2
        exit 1
    fi
done
for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping 2> /dev/null | grep -q PONG && break
    sleep 0.1
done

# run TAG BACKEND RATE [more strata load flags]
run() {
    local tag="$1" backend="$2" rate="$3"
    shift 3
    local target=(--nodes "$peers")
    if [ "$backend" = redis ]; then
        target=(--peer "redis:127.0.0.1:$redis_port")
    fi
    echo "load_sweep: $tag ($backend, $rate calls/s $*)" >&2
    "$strata" load "${target[@]}" --engines "$ENGINES" --sessions "$SESSIONS" --rate "$rate" \
        --warmup "$WARMUP" --duration "$DURATION" --report "$out/$tag.json" "$@" \
        > "$out/$tag.txt" 2> "$out/$tag.err" || echo "load_sweep: $tag exited with $?" >&2
}

lowest=""
for rate in $RATES; do
    lowest="${lowest:-$rate}"
    run "sweep-strata-$rate" strata "$rate"
    run "sweep-redis-$rate" redis "$rate"
done
run "recover-strata-$lowest" strata "$lowest"
for rep in $(seq "$REPS"); do
    for backend in strata redis; do
        run "small-$backend-$rep" "$backend" "$BIG_RATE" --mix lookup=0,get=1,rows=0,put=0
        run "big-$backend-$rep" "$backend" "$BIG_RATE" --mix lookup=0,get=1,rows=0,put=0 \
            --big-load
    done
done

# What the memory limit did: objects, memory and hits per node (from_ssd: served by the
# SSD tier after eviction), and Redis's evictions.
"$strata" status --nodes "$peers" > "$out/status.txt" 2>&1 || true
"$strata" metrics --nodes "$peers" > "$out/metrics.txt" 2>&1 || true
redis-cli -p "$redis_port" info > "$out/redis-info.txt" 2>&1 || true
/usr/bin/python3 bench/load_sweep.py "$out" "$RATES" "$lowest" "$REPS"
echo
cat "$out/status.txt"
grep -E "UP|kv " "$out/metrics.txt" || true
grep -E "^(used_memory_human|maxmemory_human|evicted_keys):" "$out/redis-info.txt" || true
if command -v gnuplot > /dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 1000,640
set output "$out/load_sweep.png"
set title "p99 latency against offered rate: 3 stratad vs Redis, $ENGINES engines (shared 2-core VM)"
set xlabel "offered calls/s"
set ylabel "p99 latency (ms)"
set logscale xy
set grid
set key top left
plot "$out/load_sweep.dat" using 1:2 with linespoints title "strata lookup", \
     "" using 1:3 with linespoints title "strata get", \
     "" using 1:4 with linespoints title "strata rows", \
     "" using 1:6 with linespoints dt 2 title "Redis lookup", \
     "" using 1:7 with linespoints dt 2 title "Redis get", \
     "" using 1:8 with linespoints dt 2 title "Redis rows"
EOF
    echo "load_sweep: plot $out/load_sweep.png"
else
    echo "load_sweep: gnuplot is not installed: no plot (apt-get install gnuplot-nox)" >&2
fi
