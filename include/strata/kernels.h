/*
 * strata/kernels.h - the attention and state kernels of the engine.
 *
 * Every kernel has three forms: a naive reference in double precision
 * (st_ref_*), a portable fp32 C version (st_cpu_*, with an AVX2+FMA path
 * chosen at run time) and a CUDA version for sm_90 (st_cuda_*, built into the
 * separate library strata_kernels_cuda only where nvcc exists).
 *
 * The exact formulas, layouts and error bounds are in docs/kernels.md.
 * All arrays are dense, row-major and caller-owned; no function keeps a
 * pointer after it returns. The CPU functions are thread-safe as long as two
 * calls do not write the same arrays. Functions that can fail return
 * ST_ERR_INVALID for a bad argument (a NULL array, a zero or unsupported size)
 * and, where they allocate scratch memory, ST_ERR_NOMEM.
 */
#ifndef STRATA_KERNELS_H
#define STRATA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- CPU path selection ------------------------------------------------- */

typedef enum st_simd {
    ST_SIMD_AUTO = 0,     /* the best the processor supports (the default) */
    ST_SIMD_PORTABLE = 1, /* plain C loops, vectorised by the compiler */
    ST_SIMD_AVX2 = 2      /* AVX2 + FMA intrinsics */
} st_simd_t;

/*
 * Chooses the inner loops used by every st_cpu_* function of this process.
 * Returns ST_OK, ST_ERR_UNSUPPORTED when the processor (or this build) lacks
 * the requested path, ST_ERR_INVALID for an unknown value. Not thread-safe
 * against running kernels: call it at start-up (tests call it between runs).
 */
ST_API st_status_t st_kernels_set_simd(st_simd_t simd);

/* Returns the path now in use (ST_SIMD_PORTABLE or ST_SIMD_AVX2). */
ST_API st_simd_t st_kernels_simd(void);

/* ---- 1. Indexer scores -------------------------------------------------- */

/*
 * I(t,s) = sum_j w[t][j] * ReLU(dot(q[t][j][:], keys[s][:])) for n_q query
 * rows t and n_keys key rows s.
 * @param[in]  q       n_q x n_heads x dim
 * @param[in]  w       n_q x n_heads (any sign)
 * @param[in]  keys    n_keys x dim
 * @param[out] scores  n_q x n_keys
 * Returns ST_OK or ST_ERR_INVALID (NULL pointer or a zero size).
 */
ST_API st_status_t st_cpu_indexer_scores(const float *q, const float *w, int n_q, int n_heads,
                                         int dim, const float *keys, int n_keys, float *scores);
ST_API st_status_t st_ref_indexer_scores(const float *q, const float *w, int n_q, int n_heads,
                                         int dim, const float *keys, int n_keys, double *scores);

/* ---- 2. Block summaries and two-stage top-k selection ------------------- */

/*
 * Per block of block_rows consecutive key rows (the last block may be short),
 * the per-channel minimum and maximum of the keys.
 * @param[out] summary  n_blocks x 2 x dim: summary[b][0][c] = min, [b][1][c] = max,
 *                      n_blocks = ceil(n_keys / block_rows)
 * Returns ST_OK or ST_ERR_INVALID.
 */
ST_API st_status_t st_cpu_block_summary(const float *keys, int n_keys, int dim, int block_rows,
                                        float *summary);

/*
 * Upper bound of I(t,s) over every row s of each block, for one query row,
 * from its summary: for head j, dot(q_j, k) lies in [lo_j, hi_j] with
 * hi_j = sum_c max(q_jc*min_c, q_jc*max_c) and lo_j the same with min; the bound is
 * sum_j (w_j >= 0 ? w_j*ReLU(hi_j) : w_j*ReLU(lo_j)), widened by a rounding margin
 * so that it also bounds the fp32 scores of st_cpu_indexer_scores.
 * @param[out] bound  n_blocks values
 */
ST_API st_status_t st_cpu_block_bounds(const float *q, const float *w, int n_heads, int dim,
                                       const float *summary, int n_blocks, float *bound);

/*
 * Exact top-k of one query row's indexer scores over n_keys rows, by two
 * stages: blocks are visited in decreasing order of their bound and scored row
 * by row; the visit stops once the next bound is below the k-th best score
 * found so far. The result equals the top-k of st_cpu_indexer_scores over all
 * rows, ordered by score descending, ties broken by the lower row index.
 * @param[in]  summary     from st_cpu_block_summary with the same block_rows
 * @param[in]  k           1..n_keys (a larger k returns all rows)
 * @param[out] idx         k row indices (or n_keys when k > n_keys)
 * @param[out] score       their scores (may be NULL)
 * @param[out] n_scored_p  how many blocks were scored row by row (may be NULL)
 * Returns ST_OK, ST_ERR_INVALID or ST_ERR_NOMEM.
 */
ST_API st_status_t st_cpu_indexer_topk(const float *q, const float *w, int n_heads, int dim,
                                       const float *keys, int n_keys, int block_rows,
                                       const float *summary, int k, int32_t *idx, float *score,
                                       int *n_scored_p);

