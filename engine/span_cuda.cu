/*
 * span_cuda.cu - the kernels of a prefill span on the device (declared in
 * en_cuda.h, driven by engine/prefill_cuda.c): fp32 matrix products over the
 * span's rows, the rope of the latent rows, KDA's gates, the MoE routing,
 * gate and combination. Every sum runs in a fixed order that depends on the
 * shapes alone, so a span repeats itself bit for bit and a token's products
 * do not depend on the span around it.
 */
#include <cuda_runtime.h>
#include <math.h>

#include "en_cuda.h"

#define EN_MM_TR     32   /* rows of a tile */
#define EN_MM_TO     64   /* outputs of a tile */
#define EN_MM_TI     32   /* inputs per shared-memory step */
#define EN_MM_RPT    8    /* rows per thread: blockDim = (TO, TR / RPT) */
#define EN_MM_SPLIT  2048 /* inputs per split of a long input */
#define EN_MOE_K_MAX 16

/* ------------------------------------------------------------ matmul -- */

/*
 * Splits of the input dimension, one per EN_MM_SPLIT inputs: a long input
 * (the DSA output projection's 64 x 512) would otherwise leave few blocks
 * each a long loop. A function of the shape alone, never of n, so a token's
 * row is the same whatever span it is computed in.
 */
static int en_mm_splits(size_t n, int in, int out)
{
    int s = in / EN_MM_SPLIT, most = (in + EN_MM_TI - 1) / EN_MM_TI;

    (void)n;
    (void)out;
    s = s < 1 ? 1 : s;
    return s < most ? s : most;
}

extern "C" size_t en_cu_matmul_scratch(size_t n, int in, int out)
{
    int s = en_mm_splits(n, in, out);

    return s > 1 ? (size_t)s * n * (size_t)out : 0;
}

/* One tile of Y (or of split z's partial): inputs [i0, i1) in ascending order. */
__global__ void en_mm_kernel(const float *__restrict__ W, const float *__restrict__ X, int n,
                             int in, int out, int span, float *__restrict__ Y)
{
    __shared__ float xs[EN_MM_TR][EN_MM_TI + 1];
    __shared__ float ws[EN_MM_TI][EN_MM_TO];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * EN_MM_TO + tx;
    const int nt = EN_MM_TO * (EN_MM_TR / EN_MM_RPT);
    const int r0 = blockIdx.y * EN_MM_TR, o = blockIdx.x * EN_MM_TO + tx;
    const int i0 = blockIdx.z * span, i1 = min(in, i0 + span);
    float acc[EN_MM_RPT];

#pragma unroll
    for (int r = 0; r < EN_MM_RPT; r++) {
        acc[r] = 0.0f;
    }
    for (int ib = i0; ib < i1; ib += EN_MM_TI) {
        for (int e = tid; e < EN_MM_TR * EN_MM_TI; e += nt) {
            int r = e / EN_MM_TI, i = e % EN_MM_TI;

            xs[r][i] = r0 + r < n && ib + i < i1 ? X[(size_t)(r0 + r) * in + ib + i] : 0.0f;
        }
        for (int e = tid; e < EN_MM_TI * EN_MM_TO; e += nt) {
            int i = e / EN_MM_TO, c = e % EN_MM_TO, oc = blockIdx.x * EN_MM_TO + c;

            ws[i][c] = ib + i < i1 && oc < out ? W[(size_t)(ib + i) * out + oc] : 0.0f;
        }
        __syncthreads();
        const int steps = min(EN_MM_TI, i1 - ib);

        for (int i = 0; i < steps; i++) {
            float w = ws[i][tx];

#pragma unroll
            for (int r = 0; r < EN_MM_RPT; r++) {
                acc[r] = fmaf(xs[ty * EN_MM_RPT + r][i], w, acc[r]);
            }
        }
        __syncthreads();
    }
    if (o < out) {
        float *y = Y + (size_t)blockIdx.z * (size_t)n * out;

#pragma unroll
        for (int r = 0; r < EN_MM_RPT; r++) {
            int row = r0 + ty * EN_MM_RPT + r;

            if (row < n) {
                y[(size_t)row * out + o] = acc[r];
            }
        }
    }
}

/* Y = the sum of the splits' partials, in split order. */
__global__ void en_mm_reduce(const float *part, int splits, size_t total, float *Y)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;

    if (i >= total) {
        return;
    }
    for (int s = 0; s < splits; s++) {
        acc += part[(size_t)s * total + i];
    }
    Y[i] = acc;
}

extern "C" st_status_t en_cu_matmul(const float *W, const float *X, size_t n, int in, int out,
                                    float *scratch, float *Y, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    int splits = en_mm_splits(n, in, out);
    int span = ((in + splits - 1) / splits + EN_MM_TI - 1) / EN_MM_TI * EN_MM_TI;
    dim3 grid((out + EN_MM_TO - 1) / EN_MM_TO, (unsigned)((n + EN_MM_TR - 1) / EN_MM_TR), splits);
    dim3 block(EN_MM_TO, EN_MM_TR / EN_MM_RPT);

    if (n == 0) {
        return ST_OK;
    }
    splits = (in + span - 1) / span; /* the splits the aligned span leaves */
    grid.z = (unsigned)splits;
    en_mm_kernel<<<grid, block, 0, s>>>(W, X, (int)n, in, out, span, splits > 1 ? scratch : Y);
    if (splits > 1) {
        size_t total = n * (size_t)out;

        en_mm_reduce<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(scratch, splits, total, Y);
    }
    return en_cu_status("engine_matmul");
}

