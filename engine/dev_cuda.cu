/*
 * dev_cuda.cu - the engine's own small CUDA kernels (declared in en_cuda.h):
 * what the device path needs around the kernels of strata_kernels_cuda.
 */
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "en_cuda.h"

#define EN_MV_THREADS 128
#define EN_MV_TARGET  32768 /* threads a matvec aims for */
#define EN_SORT_MAX   8192

extern "C" st_status_t en_cu_status(const char *what)
{
    cudaError_t err = cudaGetLastError();

    if (err != cudaSuccess) {
        fprintf(stderr, "strata engine: launch failed kernel=%s error=%s\n", what,
                cudaGetErrorString(err));
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

/* ------------------------------------------------------------- matvec -- */

static int en_mv_chunks(int in, int out)
{
    int n = EN_MV_TARGET / (out > 0 ? out : 1);
    int most = in / 32 > 0 ? in / 32 : 1;

    n = n < 1 ? 1 : n;
    return n < most ? n : most;
}

extern "C" size_t en_cu_matvec_scratch(int in, int out)
{
    int n = en_mv_chunks(in, out);

    return n > 1 ? (size_t)n * (size_t)out : 0;
}

__global__ void en_mv_kernel(const float *W, const float *x, int in, int out, int chunk, float *y)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    const int i0 = blockIdx.y * chunk, i1 = min(in, i0 + chunk);
    float acc = 0.0f;

    if (o >= out) {
        return;
    }
    for (int i = i0; i < i1; i++) {
        acc = fmaf(x[i], W[(size_t)i * out + o], acc);
    }
    y[(size_t)blockIdx.y * out + o] = acc;
}

__global__ void en_mv_reduce(const float *part, int n, int out, float *y)
{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;

    if (o >= out) {
        return;
    }
    for (int c = 0; c < n; c++) {
        acc += part[(size_t)c * out + o];
    }
    y[o] = acc;
}

extern "C" st_status_t en_cu_matvec(const float *W, const float *x, int in, int out, float *scratch,
                                    float *y, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int n = en_mv_chunks(in, out), chunk = (in + n - 1) / n;
    dim3 grid((out + EN_MV_THREADS - 1) / EN_MV_THREADS, n);

    en_mv_kernel<<<grid, EN_MV_THREADS, 0, s>>>(W, x, in, out, chunk, n > 1 ? scratch : y);
    if (n > 1) {
        en_mv_reduce<<<grid.x, EN_MV_THREADS, 0, s>>>(scratch, n, out, y);
    }
    return en_cu_status("engine_matvec");
}

/* -------------------------------------------------------------- query -- */

/* Token blockIdx.y's heads: its query at qf + y * heads * row, its cos/sin at cs + y * (row - dv). */
__global__ void en_q_kernel(const float *qf, const float *cs, int row, int dv, uint16_t *qb)
{
    const int h = blockIdx.x, half = (row - dv) / 2;
    const size_t tok = (size_t)blockIdx.y * gridDim.x * row;
    const float *q = qf + tok + (size_t)h * row;
    __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(qb) + tok + (size_t)h * row;

    cs += (size_t)blockIdx.y * (size_t)(row - dv);

    for (int c = threadIdx.x; c < row; c += blockDim.x) {
        float v;

        if (c < dv) {
            v = q[c];
        } else {
            int i = (c - dv) / 2;
            float a = q[dv + 2 * i], b = q[dv + 2 * i + 1], co = cs[i], si = cs[half + i];

            /* The CPU's en_rope: a*c - b*s and a*s + b*c, unfused. */
            v = (c - dv) % 2 == 0 ? __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si))
                                  : __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
        }
        o[c] = __float2bfloat16_rn(v);
    }
}

extern "C" st_status_t en_cu_q_bf16(const float *qf, const float *cs, int heads, int row, int dv,
                                    uint16_t *qb, void *stream)
{
    en_q_kernel<<<heads, 128, 0, (cudaStream_t)stream>>>(qf, cs, row, dv, qb);
    return en_cu_status("engine_q_bf16");
}

extern "C" st_status_t en_cu_q_bf16_n(const float *qf, const float *cs, size_t n, int heads,
                                      int row, int dv, uint16_t *qb, void *stream)
{
    dim3 grid((unsigned)heads, (unsigned)n);

    en_q_kernel<<<grid, 128, 0, (cudaStream_t)stream>>>(qf, cs, row, dv, qb);
    return en_cu_status("engine_q_bf16_n");
}