/* ---- 3. Sparse attention partial (MLA in MQA mode) ---------------------- */

/*
 * One query token, n_heads heads sharing the selected latent rows.
 * s[h][r] = scale * dot(q[h][0..d_qk), row_r[0..d_qk)); the value of row r is
 * its first d_v entries. out[h] = sum_r softmax_r(s[h]) * row_r[0..d_v),
 * lse[h] = ln(sum_r exp(s[h][r])). With n_rows == 0: out = 0, lse = -inf.
 * @param[in]  q       n_heads x d_qk
 * @param[in]  rows    n_rows pointers, each to d_qk floats anywhere in memory
 * @param[out] out     n_heads x d_v
 * @param[out] lse     n_heads
 * Returns ST_OK, ST_ERR_INVALID (NULL, d_v > d_qk, zero sizes) or ST_ERR_NOMEM.
 */
ST_API st_status_t st_cpu_sparse_attn(const float *q, int n_heads, int d_qk, int d_v,
                                      const float *const *rows, int n_rows, float scale, float *out,
                                      float *lse);
ST_API st_status_t st_ref_sparse_attn(const float *q, int n_heads, int d_qk, int d_v,
                                      const float *const *rows, int n_rows, float scale,
                                      double *out, double *lse);

/* ---- 4. LSE merge -------------------------------------------------------- */

/*
 * Merges partial b into partial a, in place, for n_heads heads of d_v values:
 * lse = M + ln(e^(lse_a-M) + e^(lse_b-M)), M = max(lse_a, lse_b);
 * out_a = e^(lse_a-lse) out_a + e^(lse_b-lse) out_b. A partial with lse = -inf is
 * empty and leaves the other unchanged. Associative and commutative up to rounding.
 */
ST_API st_status_t st_cpu_lse_merge(float *out_a, float *lse_a, const float *out_b,
                                    const float *lse_b, int n_heads, int d_v);

/* ---- 5. KDA (gated delta rule with per-channel decay) ------------------- */

/*
 * One head's recurrence, for each token (state S is dk x dv, fp32):
 *   qn = q/|q|, kn = k/|k|, a = exp(max(g, g_lo)) per key channel,
 *   S <- (I - beta kn kn^T) Diag(a) S + beta kn v^T,   o = S^T qn.
 * Layouts for n_heads heads: state n_heads x dk x dv; q, k, g n_heads x dk;
 * v, out n_heads x dv; beta n_heads. g_lo must be <= 0.
 */
ST_API st_status_t st_cpu_kda_decode(float *state, const float *q, const float *k, const float *v,
                                     const float *g, const float *beta, int n_heads, int dk, int dv,
                                     float g_lo, float *out);

/*
 * The same recurrence over n_tok tokens, computed in chunks of 64 tokens by
 * the WY/UT form (docs/kernels.md). Per-token arrays add a leading n_tok
 * dimension: q, k, g n_tok x n_heads x dk; v, out n_tok x n_heads x dv;
 * beta n_tok x n_heads. state is read at the start and holds the state after
 * the last token on return. Returns ST_OK, ST_ERR_INVALID or ST_ERR_NOMEM.
 */
ST_API st_status_t st_cpu_kda_prefill(float *state, const float *q, const float *k, const float *v,
                                      const float *g, const float *beta, int n_tok, int n_heads,
                                      int dk, int dv, float g_lo, float *out);
/* The token-by-token recurrence in double (state in double too). */
ST_API st_status_t st_ref_kda(double *state, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, int n_tok, int n_heads, int dk,
                              int dv, float g_lo, double *out);

/* ---- 6. RMSNorm fused with the residual add ----------------------------- */

/*
 * For each of n rows of d values: residual += x; out = residual / sqrt(mean(residual^2)
 * + eps) * weight. residual is updated in place; out may alias x.
 */
ST_API st_status_t st_cpu_rmsnorm_residual(const float *x, float *residual, const float *weight,
                                           int n, int d, float eps, float *out);
ST_API st_status_t st_ref_rmsnorm_residual(const float *x, const float *residual,
                                           const float *weight, int n, int d, float eps,
                                           double *residual_out, double *out);

/* ---- CUDA (library strata_kernels_cuda; device pointers; async on stream) */

/*
 * All st_cuda_* functions take device pointers and a cudaStream_t passed as
 * void * (NULL = the default stream), enqueue their work and return without
 * waiting. They return ST_ERR_INVALID for bad arguments and ST_ERR_INTERNAL
 * when the launch fails (the CUDA error is logged to stderr). Thread-safe;
 * callers order accesses to the same buffers through their streams. Device
 * arrays must be 16-byte aligned (cudaMalloc gives 256). The attention kernel
 * uses wgmma where built for sm_90a (H100/H200) and mma.sync elsewhere.
 */

/* Returns ST_OK when a CUDA device is usable, ST_ERR_UNAVAILABLE otherwise. */
ST_API st_status_t st_cuda_available(void);

