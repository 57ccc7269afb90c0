/*
 * indexer.cu - indexer scores (fp32 keys on CUDA cores; fp8 e4m3 keys on
 * tensor cores), block summaries of fp8 keys, and block bounds.
 */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kn_cuda.h"
#include "kn_fp8.cuh"

#define KI_TILE 128 /* keys per CTA in the fp32 kernel */

/* fp32: one thread per key; the tile of keys is staged transposed in shared memory. */
__global__ void ki_scores_f32_kernel(const float *q, const float *w, int n_heads, int dim,
                                     const float *keys, int n_keys, float *scores)
{
    extern __shared__ float ki_sm[];
    float *qs = ki_sm;              /* n_heads x dim */
    float *ws = qs + n_heads * dim; /* n_heads */
    float *ks = ws + n_heads;       /* dim x KI_TILE */
    const int t = blockIdx.y, key0 = blockIdx.x * KI_TILE;
    for (int i = threadIdx.x; i < n_heads * dim; i += blockDim.x) {
        qs[i] = q[(size_t)t * n_heads * dim + i];
    }
    for (int i = threadIdx.x; i < n_heads; i += blockDim.x) {
        ws[i] = w[(size_t)t * n_heads + i];
    }
    for (int i = threadIdx.x; i < KI_TILE * dim; i += blockDim.x) {
        int r = i / dim, c = i % dim;
        ks[c * KI_TILE + r] = key0 + r < n_keys ? keys[(size_t)(key0 + r) * dim + c] : 0.0f;
    }
    __syncthreads();
    const int r = threadIdx.x;
    if (key0 + r >= n_keys) {
        return;
    }
    float total = 0.0f;
    for (int j = 0; j < n_heads; j++) {
        float d = 0.0f;
        for (int c = 0; c < dim; c++) {
            d = fmaf(qs[j * dim + c], ks[c * KI_TILE + r], d);
        }
        if (d > 0.0f) {
            total = fmaf(ws[j], d, total);
        }
    }
    scores[(size_t)t * n_keys + key0 + r] = total;
}

extern "C" st_status_t st_cuda_indexer_scores(const float *q, const float *w, int n_q, int n_heads,
                                              int dim, const float *keys, int n_keys, float *scores,
                                              void *stream)
{
    if (!q || !w || !keys || !scores || n_q <= 0 || n_heads <= 0 || dim <= 0 || n_keys <= 0) {
        return ST_ERR_INVALID;
    }
    size_t smem = sizeof(float) * ((size_t)n_heads * dim + n_heads + (size_t)dim * KI_TILE);
    if (smem > 200 * 1024) {
        return ST_ERR_INVALID;
    }
    cudaFuncSetAttribute(ki_scores_f32_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)smem);
    dim3 grid((n_keys + KI_TILE - 1) / KI_TILE, n_q);
    ki_scores_f32_kernel<<<grid, KI_TILE, smem, KN_STREAM(stream)>>>(q, w, n_heads, dim, keys,
                                                                     n_keys, scores);
    return kn_launch_status("indexer_scores_f32");
}

/* fp8: a warp scores 16 keys per step on tensor cores (kn_fp8.cuh). */
__global__ void __launch_bounds__(128)
    ki_scores_fp8_kernel(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                         const float *key_scale, int n_keys, float *scores)
{
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    uint32_t bq[8][8][2];
    float wl[8][2];
    kf_load_query(q + (size_t)t * n_heads * KF_DIM, w + (size_t)t * n_heads, n_heads, lane, bq, wl);
    const int n_groups = (n_keys + 15) / 16;
    const int warp_id = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int n_warps = (gridDim.x * blockDim.x) >> 5;
    for (int grp = warp_id; grp < n_groups; grp += n_warps) {
        float s0, s1;
        int r0 = grp * 16 + (lane >> 2), r1 = r0 + 8;
        kf_score16(keys8, key_scale, n_keys, grp * 16, lane, bq, wl, &s0, &s1);
        if ((lane & 3) == 0) {
            if (r0 < n_keys) {
                scores[(size_t)t * n_keys + r0] = s0;
            }
            if (r1 < n_keys) {
                scores[(size_t)t * n_keys + r1] = s1;
            }
        }
    }
}

