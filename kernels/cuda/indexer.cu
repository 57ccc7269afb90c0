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

/*
 * fp8: each warp streams groups of 16 keys through tensor cores (kn_fp8.cuh): with WG (and an
 * sm_90a build) a warpgroup scores 64 keys per step with wgmma, else each warp with mma.sync.
 */
template <bool WG>
__global__ void __launch_bounds__(128, WG ? 4 : 2)
    ki_scores_fp8_kernel(const float *q, const float *w, int n_heads, const uint8_t *keys8,
                         const float *key_scale, int n_keys, float *scores)
{
    extern __shared__ __align__(128) unsigned char ki_dyn[];
    const int t = blockIdx.y, lane = threadIdx.x & 31;
    float *out = scores + (size_t)t * n_keys;
    const int n_groups = (n_keys + 15) / 16;
    auto emit = [&](int, int g, float s0, float s1) { /* item i is group g = i */
                                                      int r0 = g * 16 + (lane >> 2), r1 = r0 + 8;
                                                      if ((lane & 3) == 0) {
                                                          if (r0 < n_keys) {
                                                              out[r0] = s0;
                                                          }
                                                          if (r1 < n_keys) {
                                                              out[r1] = s1;
                                                          }
                                                      }
    };
    auto ident = [](int i) { return i; };
    const float *qt = q + (size_t)t * n_heads * KF_DIM, *wt = w + (size_t)t * n_heads;
#if KF_WGMMA
    if (WG) {
        kf_wg_score(qt, wt, n_heads, keys8, key_scale, n_keys, 0, n_groups, ident, emit, ki_dyn);
        return;
    }
#endif
    kf_mma_score(qt, wt, n_heads, keys8, key_scale, n_keys, 0, n_groups, ident, emit, ki_dyn);
}

/* The scorer the launches use: wgmma unless STRATA_KN_SCORER=mma. */
static bool ki_use_wgmma(void)
{
    return !kn_variant_is("STRATA_KN_SCORER", "mma");
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
    const bool wg = ki_use_wgmma();
    int max_blocks = kn_num_sms() * (wg ? 4 : 2);
    dim3 grid(blocks < max_blocks ? blocks : max_blocks, n_q);
    if (wg) {
        cudaFuncSetAttribute(ki_scores_fp8_kernel<true>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, KF_WG_SMEM);
        ki_scores_fp8_kernel<true><<<grid, 128, KF_WG_SMEM, KN_STREAM(stream)>>>(
            q, w, n_heads, keys8, key_scale, n_keys, scores);
    } else {
        ki_scores_fp8_kernel<false><<<grid, 128, KF_MMA_SMEM, KN_STREAM(stream)>>>(
            q, w, n_heads, keys8, key_scale, n_keys, scores);
    }
    return kn_launch_status("indexer_scores_fp8");
}

/*
 * Bounds. With mid = (min + max)/2 and rad = (max - min)/2 per channel,
 * hi_j = q_j.mid + |q_j|.rad and lo_j = q_j.mid - |q_j|.rad: two dot products per
 * head. One thread per block keeps both for all 64 heads; q and w sit in shared
 * memory (every lane reads the same q, a broadcast), the summaries are staged 32
 * channels at a time. The margin covers the fp32 rounding of the scores and of
 * this sum, and the fp16 rounding of q in the fp8 scorer:
 * gamma * (sum_j |w_j| |q_j|.rad + sum_j |w_j| |q_j|_1 * max_c |mid_c|) with
 * gamma = 2 (dim + n_heads + 2) 2^-23 + 2^-10, at least the margin of docs/kernels.md
 * since |q_j|.|mid| <= |q_j|_1 max |mid|.
 */
#define KB_BLOCKS 64 /* blocks per CTA; two threads per block, one per half of each 32 channels */
#define KB_CCH    32 /* channels staged at a time */

