#!/bin/bash
# Copies stratad, libstrata and the shared libraries they load (not glibc, libstdc++ or
# libgcc_s: the target machine's own must be used) plus UCX's transport modules
# into one folder, for a machine that has no UCX, gRPC or LMDB (docs/transformers.md,
# "Carrying the binaries"). Usage: scripts/hf-carry.sh BUILD_DIR DEST
# On the target: export LD_LIBRARY_PATH=DEST/lib UCX_MODULE_DIR=DEST/lib/ucx
#                STRATA_LIB=DEST/lib/libstrata.so.0; DEST/stratad --listen ...
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 BUILD_DIR DEST" >&2
    exit 2
fi
build=$1 dest=$2
for f in "$build/cached/stratad" "$build/client/libstrata.so.0"; do
    [ -f "$f" ] || { echo "$0: $f not built (cmake --build $build --target stratad strata)" >&2; exit 1; }
done
mkdir -p "$dest/lib/ucx"
cp -L "$build/cached/stratad" "$dest/"
cp -L "$build/client/libstrata.so.0" "$dest/lib/"
skip='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
ldd "$build/cached/stratad" "$build/client/libstrata.so.0" | awk '/=> \//{print $3}' | sort -u |
    while read -r lib; do
        base=$(basename "$lib")
        [[ $base =~ $skip ]] || cp -L "$lib" "$dest/lib/$base"
    done
ucx=$(dirname "$(ldd "$build/client/libstrata.so.0" | awk '/libucp/{print $3}')")/ucx
if [ -d "$ucx" ]; then
    for m in "$ucx"/*.so.0; do
        cp -L "$m" "$dest/lib/ucx/"
        ldd "$m" | awk '/=> \//{print $3}' | while read -r lib; do
            base=$(basename "$lib")
            [[ $base =~ $skip ]] || [ -f "$dest/lib/$base" ] || cp -L "$lib" "$dest/lib/$base"
        done
    done
fi
du -sh "$dest"
