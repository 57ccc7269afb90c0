/*
 * kn_cuda.h - what the CUDA kernels share: launch checking and the stream cast.
 */
#ifndef STRATA_KN_CUDA_H
#define STRATA_KN_CUDA_H

#include <cuda_runtime.h>
#include <stdio.h>

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

#endif
