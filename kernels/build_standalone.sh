#!/bin/sh
# Builds the kernels, the GPU test and both kernel benchmarks with plain gcc
# and nvcc, without the rest of the project (and its pkg-config dependencies).
# This is how the GPU numbers of docs/performance.md are reproduced on a
# machine with only the CUDA toolkit:
#   sh kernels/build_standalone.sh [outdir]   (run from the repository root)
#   outdir/test_kernels_gpu; outdir/bench_kernels_gpu; outdir/bench_kernels
set -e
out=${1:-build-standalone}
cc=${CC:-gcc}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
mkdir -p "$out"
cflags="-O3 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Iinclude -Ikernels -Ibench"
for f in simd ref indexer attn kda rmsnorm; do
    $cc $cflags -DSTRATA_KN_AVX2 -c kernels/$f.c -o "$out/kn_$f.o"
done
$cc $cflags -mavx2 -mfma -c kernels/simd_avx2.c -o "$out/kn_simd_avx2.o"
$cc $cflags -c bench/bench_util.c -o "$out/bench_util.o"
$cc $cflags -c bench/bench_kernels.c -o "$out/bench_kernels.o"
$cc $cflags -o "$out/bench_kernels" "$out/bench_kernels.o" "$out"/kn_*.o "$out/bench_util.o" -lm
if [ ! -x "$nvcc" ]; then
    echo "nvcc not found at $nvcc: built the C kernels and bench_kernels only"
    exit 0
fi
# sm_90a machine code (wgmma) plus sm_90 PTX (the mma.sync paths) for other cards;
# CUARCH overrides it (CUARCH="-gencode arch=compute_90,code=sm_90" tests the fallback).
cuarch=${CUARCH:-"-gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90"}
cuflags="$cuarch -O3 --use_fast_math -lineinfo -Iinclude"
for f in common indexer attn kda rmsnorm select; do
    $nvcc $cuflags -c kernels/cuda/$f.cu -o "$out/cu_$f.o" &
done
wait
cuinc=$(dirname "$nvcc")/../include
$cc $cflags -I"$cuinc" -c tests/gpu/test_kernels_gpu.c -o "$out/test_kernels_gpu.o"
$cc $cflags -I"$cuinc" -c bench/bench_kernels_gpu.c -o "$out/bench_kernels_gpu.o"
$nvcc -o "$out/test_kernels_gpu" "$out/test_kernels_gpu.o" "$out"/cu_*.o "$out"/kn_*.o -lm
$nvcc -o "$out/bench_kernels_gpu" "$out/bench_kernels_gpu.o" "$out/bench_util.o" \
    "$out"/cu_*.o "$out"/kn_*.o -lcublas -lm
echo "built $out/test_kernels_gpu $out/bench_kernels_gpu $out/bench_kernels"