__global__ void __launch_bounds__(2 * KB_BLOCKS)
    ki_bounds_kernel(const float *q, const float *w, int n_heads, int dim, const float *summary,
                     int n_blocks, float *bound)
{
    extern __shared__ float kb_sm[];
    float *qs = kb_sm;         /* 64 x dim, heads past n_heads are 0 */
    float *ws = qs + 64 * dim; /* 64 */
    float *mids = ws + 64;     /* KB_CCH x KB_BLOCKS */
    float *rads = mids + KB_CCH * KB_BLOCKS;
    float *wq1 = rads + KB_CCH * KB_BLOCKS; /* 1 */
    const int tid = threadIdx.x, blk0 = blockIdx.x * KB_BLOCKS;
    const int bl = tid >> 1, half = tid & 1;
    if (tid == 0) {
        *wq1 = 0.0f;
    }
    float l1 = 0.0f; /* this thread's share of sum_j |w_j| |q_j|_1 */
#pragma unroll 8
    for (int i = tid * 4; i < 64 * dim; i += blockDim.x * 4) {
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float wj = 0.0f;
        if (i / dim < n_heads) {
            v = *reinterpret_cast<const float4 *>(q + i);
            wj = fabsf(w[i / dim]);
        }
        *reinterpret_cast<float4 *>(qs + i) = v;
        l1 += wj * (fabsf(v.x) + fabsf(v.y) + fabsf(v.z) + fabsf(v.w));
    }
    if (tid < 64) {
        ws[tid] = tid < n_heads ? w[tid] : 0.0f;
    }
    for (int o = 16; o > 0; o >>= 1) {
        l1 += __shfl_xor_sync(0xffffffffu, l1, o);
    }
    __syncthreads();
    if ((tid & 31) == 0) {
        atomicAdd(wq1, l1);
    }
    float A[64], B[64], maxmid = 0.0f;
#pragma unroll
    for (int j = 0; j < 64; j++) {
        A[j] = 0.0f;
        B[j] = 0.0f;
    }
    /* 64 blocks x 32 channels of min and max as float4, 8 loads per thread, fetched one chunk
     * ahead into registers. */
    float4 mn4[4], mx4[4];
#pragma unroll
    for (int u = 0; u < 4; u++) {
        int i = tid + u * 2 * KB_BLOCKS, b = i >> 3, c = (i & 7) * 4, gb = blk0 + b;
        mn4[u] = mx4[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (gb < n_blocks) {
            const float *src = summary + (size_t)gb * 2 * dim + c;
            mn4[u] = *reinterpret_cast<const float4 *>(src);
            mx4[u] = *reinterpret_cast<const float4 *>(src + dim);
        }
    }
    for (int c0 = 0; c0 < dim; c0 += KB_CCH) {
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; u++) {
            int i = tid + u * 2 * KB_BLOCKS, b = i >> 3, c = (i & 7) * 4;
            const float mn[4] = {mn4[u].x, mn4[u].y, mn4[u].z, mn4[u].w};
            const float mx[4] = {mx4[u].x, mx4[u].y, mx4[u].z, mx4[u].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                mids[(c + e) * KB_BLOCKS + (b ^ (c + e))] = 0.5f * (mn[e] + mx[e]);
                rads[(c + e) * KB_BLOCKS + (b ^ (c + e))] = 0.5f * (mx[e] - mn[e]);
            }
        }
        __syncthreads();
        if (c0 + KB_CCH < dim) {
#pragma unroll
            for (int u = 0; u < 4; u++) {
                int i = tid + u * 2 * KB_BLOCKS, b = i >> 3, c = (i & 7) * 4, gb = blk0 + b;
                if (gb < n_blocks) {
                    const float *src = summary + (size_t)gb * 2 * dim + c0 + KB_CCH + c;
                    mn4[u] = *reinterpret_cast<const float4 *>(src);
                    mx4[u] = *reinterpret_cast<const float4 *>(src + dim);
                }
            }
        }
        /* This thread: channels half*16 .. half*16+15 of the 32 staged. */
        for (int c = half * 16; c < half * 16 + 16; c += 4) {
            float m4[4], r4[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                m4[e] = mids[(c + e) * KB_BLOCKS + (bl ^ (c + e))];
                r4[e] = rads[(c + e) * KB_BLOCKS + (bl ^ (c + e))];
                maxmid = fmaxf(maxmid, fabsf(m4[e]));
            }
#pragma unroll
            for (int j = 0; j < 64; j++) {
                float4 q4 = *reinterpret_cast<const float4 *>(&qs[j * dim + c0 + c]);
                A[j] = fmaf(q4.x, m4[0], A[j]);
                A[j] = fmaf(q4.y, m4[1], A[j]);
                A[j] = fmaf(q4.z, m4[2], A[j]);
                A[j] = fmaf(q4.w, m4[3], A[j]);
                B[j] = fmaf(fabsf(q4.x), r4[0], B[j]);
                B[j] = fmaf(fabsf(q4.y), r4[1], B[j]);
                B[j] = fmaf(fabsf(q4.z), r4[2], B[j]);
                B[j] = fmaf(fabsf(q4.w), r4[3], B[j]);
            }
        }
    }
    float ub = 0.0f, absum = 0.0f;
#pragma unroll
    for (int j = 0; j < 64; j++) {
        float a = A[j] + __shfl_xor_sync(0xffffffffu, A[j], 1);
        float b = B[j] + __shfl_xor_sync(0xffffffffu, B[j], 1);
        float wj = ws[j];
        ub += wj * fmaxf(wj >= 0.0f ? a + b : a - b, 0.0f);
        absum += fabsf(wj) * b;
    }
    maxmid = fmaxf(maxmid, __shfl_xor_sync(0xffffffffu, maxmid, 1));
    if (half == 0 && blk0 + bl < n_blocks) {
        float gamma = 2.0f * (dim + n_heads + 2) * FLT_EPSILON + 1.0f / 1024.0f;
        bound[blk0 + bl] = ub + gamma * (absum + *wq1 * maxmid);
    }
}

extern "C" st_status_t st_cuda_block_bounds(const float *q, const float *w, int n_heads, int dim,
                                            const float *summary, int n_blocks, float *bound,
                                            void *stream)
{
    if (!q || !w || !summary || !bound || n_heads <= 0 || n_heads > 64 || dim <= 0 ||
        dim % KB_CCH != 0 || dim > 512 || n_blocks <= 0) {
        return ST_ERR_INVALID;
    }
    size_t smem = sizeof(float) * (64 * (size_t)dim + 64 + 2 * KB_CCH * KB_BLOCKS + 1);
    cudaFuncSetAttribute(ki_bounds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    int blocks = (n_blocks + KB_BLOCKS - 1) / KB_BLOCKS;
    ki_bounds_kernel<<<blocks, 2 * KB_BLOCKS, smem, KN_STREAM(stream)>>>(q, w, n_heads, dim,
                                                                         summary, n_blocks, bound);
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