/* ------------------------------------------------------------- ingest -- */

__global__ void en_rows_kernel(const float *src, size_t n, size_t t0, int row, int block,
                               size_t ring, uint16_t *dst)
{
    __nv_bfloat16 *d = reinterpret_cast<__nv_bfloat16 *>(dst);
    const size_t total = n * (size_t)row;

    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t t = t0 + e / (size_t)row, c = e % (size_t)row;
        size_t slot = ring == 0 ? t : (t / (size_t)block) % ring * (size_t)block + t % block;

        d[slot * (size_t)row + c] = __float2bfloat16_rn(src[e]);
    }
}

extern "C" st_status_t en_cu_rows_bf16(const float *src, size_t n, size_t t0, int row, int block,
                                       size_t ring, uint16_t *dst, void *stream)
{
    size_t total = n * (size_t)row;
    int grid = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);

    if (n == 0) {
        return ST_OK;
    }
    en_rows_kernel<<<grid, 256, 0, (cudaStream_t)stream>>>(src, n, t0, row, block, ring, dst);
    return en_cu_status("engine_rows_bf16");
}

/* One warp per key row of 128 channels, 4 per lane. */
__global__ void en_keys_kernel(const float *src, size_t n, size_t t0, uint8_t *keys8, float *scale)
{
    const size_t r = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    float v[4], amax = 0.0f, sc;

    if (r >= n) {
        return;
    }
    for (int j = 0; j < 4; j++) {
        v[j] = src[r * 128 + (size_t)lane * 4 + j];
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o /= 2) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    }
    sc = amax > 0.0f ? amax / 448.0f : 1.0f;
    for (int j = 0; j < 4; j++) {
        keys8[(t0 + r) * 128 + (size_t)lane * 4 + j] =
            (uint8_t)__nv_cvt_float_to_fp8(v[j] / sc, __NV_SATFINITE, __NV_E4M3);
    }
    if (lane == 0) {
        scale[t0 + r] = sc;
    }
}

extern "C" st_status_t en_cu_keys_fp8(const float *src, size_t n, size_t t0, uint8_t *keys8,
                                      float *scale, void *stream)
{
    if (n == 0) {
        return ST_OK;
    }
    en_keys_kernel<<<(unsigned)((n + 7) / 8), 256, 0, (cudaStream_t)stream>>>(src, n, t0, keys8,
                                                                              scale);
    return en_cu_status("engine_keys_fp8");
}

/* ---------------------------------------------------------- selection -- */

/* One CTA: the selection sorted in shared memory (bitonic), then the pointers. */
__global__ void en_ptrs_kernel(const int32_t *sel, int k, int sort, const uint16_t *base, int row,
                               int block, size_t open, const uint16_t **ptrs, uint32_t *n_closed)
{
    __shared__ int32_t v[EN_SORT_MAX];
    __shared__ uint32_t closed;
    int n = 1;

    if (threadIdx.x == 0) {
        closed = 0;
    }
    if (sort) {
        while (n < k) {
            n *= 2;
        }
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            v[i] = i < k ? sel[i] : 0x7fffffff;
        }
        __syncthreads();
        for (int size = 2; size <= n; size *= 2) {
            for (int stride = size / 2; stride > 0; stride /= 2) {
                for (int i = threadIdx.x; i < n; i += blockDim.x) {
                    int j = i ^ stride;

                    if (j > i) {
                        bool up = (i & size) == 0;
                        int32_t a = v[i], b = v[j];

                        if ((a > b) == up) {
                            v[i] = b;
                            v[j] = a;
                        }
                    }
                }
                __syncthreads();
            }
        }
    } else {
        __syncthreads();
    }
    uint32_t mine = 0;
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        int32_t t = sort ? v[i] : sel[i];

        ptrs[i] = base + (size_t)t * (size_t)row;
        mine += (size_t)t / (size_t)block != open;
    }
    atomicAdd(&closed, mine);
    __syncthreads();
    if (threadIdx.x == 0) {
        *n_closed = closed;
    }
}

extern "C" st_status_t en_cu_row_ptrs(const int32_t *sel, int k, const uint16_t *base, int row,
                                      int block, size_t open, const uint16_t **ptrs,
                                      uint32_t *n_closed, void *stream)
{
    en_ptrs_kernel<<<1, 1024, 0, (cudaStream_t)stream>>>(sel, k, k <= EN_SORT_MAX, base, row, block,
                                                         open, ptrs, n_closed);
    return en_cu_status("engine_row_ptrs");
}