extern "C" st_status_t st_cuda_indexer_scores_fp8(const float *q, const float *w, int n_q,
                                                  int n_heads, int dim, const uint8_t *keys8,
                                                  const float *key_scale, int n_keys, float *scores,
                                                  void *stream)
{
    if (!q || !w || !keys8 || !key_scale || !scores || n_q <= 0 || n_heads <= 0 ||
        n_heads > KF_HEADS || dim != KF_DIM || n_keys <= 0) {
        return ST_ERR_INVALID;
    }
    int n_groups = (n_keys + 15) / 16;
    int blocks = (n_groups + 3) / 4;
    int max_blocks = 132 * 8;
    dim3 grid(blocks < max_blocks ? blocks : max_blocks, n_q);
    ki_scores_fp8_kernel<<<grid, 128, 0, KN_STREAM(stream)>>>(q, w, n_heads, keys8, key_scale,
                                                              n_keys, scores);
    return kn_launch_status("indexer_scores_fp8");
}

/*
 * Bounds: one warp per block; lane holds dim/32 channels. The margin covers the
 * fp32 rounding of the scores and the fp16 rounding of q in the fp8 kernel
 * (relative 2^-11 per q entry): (2*(dim + n_heads + 2)*2^-23 + 2^-10) * sum|w||q||k|.
 */
__global__ void ki_bounds_kernel(const float *q, const float *w, int n_heads, int dim,
                                 const float *summary, int n_blocks, float *bound)
{
    const int lane = threadIdx.x & 31;
    const int blk = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (blk >= n_blocks) {
        return;
    }
    const float *mn = summary + (size_t)blk * 2 * dim, *mx = mn + dim;
    float ub = 0.0f, absum = 0.0f;
    for (int j = 0; j < n_heads; j++) {
        float hi = 0.0f, lo = 0.0f, ab = 0.0f;
        for (int c = lane; c < dim; c += 32) {
            float qc = q[(size_t)j * dim + c];
            float a = qc * mn[c], z = qc * mx[c];
            hi += fmaxf(a, z);
            lo += fminf(a, z);
            ab += fabsf(qc) * fmaxf(fabsf(mn[c]), fabsf(mx[c]));
        }
        for (int o = 16; o > 0; o >>= 1) {
            hi += __shfl_xor_sync(0xffffffffu, hi, o);
            lo += __shfl_xor_sync(0xffffffffu, lo, o);
            ab += __shfl_xor_sync(0xffffffffu, ab, o);
        }
        float wj = w[j];
        ub += wj * fmaxf(wj >= 0.0f ? hi : lo, 0.0f);
        absum += fabsf(wj) * ab;
    }
    if (lane == 0) {
        float gamma = 2.0f * (dim + n_heads + 2) * FLT_EPSILON + 1.0f / 1024.0f;
        bound[blk] = ub + gamma * absum;
    }
}

extern "C" st_status_t st_cuda_block_bounds(const float *q, const float *w, int n_heads, int dim,
                                            const float *summary, int n_blocks, float *bound,
                                            void *stream)
{
    if (!q || !w || !summary || !bound || n_heads <= 0 || dim <= 0 || n_blocks <= 0) {
        return ST_ERR_INVALID;
    }
    int threads = 256, blocks = (n_blocks * 32 + threads - 1) / threads;
    ki_bounds_kernel<<<blocks, threads, 0, KN_STREAM(stream)>>>(q, w, n_heads, dim, summary,
                                                                n_blocks, bound);
    return kn_launch_status("block_bounds");
}

/* Summaries of fp8 keys (dequantised by their row scale): one CTA per block, a thread a channel. */
__global__ void ki_summary_fp8_kernel(const uint8_t *keys8, const float *key_scale, int n_keys,
                                      int dim, int block_rows, float *summary)
{
    const int blk = blockIdx.x;
    float *mn = summary + (size_t)blk * 2 * dim, *mx = mn + dim;
    int end = min((blk + 1) * block_rows, n_keys);
    for (int c = threadIdx.x; c < dim; c += blockDim.x) {
        float lo = INFINITY, hi = -INFINITY;
        for (int r = blk * block_rows; r < end; r++) {
            __nv_fp8_e4m3 v;
            v.__x = keys8[(size_t)r * dim + c];
            float f = (float)v * key_scale[r];
            lo = fminf(lo, f);
            hi = fmaxf(hi, f);
        }
        mn[c] = lo;
        mx[c] = hi;
    }
}

extern "C" st_status_t st_cuda_block_summary_fp8(const uint8_t *keys8, const float *key_scale,
                                                 int n_keys, int dim, int block_rows,
                                                 float *summary, void *stream)
{
    if (!keys8 || !key_scale || !summary || n_keys <= 0 || dim <= 0 || block_rows <= 0) {
        return ST_ERR_INVALID;
    }
    int n_blocks = (n_keys + block_rows - 1) / block_rows;
    int threads = dim < 256 ? dim : 256;
    ki_summary_fp8_kernel<<<n_blocks, threads, 0, KN_STREAM(stream)>>>(keys8, key_scale, n_keys,
                                                                       dim, block_rows, summary);
    return kn_launch_status("block_summary_fp8");
}
