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
for cmd in status hash lookup put get delete session bench drain; do
    expect 0 "strata $cmd --help" -- "$strata" "$cmd" --help
    expect_out "Usage: strata $cmd" "strata $cmd --help names the command"
done
expect 0 "strata metrics --help" -- "$strata" metrics --help
expect_out "Usage: strata metrics" "strata metrics --help names the command"
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
# Images and items (cli_items.c): the chain with them, VIS objects by an image's hash.
/usr/bin/python3 -c 'import sys; w, h = 20, 10; sys.stdout.buffer.write(b"P6\n%d %d\n255\n" % (w, h) + bytes((i * 7) % 256 for i in range(w * h * 3)))' > "$work/a.ppm"
/usr/bin/python3 -c 'import sys; d = bytearray(open(sys.argv[1], "rb").read()); d[-5] ^= 1; sys.stdout.buffer.write(d)' "$work/a.ppm" > "$work/b.ppm"
expect 0 "hash without items" -- "$strata" hash $n --random 256
cp "$work/stdout" "$work/plain"
expect 0 "hash with an image across blocks 0 and 1" -- "$strata" hash $n --random 256 --image "$work/a.ppm@60:10"
expect_out "^item 0 image=.*a.ppm 20x10x3 start=60 tokens=10 hash=[0-9a-f]{32}$" "hash names the image item"
expect_out "^0 [0-9a-f]{32} changed items=0$" "block 0 is keyed by the image"
expect_out "^1 [0-9a-f]{32} changed items=0$" "block 1 is keyed by the image"
expect_out "^2 [0-9a-f]{32} changed$" "block 2 changes through the chain only"
expect_out "^blocks=4 items=1 overlapped=2 changed=4 first_changed=0$" "the summary counts them"
expect 0 "hash with a generated image in block 2 (LEN from --patch)" -- "$strata" hash $n --random 256 --gen-image 64,32,5@140 --patch 32
expect_out "^item 0 gen=64,32,5,3 start=140 tokens=2 hash=" "2x1 patches of 32 pixels: 2 tokens"
expect_out "^blocks=4 items=1 overlapped=1 changed=2 first_changed=2$" "blocks 0 and 1 keep their text hashes"
head -2 "$work/plain" | while read -r i h; do grep -q "^$i $h$" "$work/stdout" || echo "block $i changed"; done > "$work/diff"
[ -s "$work/diff" ] && { fail=$((fail + 1)); echo "FAIL: blocks before the image changed"; } || pass=$((pass + 1))
ahash="$(grep -o 'hash=[0-9a-f]*' "$work/stdout" | head -1 | cut -d= -f2)"
printf '# source start length\n%s 140 2\n\ngen:8,8,3,1 200 auto # a grey one\n%s 10 3\n' "$ahash" "$work/a.ppm" > "$work/items"
expect 0 "hash with an --items file" -- "$strata" hash $n --random 256 --items "$work/items"
expect_out "^item 0 image=.*a.ppm 20x10x3 start=10 tokens=3 " "items are sorted by start"
expect_out "^item 1 hash start=140 tokens=2 hash=$ahash$" "a hash given as hex is the same item"
expect_out "^item 2 gen=8,8,3,1 start=200 tokens=1 " "auto: one 16-pixel patch"
printf 'gen:8,8,3 200 auto\nnot-a-file 5 x\n' > "$work/bad-items"
expect 2 "an --items line with a bad length" -- "$strata" hash $n --random 256 --items "$work/bad-items"
grep -q "line 2: length 'x' is not a token count" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a bad items line is not named"; sed 's/^/  | /' "$work/stderr"; }
expect 2 "--image without @POS" -- "$strata" hash $n --random 256 --image "$work/a.ppm"
grep -q "give the item's token position as @POS" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a missing @POS is not named"; }
expect 2 "--image of a file that is not an image" -- "$strata" hash $n --random 256 --image "$work/items@0"
grep -q "^strata: --image: .*items" "$work/stderr" && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: a bad image file is not named"; sed 's/^/  | /' "$work/stderr"; }
expect 2 "--gen-image with one channel too many" -- "$strata" hash $n --random 256 --gen-image 8,8,1,4@0
expect 0 "put --kind vis" -- "$strata" put $n --kind vis --image "$work/a.ppm" --fill 3000
expect_out "^stored block=0 kind=vis layer=0 bytes=3000 checksum=[0-9a-f]{16} image=[0-9a-f]{32} replicas=1$" "put names the image"
expect 0 "get --kind vis" -- "$strata" get $n --kind vis --image "$work/a.ppm" --out "$work/emb"
test "$(stat -c %s "$work/emb")" = 3000 && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: get --kind vis wrote no 3000-byte file"; }
expect 1 "get --kind vis of an image one sample apart is a miss" -- "$strata" get $n --kind vis --image "$work/b.ppm"
expect 2 "--kind vis with tokens" -- "$strata" get $n --kind vis --image "$work/a.ppm" --random 64
expect 2 "--kind vis without an image" -- "$strata" get $n --kind vis
expect 2 "--kind session in get" -- "$strata" get $n --kind session --random 64
expect 0 "put a KV object of a chain with an image" -- "$strata" put $n --random 256 --image "$work/a.ppm@64" --block 1 --fill 100
expect 0 "get it with the same image at the same place" -- "$strata" get $n --random 256 --image "$work/a.ppm@64" --block 1
expect 1 "the same block without the image is another key" -- "$strata" get $n --random 256 --block 1 --kind kv --layer 0 --image "$work/b.ppm@64"
expect 0 "put block 0 of the chain with the image" -- "$strata" put $n --random 256 --image "$work/a.ppm@64" --block 0 --fill 100
expect 0 "lookup with the image" -- "$strata" lookup $n --random 256 --image "$work/a.ppm@64"
expect_out "matched_blocks=2 " "blocks 0 and 1 of the image's chain match"
expect 0 "lookup with the image elsewhere" -- "$strata" lookup $n --random 256 --image "$work/a.ppm@0"
expect_out "matched_blocks=0 " "the image at another position is another chain"
expect 0 "delete the image's chain" -- "$strata" delete $n --random 256 --image "$work/a.ppm@64" --kinds kv --layers 1
expect 0 "lookup with the image after delete" -- "$strata" lookup $n --random 256 --image "$work/a.ppm@64"
expect_out "matched_blocks=0 " "deleted"
expect 0 "session open for a chain with an image" -- "$strata" session $n open chat-img
expect 0 "session append of a chain with an image" -- "$strata" session $n append chat-img --random 200 --gen-image 8,8,1@10
expect_out "session=chat-img length=192 head=" "the session takes the image's chain"
expect 2 "session append with a bad image argument" -- "$strata" session $n append chat-img --random 200 --gen-image 8,8@10
expect 0 "metrics" -- "$strata" metrics $n
expect_out "^  vis +gets=2 hits=1 from_ssd=0 misses=1 " "status shows the VIS hit and miss"

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
# strata drain: the single daemon (no peers: the session records of the cases above have
# nowhere to go) stops with 0.
expect 0 "strata drain of a node" -- "$strata" drain $n "127.0.0.1:$port"
expect_out "draining 127.0.0.1:$port: [0-9]+ durable objects to hand over" "drain names the node and what it hands over"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid"
code=$?
[ "$code" = 0 ] && pass=$((pass + 1)) || { fail=$((fail + 1)); echo "FAIL: the drained daemon exited $code, want 0"; }
expect 2 "strata drain without a node" -- "$strata" drain $n
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