/* Indexer scores with fp32 keys; layouts as st_cpu_indexer_scores. */
ST_API st_status_t st_cuda_indexer_scores(const float *q, const float *w, int n_q, int n_heads,
                                          int dim, const float *keys, int n_keys, float *scores,
                                          void *stream);
/*
 * Indexer scores with fp8 (e4m3) keys and one fp32 scale per row, as
 * DeepSeek-V3.2 stores them: key[s][c] = keys8[s][c] * key_scale[s].
 * dim must be a multiple of 16.
 */
ST_API st_status_t st_cuda_indexer_scores_fp8(const float *q, const float *w, int n_q, int n_heads,
                                              int dim, const uint8_t *keys8, const float *key_scale,
                                              int n_keys, float *scores, void *stream);
/*
 * Block bounds for one query row from fp32 summaries, as st_cpu_block_bounds,
 * with a margin that also covers the fp16 rounding of q in the fp8 scorer.
 */
ST_API st_status_t st_cuda_block_bounds(const float *q, const float *w, int n_heads, int dim,
                                        const float *summary, int n_blocks, float *bound,
                                        void *stream);

/*
 * Per-channel min and max of fp8 keys dequantised by their row scale, per
 * block of block_rows rows; layout as st_cpu_block_summary.
 */
ST_API st_status_t st_cuda_block_summary_fp8(const uint8_t *keys8, const float *key_scale,
                                             int n_keys, int dim, int block_rows, float *summary,
                                             void *stream);

/* Bytes of device workspace that st_cuda_indexer_topk_fp8 needs (0 for bad sizes). */
ST_API size_t st_cuda_indexer_topk_workspace(int n_keys, int block_rows);

/*
 * Exact top-k of one query row's fp8 indexer scores (dim 128, n_heads <= 64),
 * entirely on the device (docs/kernels.md §2): by default every row is scored
 * and a radix select runs fused into the scoring; STRATA_KN_TOPK=twostage
 * takes two-stage selection instead (block bounds, a seed of the best-bounded
 * blocks gives a lower bound tau on the k-th score, then only the blocks whose
 * bound reaches tau are scored; summary is used there). The k rows are those with the k
 * highest scores of st_cuda_indexer_scores_fp8, in no particular order (ties
 * at the k-th score are broken arbitrarily).
 * @param[in]  summary    from st_cuda_block_summary_fp8 with the same block_rows
 * @param[in]  block_rows a multiple of 16
 * @param[in]  k          1..n_keys
 * @param[in]  workspace  st_cuda_indexer_topk_workspace() bytes of device memory,
 *                        16-byte aligned; not to be shared by concurrent calls
 * @param[out] idx        k row indices (device)
 * @param[out] score      k scores (device; may be NULL)
 */
ST_API st_status_t st_cuda_indexer_topk_fp8(const float *q, const float *w, int n_heads,
                                            const uint8_t *keys8, const float *key_scale,
                                            const float *summary, int n_keys, int block_rows, int k,
                                            void *workspace, size_t workspace_bytes, int32_t *idx,
                                            float *score, void *stream);

/*
 * Sparse decode attention partial for a batch, bf16 inputs, fp32 results:
 * d_qk = 576, d_v = 512 (MLA), n_heads a multiple of 64.
 * @param[in]  q      n_batch x n_heads x 576 bf16 (raw uint16 bits)
 * @param[in]  rows   n_batch x n_rows device pointers, each to 576 bf16 values,
 *                    16-byte aligned (a pool block or a staging buffer)
 * @param[out] out    n_batch x n_heads x 512 fp32
 * @param[out] lse    n_batch x n_heads fp32 (natural log; -inf when n_rows == 0)
 */
ST_API st_status_t st_cuda_sparse_attn_bf16(const uint16_t *q, int n_batch, int n_heads,
                                            const uint16_t *const *rows, int n_rows, float scale,
                                            float *out, float *lse, void *stream);

/* LSE merge on the device, n_parts = n_heads (any batch folded in). */
ST_API st_status_t st_cuda_lse_merge(float *out_a, float *lse_a, const float *out_b,
                                     const float *lse_b, int n_heads, int d_v, void *stream);

/* KDA decode step for n_heads heads (batch folded into heads); dk = dv = 128. */
ST_API st_status_t st_cuda_kda_decode(float *state, const float *q, const float *k, const float *v,
                                      const float *g, const float *beta, int n_heads, int dk,
                                      int dv, float g_lo, float *out, void *stream);

/* KDA chunked prefill for n_heads heads; dk = dv = 128; layouts as the CPU form. */
ST_API st_status_t st_cuda_kda_prefill(float *state, const float *q, const float *k, const float *v,
                                       const float *g, const float *beta, int n_tok, int n_heads,
                                       int dk, int dv, float g_lo, float *out, void *stream);

/* RMSNorm fused with the residual add, fp32; as st_cpu_rmsnorm_residual. */
ST_API st_status_t st_cuda_rmsnorm_residual(const float *x, float *residual, const float *weight,
                                            int n, int d, float eps, float *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_KERNELS_H */
