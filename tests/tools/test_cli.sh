#!/usr/bin/env bash
# The strata command against a real daemon: --help on every command, exit
# codes (0 ok, 1 cluster error or miss, 2 usage), and a put / get / lookup /
# delete / session round trip.
set -uo pipefail
stratad="$1"
strata="$2"
work="$(mktemp -d)"
port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$stratad" --listen "127.0.0.1:$port" > "$work/out" 2> "$work/log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
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
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
