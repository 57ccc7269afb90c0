/*
 * kn_cuda.h - what the CUDA kernels share: launch checking, the stream cast and the zeroing
 * of per-thread fragment arrays.
 */
#ifndef STRATA_KN_CUDA_H
#define STRATA_KN_CUDA_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/kernels.h"

#define KN_STREAM(s) ((cudaStream_t)(s))

/* Checks the last launch; logs the CUDA error with the kernel's name. */
static inline st_status_t kn_launch_status(const char *what)
{
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) {
        fprintf(stderr, "strata kernels: launch failed kernel=%s error=%s\n", what,
                cudaGetErrorString(err));
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

/*
 * Variant knobs for benchmarks and tests (docs/kernels.md): the environment variable `name`
 * equals `value`. Read at each launch, so a test can switch between runs.
 */
static inline int kn_variant_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

/* The environment variable `name` as a positive integer, else dflt. */
static inline int kn_variant_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    int x = v ? atoi(v) : 0;
    return x > 0 ? x : dflt;
}

/* Multiprocessors of the current device (132 on an H200), read once. */
static inline int kn_num_sms(void)
{
    static int n = 0;
    if (n == 0) {
        int dev = 0, x = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&x, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
            x > 0) {
            n = x;
        } else {
            n = 132;
        }
    }
    return n;
}

/* Zeroes a thread's accumulator fragments (unrolled: they live in registers). */
template <int M, int N> __device__ __forceinline__ void kn_zero(float (&a)[M][N])
{
#pragma unroll
    for (int i = 0; i < M; i++)
#pragma unroll
        for (int j = 0; j < N; j++)
            a[i][j] = 0.0f;
}

template <int L, int M, int N> __device__ __forceinline__ void kn_zero(float (&a)[L][M][N])
{
#pragma unroll
    for (int i = 0; i < L; i++)
        kn_zero(a[i]);
}

#endif
