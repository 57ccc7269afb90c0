#!/usr/bin/env bash
# Installs the build into a temporary prefix with `cmake --install`, checks what
# it installed (check_exports.py: the installed libraries export only the ST_API
# functions of the installed headers, and every installed header has its
# library), then compiles and runs a program against it through pkg-config, as
# a user would.
set -euo pipefail
build_dir="$1"
src_dir="$2"
cflags="${3:-}" # the sanitizer build passes its -fsanitize flags: the library carries them
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build_dir" --prefix "$prefix" > "$prefix/install.log"
test -f "$prefix/include/strata/status.h"
test -f "$prefix/include/strata/hash.h"
/usr/bin/python3 "$src_dir/tests/install/check_exports.py" "$prefix"
# The installed commands run (strata-engine links libstrata-engine statically).
# grep reads to the end: -q would close the pipe early, and under pipefail the
# writer's SIGPIPE (a --help longer than the pipe buffer) would fail the test.
"$prefix/bin/strata-engine" --help | grep "^Usage: strata-engine" >/dev/null
libdir="$(dirname "$(find "$prefix" -name strata.pc | head -1)")/.."
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2086
cc $cflags $(pkg-config --cflags strata) -o "$prefix/hello" "$src_dir/tests/install/hello.c" \
    $(pkg-config --libs strata) -Wl,-rpath,"$libdir"
out="$("$prefix/hello")"
echo "$out"
case "$out" in
*"chain of 2 blocks"*"invalid argument"*) echo "1 passed, 0 failed" ;;
*) echo "unexpected output from the installed library"; exit 1 ;;
esac