/* --------------------------------------------------- tie resolution -- */

#define EN_TIE_CHUNK 1024

extern "C" size_t en_cu_ties_scratch(size_t n)
{
    return 4 * ((n + EN_TIE_CHUNK - 1) / EN_TIE_CHUNK) + 4;
}

/* tau = the lowest score among the selected rows. */
__global__ void en_tau_kernel(const float *scores, const int32_t *sel, int k, float *tau)
{
    __shared__ float red[32];
    float v = INFINITY;

    for (int i = threadIdx.x; i < k; i += blockDim.x) {
        v = fminf(v, scores[sel[i]]);
    }
    for (int o = 16; o > 0; o /= 2) {
        v = fminf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    if (threadIdx.x % 32 == 0) {
        red[threadIdx.x / 32] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++) {
            v = fminf(v, red[w]);
        }
        *tau = v;
    }
}

/* Per chunk of 1024 rows: how many score above tau, how many equal it. */
__global__ void en_tie_count(const float *scores, int n, const float *tau, int *cnt)
{
    const int i = blockIdx.x * EN_TIE_CHUNK + threadIdx.x;
    const float t = *tau, s = i < n ? scores[i] : -INFINITY;
    int gt = __syncthreads_count(i < n && s > t);
    int eq = __syncthreads_count(i < n && s == t);

    if (threadIdx.x == 0) {
        cnt[2 * blockIdx.x] = gt;
        cnt[2 * blockIdx.x + 1] = eq;
    }
}

/* Exclusive offsets of both counts over the chunks, in chunk order; the total above tau last. */
__global__ void en_tie_scan(int *cnt, int n_chunks)
{
    int gt = 0, eq = 0;

    for (int c = 0; c < n_chunks; c++) {
        int g = cnt[2 * c], e = cnt[2 * c + 1];

        cnt[2 * n_chunks + 2 * c] = gt;
        cnt[2 * n_chunks + 2 * c + 1] = eq;
        gt += g;
        eq += e;
    }
    cnt[4 * n_chunks] = gt;
}

/* The rows above tau, then those equal to it by ascending row index, k in all. */
__global__ void en_tie_write(const float *scores, int n, const float *tau, const int *cnt,
                             int n_chunks, int k, int32_t *out)
{
    __shared__ int wg[32], we[32];
    const int i = blockIdx.x * EN_TIE_CHUNK + threadIdx.x, lane = threadIdx.x % 32;
    const int w = threadIdx.x / 32;
    const float t = *tau, s = i < n ? scores[i] : -INFINITY;
    const bool g = i < n && s > t, e = i < n && s == t;
    const unsigned bg = __ballot_sync(0xffffffffu, g), be = __ballot_sync(0xffffffffu, e);
    const unsigned lt = (1u << lane) - 1u;

    if (lane == 0) {
        wg[w] = __popc(bg);
        we[w] = __popc(be);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int a = 0, b = 0;

        for (int j = 0; j < EN_TIE_CHUNK / 32; j++) {
            int x = wg[j], y = we[j];

            wg[j] = a;
            we[j] = b;
            a += x;
            b += y;
        }
    }
    __syncthreads();
    const int total_gt = cnt[4 * n_chunks];
    if (g) {
        int p = cnt[2 * n_chunks + 2 * blockIdx.x] + wg[w] + __popc(bg & lt);

        if (p < k) {
            out[p] = i;
        }
    }
    if (e) {
        int p = total_gt + cnt[2 * n_chunks + 2 * blockIdx.x + 1] + we[w] + __popc(be & lt);

        if (p < k) {
            out[p] = i;
        }
    }
}

extern "C" st_status_t en_cu_select_ties(const float *scores, int n, const int32_t *sel, int k,
                                         int *scratch, float *tau, int32_t *out, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const int chunks = (n + EN_TIE_CHUNK - 1) / EN_TIE_CHUNK;

    en_tau_kernel<<<1, 256, 0, s>>>(scores, sel, k, tau);
    en_tie_count<<<chunks, EN_TIE_CHUNK, 0, s>>>(scores, n, tau, scratch);
    en_tie_scan<<<1, 1, 0, s>>>(scratch, chunks);
    en_tie_write<<<chunks, EN_TIE_CHUNK, 0, s>>>(scores, n, tau, scratch, chunks, k, out);
    return en_cu_status("engine_select_ties");
}