/* --------------------------------------------------------- elementwise -- */

/* The rope part of n rows (stride floats apart, rope values from off) by the tokens' cos/sin
 * tables cs (n x rope: cos of each pair, then sin), unfused as the CPU's en_rope. */
__global__ void en_rope_rows_kernel(float *v, int n, int stride, int off, int rope, const float *cs)
{
    const int t = blockIdx.x, half = rope / 2;
    float *x = v + (size_t)t * stride + off;
    const float *c = cs + (size_t)t * rope;

    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float a = x[2 * i], b = x[2 * i + 1], co = c[i], si = c[half + i];

        x[2 * i] = __fsub_rn(__fmul_rn(a, co), __fmul_rn(b, si));
        x[2 * i + 1] = __fadd_rn(__fmul_rn(a, si), __fmul_rn(b, co));
    }
}

extern "C" st_status_t en_cu_rope_rows(float *v, size_t n, int stride, int off, int rope,
                                       const float *cs, void *stream)
{
    if (n == 0) {
        return ST_OK;
    }
    en_rope_rows_kernel<<<(unsigned)n, 64, 0, (cudaStream_t)stream>>>(v, (int)n, stride, off, rope,
                                                                      cs);
    return en_cu_status("engine_rope_rows");
}

/* KDA's gates: g <- -softplus(g - 1) (n_g values), beta <- sigmoid(beta) (n_b values). */
__global__ void en_gates_kernel(float *g, size_t n_g, float *beta, size_t n_b)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n_g) {
        float x = g[i] - 1.0f;

        g[i] = -(x > 20.0f ? x : log1pf(expf(x)));
    }
    if (i < n_b) {
        beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    }
}

extern "C" st_status_t en_cu_kda_gates(float *g, size_t n_g, float *beta, size_t n_b, void *stream)
{
    size_t n = n_g > n_b ? n_g : n_b;

    en_gates_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(g, n_g, beta,
                                                                                   n_b);
    return en_cu_status("engine_kda_gates");
}

__global__ void en_scale_kernel(float *v, size_t n, float s)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        v[i] *= s;
    }
}

extern "C" st_status_t en_cu_scale(float *v, size_t n, float s, void *stream)
{
    en_scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(v, n, s);
    return en_cu_status("engine_scale");
}

/* ---------------------------------------------------------------- MoE -- */

/* Per token: the k largest of E router logits (ties: lower index), softmax over them. */
__global__ void en_route_kernel(const float *logits, int n, int E, int k, int *idx, float *wt)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    const float *l = logits + (size_t)t * E;
    int *ix = idx + (size_t)t * k;
    float *w = wt + (size_t)t * k, mx, sum = 0.0f;

    if (t >= n) {
        return;
    }
    for (int j = 0; j < k; j++) {
        int best = -1;

        for (int e = 0; e < E; e++) {
            int taken = 0;

            for (int u = 0; u < j; u++) {
                taken |= ix[u] == e;
            }
            if (!taken && (best < 0 || l[e] > l[best])) {
                best = e;
            }
        }
        ix[j] = best;
    }
    mx = l[ix[0]];
    for (int j = 0; j < k; j++) {
        w[j] = expf(l[ix[j]] - mx);
        sum += w[j];
    }
    for (int j = 0; j < k; j++) {
        w[j] /= sum;
    }
}

extern "C" st_status_t en_cu_moe_route(const float *logits, size_t n, int E, int k, int *idx,
                                       float *wt, void *stream)
{
    if (k < 1 || k > EN_MOE_K_MAX || k > E) {
        return ST_ERR_INVALID;
    }
    en_route_kernel<<<(unsigned)((n + 127) / 128), 128, 0, (cudaStream_t)stream>>>(logits, (int)n,
                                                                                   E, k, idx, wt);
    return en_cu_status("engine_moe_route");
}

__global__ void en_silu_kernel(float *h1, const float *h3, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (i < n) {
        float a = h1[i];

        h1[i] = a / (1.0f + expf(-a)) * h3[i];
    }
}

extern "C" st_status_t en_cu_silu_gate(float *h1, const float *h3, size_t n, void *stream)
{
    en_silu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)stream>>>(h1, h3, n);
    return en_cu_status("engine_silu_gate");
}

/* x[t] = sum over j of wt[t][j] * eo[idx[t][j]][t], in routing order (idx NULL: eo[0]). */
__global__ void en_combine_kernel(const float *eo, int n, int d, int k, const int *idx,
                                  const float *wt, float *x)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int t = (int)(i / (size_t)d), c = (int)(i % (size_t)d);
    float acc = 0.0f;

    if (t >= n) {
        return;
    }
    if (!idx) {
        x[i] = eo[i];
        return;
    }
    for (int j = 0; j < k; j++) {
        int e = idx[(size_t)t * k + j];

        acc += wt[(size_t)t * k + j] * eo[((size_t)e * n + t) * d + c];
    }
    x[i] = acc;
}

extern "C" st_status_t en_cu_moe_combine(const float *eo, size_t n, int d, int k, const int *idx,
                                         const float *wt, float *x, void *stream)
{
    size_t total = n * (size_t)d;

    en_combine_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(
        eo, (int)n, d, k, idx, wt, x);
    return en_cu_status("engine_moe_combine");
}
