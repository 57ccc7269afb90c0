/*
 * kda.cu - KDA on the GPU, dk = dv = 128, fp32 state. One CTA of 128 threads
 * per head; thread e keeps column e of the state S (128 values) in registers.
 * The decode step reads and writes the state once. The chunked prefill follows
 * the same WY/UT form as kernels/kda.c (docs/kernels.md), chunk 64.
 */
#include <math.h>

#include "kn_cuda.h"

#define KK_D 128
#define KK_C 64

/*
 * G_a - G_b of the chunk's cumulative log-decay. The sums reach -320, where a
 * float ulp is 3e-5; kept as hi + lo pairs, their difference is good to an ulp
 * of itself, which is what e^(G_a - G_b) near 1 needs (kernels/kda.c does the same).
 */
#define KK_GDIFF(sm, a, b, c) (((sm)->G[a][c] - (sm)->G[b][c]) + ((sm)->Gl[a][c] - (sm)->Gl[b][c]))

/* Sum of v over the CTA's 128 threads; red holds 4 floats. */
__device__ __forceinline__ float kk_sum128(float v, float *red)
{
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    __syncthreads();
    if ((threadIdx.x & 31) == 0) {
        red[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    return red[0] + red[1] + red[2] + red[3];
}

__global__ void __launch_bounds__(KK_D)
    kk_decode_kernel(float *state, const float *q, const float *k, const float *v, const float *g,
                     const float *beta, float g_lo, float *out)
{
    __shared__ float kn[KK_D], qn[KK_D], a[KK_D], red[4];
    const int h = blockIdx.x, e = threadIdx.x;
    const size_t off = (size_t)h * KK_D;
    float qe = q[off + e], ke = k[off + e];
    float nq = kk_sum128(qe * qe, red);
    float nk = kk_sum128(ke * ke, red);
    qn[e] = qe * rsqrtf(nq + 1e-12f);
    kn[e] = ke * rsqrtf(nk + 1e-12f);
    a[e] = expf(fmaxf(g[off + e], g_lo));
    __syncthreads();
    float *S = state + (size_t)h * KK_D * KK_D;
    float s[KK_D];
    float pred = 0.0f;
#pragma unroll
    for (int c = 0; c < KK_D; c++) {
        s[c] = S[(size_t)c * KK_D + e] * a[c];
        pred = fmaf(kn[c], s[c], pred);
    }
    float u = beta[h] * (v[off + e] - pred);
    float o = 0.0f;
#pragma unroll
    for (int c = 0; c < KK_D; c++) {
        s[c] = fmaf(kn[c], u, s[c]);
        o = fmaf(qn[c], s[c], o);
        S[(size_t)c * KK_D + e] = s[c];
    }
    out[off + e] = o;
}

extern "C" st_status_t st_cuda_kda_decode(float *state, const float *q, const float *k,
                                          const float *v, const float *g, const float *beta,
                                          int n_heads, int dk, int dv, float g_lo, float *out,
                                          void *stream)
{
    if (!state || !q || !k || !v || !g || !beta || !out || n_heads <= 0 || dk != KK_D ||
        dv != KK_D || !(g_lo <= 0.0f)) {
        return ST_ERR_INVALID;
    }
    kk_decode_kernel<<<n_heads, KK_D, 0, KN_STREAM(stream)>>>(state, q, k, v, g, beta, g_lo, out);
    return kn_launch_status("kda_decode");
}

struct kk_smem {
    float qn[KK_C][KK_D];
    float kn[KK_C][KK_D]; /* normalised k; at the end of a chunk k * exp(G_C - G_j) */
    float G[KK_C][KK_D];  /* cumulative log-decay within the chunk, as G + Gl (two-sum) */
    float Gl[KK_C][KK_D];
    float M[KK_C][KK_C];
    float P[KK_C][KK_C];
    float u[KK_C][KK_D];
    float beta[KK_C];
    float red[4];
};

__global__ void __launch_bounds__(KK_D)
    kk_prefill_kernel(float *state, const float *q, const float *k, const float *v, const float *g,
                      const float *beta, int n_tok, int n_heads, float g_lo, float *out)
{
    extern __shared__ __align__(16) unsigned char kk_raw[];
    kk_smem *sm = reinterpret_cast<kk_smem *>(kk_raw);
    const int h = blockIdx.x, e = threadIdx.x;
    const size_t sk = (size_t)n_heads * KK_D;
    float *S = state + (size_t)h * KK_D * KK_D;
    float s[KK_D];
#pragma unroll
    for (int c = 0; c < KK_D; c++) {
        s[c] = S[(size_t)c * KK_D + e];
    }
    for (int t0 = 0; t0 < n_tok; t0 += KK_C) {
        const int C = min(KK_C, n_tok - t0);
        /* Normalise q and k, cumulative log-decay (thread e = channel e). */
        float Gc = 0.0f, Gl = 0.0f;
        for (int i = 0; i < C; i++) {
            size_t o = (size_t)(t0 + i) * sk + (size_t)h * KK_D + e;
            float qe = q[o], ke = k[o];
            float nq = kk_sum128(qe * qe, sm->red);
            float nk = kk_sum128(ke * ke, sm->red);
            sm->qn[i][e] = qe * rsqrtf(nq + 1e-12f);
            sm->kn[i][e] = ke * rsqrtf(nk + 1e-12f);
            float gc = fmaxf(g[o], g_lo);
            float sum = Gc + gc, bv = sum - Gc; /* two-sum: Gc + gc = sum + err exactly */
            Gl += (Gc - (sum - bv)) + (gc - bv);
            Gc = sum;
            sm->G[i][e] = Gc;
            sm->Gl[i][e] = Gl;
            if (e == 0) {
                sm->beta[i] = beta[(size_t)(t0 + i) * n_heads + h];
            }
        }
        __syncthreads();
        /* M_ij (j < i) and P_ij (j <= i): decayed dot products over the 128 channels. */
        for (int pr = e; pr < C * C; pr += KK_D) {
            int i = pr / C, j = pr % C;
            float mv = 0.0f, pv = 0.0f;
            if (j <= i) {
                for (int c = 0; c < KK_D; c++) {
                    float d = __expf(KK_GDIFF(sm, i, j, c)) * sm->kn[j][c];
                    mv = fmaf(sm->kn[i][c], d, mv);
                    pv = fmaf(sm->qn[i][c], d, pv);
                }
            }
            sm->M[i][j] = j < i ? mv : 0.0f;
            sm->P[i][j] = pv;
        }
        __syncthreads();
        /* u_i and o_i for column e; tokens in order. */
        for (int i = 0; i < C; i++) {
            float ks0 = 0.0f, qs0 = 0.0f;
#pragma unroll
            for (int c = 0; c < KK_D; c++) {
                float A = __expf(sm->G[i][c]);
                ks0 = fmaf(sm->kn[i][c] * A, s[c], ks0);
                qs0 = fmaf(sm->qn[i][c] * A, s[c], qs0);
            }
            float acc = 0.0f, oacc = 0.0f;
            for (int j = 0; j < i; j++) {
                float uj = sm->u[j][e];
                acc = fmaf(sm->M[i][j], uj, acc);
                oacc = fmaf(sm->P[i][j], uj, oacc);
            }
            size_t o = (size_t)(t0 + i) * sk + (size_t)h * KK_D + e;
            float ui = sm->beta[i] * (v[o] - ks0 - acc);
            sm->u[i][e] = ui;
            out[o] = qs0 + oacc + sm->P[i][i] * ui;
        }
        __syncthreads();
        /* S_C = Diag(A_C) S_0 + sum_j (k_j * exp(G_C - G_j)) u_j^T. */
        for (int j = 0; j < C; j++) {
            sm->kn[j][e] *= __expf(KK_GDIFF(sm, C - 1, j, e));
        }
        __syncthreads();
#pragma unroll
        for (int c = 0; c < KK_D; c++) {
            s[c] *= __expf(sm->G[C - 1][c]);
        }
        for (int j = 0; j < C; j++) {
            float uj = sm->u[j][e];
#pragma unroll
            for (int c = 0; c < KK_D; c++) {
                s[c] = fmaf(sm->kn[j][c], uj, s[c]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < KK_D; c++) {
        S[(size_t)c * KK_D + e] = s[c];
    }
}

extern "C" st_status_t st_cuda_kda_prefill(float *state, const float *q, const float *k,
                                           const float *v, const float *g, const float *beta,
                                           int n_tok, int n_heads, int dk, int dv, float g_lo,
                                           float *out, void *stream)
{
    if (!state || !q || !k || !v || !g || !beta || !out || n_tok <= 0 || n_heads <= 0 ||
        dk != KK_D || dv != KK_D || !(g_lo <= 0.0f)) {
        return ST_ERR_INVALID;
    }
    cudaFuncSetAttribute(kk_prefill_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)sizeof(kk_smem));
    kk_prefill_kernel<<<n_heads, KK_D, sizeof(kk_smem), KN_STREAM(stream)>>>(
        state, q, k, v, g, beta, n_tok, n_heads, g_lo, out);
    return kn_launch_status("kda_prefill");
}
