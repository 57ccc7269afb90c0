/*
 * rmsnorm.cu - RMSNorm fused with the residual add, fp32, one block per row.
 */
#include "kn_cuda.h"

__global__ void kn_rmsnorm_kernel(const float *x, float *residual, const float *weight, int d,
                                  float eps, float *out)
{
    __shared__ float part[32];
    size_t base = (size_t)blockIdx.x * d;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        float r = residual[base + c] + x[base + c];
        residual[base + c] = r;
        ss += r * r;
    }
    for (int o = 16; o > 0; o >>= 1) {
        ss += __shfl_xor_sync(0xffffffffu, ss, o);
    }
    if ((threadIdx.x & 31) == 0) {
        part[threadIdx.x >> 5] = ss;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) {
            v += __shfl_xor_sync(0xffffffffu, v, o);
        }
        if (threadIdx.x == 0) {
            part[0] = v;
        }
    }
    __syncthreads();
    float inv = rsqrtf(part[0] / (float)d + eps);
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
        out[base + c] = residual[base + c] * inv * weight[c];
    }
}

extern "C" st_status_t st_cuda_rmsnorm_residual(const float *x, float *residual,
                                                const float *weight, int n, int d, float eps,
                                                float *out, void *stream)
{
    if (!x || !residual || !weight || !out || n <= 0 || d <= 0 || !(eps >= 0.0f)) {
        return ST_ERR_INVALID;
    }
    kn_rmsnorm_kernel<<<n, 256, 0, KN_STREAM(stream)>>>(x, residual, weight, d, eps, out);
    return kn_launch_status("rmsnorm_residual");
}
