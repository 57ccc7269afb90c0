/*
 * en_cuda.h - the engine's own small CUDA kernels (engine/dev_cuda.cu), for
 * the device path of engine/model_cuda.c: projections, the query's rope and
 * bf16 conversion, the ingest of rows (bf16) and indexer keys (fp8 e4m3 and
 * a scale per row), and the row pointers of a selection. Device pointers;
 * each enqueues on stream (a cudaStream_t) and returns ST_OK, or
 * ST_ERR_INTERNAL after logging the launch error.
 */
#ifndef STRATA_EN_CUDA_H
#define STRATA_EN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ST_OK, or ST_ERR_INTERNAL after logging the last launch's error with the kernel's name. */
st_status_t en_cu_status(const char *what);

/* Floats of the partial-sum scratch that en_cu_matvec needs for (in, out). */
size_t en_cu_matvec_scratch(int in, int out);

/*
 * y[0..out) = sum_i x[i] W[i][0..out) (W stored [in][out], fp32). Inputs are
 * split into chunks whose partial sums are added in chunk order, so the
 * result does not depend on the launch.
 */
st_status_t en_cu_matvec(const float *W, const float *x, int in, int out, float *scratch, float *y,
                         void *stream);

/*
 * The query in bf16: qb[h][c] = bf16(qf[h][c]) for c < dv; the rope part
 * (c >= dv, pairs) rotated first by cs[i] = cos, cs[half + i] = sin, half =
 * (row - dv) / 2, as the CPU path's en_rope computes them.
 */
st_status_t en_cu_q_bf16(const float *qf, const float *cs, int heads, int row, int dv, uint16_t *qb,
                         void *stream);

/* en_cu_q_bf16 for n tokens: qf, qb n x heads x row, cs n x (row - dv). */
st_status_t en_cu_q_bf16_n(const float *qf, const float *cs, size_t n, int heads, int row, int dv,
                           uint16_t *qb, void *stream);

/*
 * Rows of tokens t0..t0+n (fp32, n x row) into the bf16 store: token t at
 * slot t (ring 0) or (t / block) % ring * block + t % block.
 */
st_status_t en_cu_rows_bf16(const float *src, size_t n, size_t t0, int row, int block, size_t ring,
                            uint16_t *dst, void *stream);

/*
 * Indexer keys of tokens t0..t0+n (fp32, n x 128) into fp8 e4m3 with one
 * scale per row: scale = max |key| / 448 (1 for a zero row).
 */
st_status_t en_cu_keys_fp8(const float *src, size_t n, size_t t0, uint8_t *keys8, float *scale,
                           void *stream);

/*
 * Pointers to the selected rows of an unbounded bf16 store (ring 0):
 * sorted by position (k <= 8192; larger k keeps the kernel's order), ptrs[i]
 * = base + sel[i] * row; *n_closed counts the rows outside block open.
 */
st_status_t en_cu_row_ptrs(const int32_t *sel, int k, const uint16_t *base, int row, int block,
                           size_t open, const uint16_t **ptrs, uint32_t *n_closed, void *stream);

/* Ints of scratch that en_cu_select_ties needs for n rows. */
size_t en_cu_ties_scratch(size_t n);

/*
 * Makes a top-k selection deterministic: given every row's score (n) and a
 * top-k sel (k rows, ties at the k-th score broken arbitrarily), writes to
 * out the rows scoring above tau = min over sel, then those equal to tau in
 * ascending row order, k in all: the same rows at every run.
 */
st_status_t en_cu_select_ties(const float *scores, int n, const int32_t *sel, int k, int *scratch,
                              float *tau, int32_t *out, void *stream);

/* ---- a prefill span's kernels (engine/span_cuda.cu) ---------------------- */

/* Floats of the scratch en_cu_matmul needs for (n, in, out) (0: none). */
size_t en_cu_matmul_scratch(size_t n, int in, int out);

/*
 * Y (n x out) = X (n x in) W (W stored [in][out], fp32): tiles of rows and
 * outputs; a long input is split (one split per 2048 inputs) and the
 * splits' partials added in split order. The order depends on (in, out)
 * alone: a row's result does not depend on n or the launch.
 */
st_status_t en_cu_matmul(const float *W, const float *X, size_t n, int in, int out, float *scratch,
                         float *Y, void *stream);

/* Rotates the rope part (rope values from off) of n rows stride floats apart by the tokens'
 * tables cs (n x rope: the pairs' cos, then their sin), as the CPU's en_rope. */
st_status_t en_cu_rope_rows(float *v, size_t n, int stride, int off, int rope, const float *cs,
                            void *stream);

/* KDA's gates in place: g <- -softplus(g - 1) (n_g values), beta <- sigmoid(beta) (n_b). */
st_status_t en_cu_kda_gates(float *g, size_t n_g, float *beta, size_t n_b, void *stream);

/* v[0..n) *= s. */
st_status_t en_cu_scale(float *v, size_t n, float s, void *stream);

/* Per token of n: the k (<= 16) largest of E router logits (ties: lower index) into idx
 * (n x k) and their softmax weights into wt, as en_moe_route. ST_ERR_INVALID for k. */
st_status_t en_cu_moe_route(const float *logits, size_t n, int E, int k, int *idx, float *wt,
                            void *stream);

/* h1[i] = silu(h1[i]) * h3[i] for n values. */
st_status_t en_cu_silu_gate(float *h1, const float *h3, size_t n, void *stream);

/* x[t] = sum_j wt[t][j] * eo[idx[t][j]][t] (eo: experts x n x d), in routing order; idx
 * NULL: x = eo (a dense feed-forward). */
st_status_t en_cu_moe_combine(const float *eo, size_t n, int d, int k, const int *idx,
                              const float *wt, float *x, void *stream);

#ifdef __cplusplus
}
#endif
#endif
