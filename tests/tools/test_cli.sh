#!/usr/bin/env bash
# The strata command against a real daemon: --help on every command, exit
# codes (0 ok, 1 cluster error or miss, 2 usage, 3 a durable write short of
# --write-quorum), and a put / get / lookup / delete / session round trip;
# then durable writes against two daemons with their own data_dir, one of
# them killed.
set -uo pipefail
stratad="$1"
strata="$2"
work="$(mktemp -d)"
port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$stratad" --listen "127.0.0.1:$port" > "$work/out" 2> "$work/log" &
pid=$!
pids="$pid"
trap 'for p in $pids; do kill $p 2>/dev/null; wait $p 2>/dev/null; done; rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q "stratad ready" "$work/out" && break; sleep 0.1; done
n="--nodes 127.0.0.1:$port"
pass=0
fail=0
expect() { # expect CODE DESCRIPTION -- command...
    local want="$1" what="$2"
    shift 3
    "$@" > "$work/stdout" 2> "$work/stderr"
    local got=$?
    if [ "$got" = "$want" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $what: exit $got, want $want"
        sed 's/^/  | /' "$work/stdout" "$work/stderr"
    fi
}
expect_out() { # expect_out PATTERN DESCRIPTION: the last command's stdout matches
    if grep -Eq "$1" "$work/stdout"; then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL: $2: output does not match /$1/"; sed 's/^/  | /' "$work/stdout"; fi
}

expect 0 "strata --help" -- "$strata" --help
expect 2 "no command" -- "$strata"
expect 2 "unknown command" -- "$strata" frobnicate
for cmd in status hash lookup put get delete session bench; do
    expect 0 "strata $cmd --help" -- "$strata" "$cmd" --help
    expect_out "Usage: strata $cmd" "strata $cmd --help names the command"
done
expect 2 "unknown flag" -- "$strata" lookup $n --frob
expect 2 "lookup without tokens" -- "$strata" lookup $n
expect 2 "bad token" -- "$strata" lookup $n --tokens 1,2,x
expect 2 "session without an action" -- "$strata" session $n
expect 2 "bad session action" -- "$strata" session $n fly chat-1
expect 1 "unreachable cluster" -- "$strata" lookup --nodes 127.0.0.1:1 --random 64 --timeout 500ms

expect 0 "status" -- "$strata" status $n
expect_out "UP" "status shows the node up"
expect 0 "put" -- "$strata" put $n --random 256 --block 2 --kind kv --fill 4096
expect_out "stored block=2 kind=kv layer=0 bytes=4096" "put says what it stored"
expect 0 "get" -- "$strata" get $n --random 256 --block 2 --kind kv --out "$work/obj"
test "$(stat -c %s "$work/obj")" = 4096 && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: get wrote no 4096-byte file"; }
expect 1 "get of a block never stored is a miss" -- "$strata" get $n --random 256 --block 3
expect 0 "lookup (any object counts)" -- "$strata" lookup $n --random 256
expect_out "matched_blocks=0" "block 0 was not stored, so nothing matches"
for b in 0 1; do expect 0 "put block $b" -- "$strata" put $n --random 256 --block $b --fill 64; done
expect 0 "lookup" -- "$strata" lookup $n --random 256
expect_out "matched_blocks=3 matched_tokens=192" "blocks 0..2 match"
expect 0 "delete" -- "$strata" delete $n --random 256 --kinds kv --layers 1
expect 0 "lookup after delete" -- "$strata" lookup $n --random 256
expect_out "matched_blocks=0" "deleted blocks no longer match"
expect 0 "session open" -- "$strata" session $n open chat-1
expect 0 "session append" -- "$strata" session $n append chat-1 --random 200
expect_out "session=chat-1 length=192" "append records the three full blocks"
expect 0 "session get" -- "$strata" session $n get chat-1
expect 0 "session close" -- "$strata" session $n close chat-1
expect 1 "session get after close" -- "$strata" session $n get chat-1
expect 0 "hash" -- "$strata" hash $n --tokens "$(seq -s, 0 127)"
expect_out "^1 [0-9a-f]{32}$" "hash prints index and hex per block"
expect 1 "durable session open on a daemon without data_dir" -- "$strata" session $n open chat-2 --durable
grep -q "no SSD tier" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: durable open without data_dir does not say why"; }

# Two daemons, each with its own data_dir: durable on both, then one killed.
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pa="$(free_port)"; pb="$(free_port)"
peers="127.0.0.1:$pa,127.0.0.1:$pb"
for x in a b; do
    mkdir -p "$work/data-$x"
    p=$pa; [ $x = b ] && p=$pb
    "$stratad" --listen "127.0.0.1:$p" --peers "$peers" --cluster-secret cli-test-cluster-secret \
        --memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none --ssd-map-size 256M \
        --data-dir "$work/data-$x" > "$work/out-$x" 2> "$work/log-$x" &
    eval "pid_$x=$!"
    pids="$pids $!"
done
for x in a b; do for _ in $(seq 100); do grep -q "stratad ready" "$work/out-$x" && break; sleep 0.1; done; done
n2="--nodes $peers --replicas 2"
expect 0 "durable session open, both replicas up" -- "$strata" session $n2 open chat-3 --durable
expect_out "written=2 of 2 replicas durable" "open says both replicas committed it"
expect 0 "durable KDA put, both up" -- "$strata" put $n2 --random 128 --block 1 --kind kda --fill 4096 --durable
expect_out "replicas=2 durable" "put says both replicas committed it"
kill -9 "$pid_b"; wait "$pid_b" 2>/dev/null
expect 3 "durable append, one of two replicas down" -- "$strata" session $n2 append chat-3 --random 128 --durable
grep -q "written to fewer replicas than asked: session chat-3: durable on 1 of 2 replicas" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a partial append does not say how many"; sed 's/^/  | /' "$work/stderr"; }
expect 3 "durable KDA put, one of two replicas down" -- "$strata" put $n2 --random 128 --block 0 --kind kda --fill 4096 --durable
grep -q "durable on 1 of 2 replicas" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a partial put does not say how many"; sed 's/^/  | /' "$work/stderr"; }
expect 0 "durable append with --write-quorum 1" -- "$strata" session $n2 append chat-3 --random 192 --durable --write-quorum 1
expect_out "written=1 of 2 replicas durable" "append says one replica committed it"
expect 0 "durable KDA put with --write-quorum 1" -- "$strata" put $n2 --random 128 --block 0 --kind kda --fill 4096 --durable --write-quorum 1
expect 1 "--write-quorum above --replicas" -- "$strata" session $n2 get chat-3 --write-quorum 3
grep -q "write_quorum 3 is above replicas 2" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: W > R does not say so"; }
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
