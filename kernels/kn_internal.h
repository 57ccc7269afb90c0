/*
 * kn_internal.h - what the CPU kernels share: the inner loops chosen at run
 * time (portable or AVX2), a vectorisable exp, and argument checks.
 */
#ifndef STRATA_KN_INTERNAL_H
#define STRATA_KN_INTERNAL_H

#include <stddef.h>

#include "strata/kernels.h"

/* The inner loops every CPU kernel is built from. */
typedef struct kn_ops {
    float (*dot)(const float *a, const float *b, int n);    /* sum a[i]*b[i] */
    void (*axpy)(float a, const float *x, float *y, int n); /* y += a*x */
    void (*scale)(float a, float *y, int n);                /* y *= a */
    /* out[r] = kn_score_row(q, w, n_heads, dim, keys + r*dim) for r < n */
    void (*score_rows)(const float *q, const float *w, int n_heads, int dim, const float *keys,
                       int n, float *out);
} kn_ops_t;

/* The loops in use; set by st_kernels_set_simd() and at load time. */
extern kn_ops_t kn_ops;

float kn_dot_portable(const float *a, const float *b, int n);
void kn_axpy_portable(float a, const float *x, float *y, int n);
void kn_scale_portable(float a, float *y, int n);
void kn_score_rows_portable(const float *q, const float *w, int n_heads, int dim, const float *keys,
                            int n, float *out);

#if defined(__x86_64__)
float kn_dot_avx2(const float *a, const float *b, int n);
void kn_axpy_avx2(float a, const float *x, float *y, int n);
void kn_scale_avx2(float a, float *y, int n);
void kn_score_rows_avx2(const float *q, const float *w, int n_heads, int dim, const float *keys,
                        int n, float *out);
#endif

/* exp(x[i]) for x[i] <= 0 into y (relative error below 1e-6); vectorisable. */
void kn_exp_neg(const float *x, float *y, int n);

/* One query row's fp32 indexer score against one key row. Every CPU path
 * scores through kn_ops.score_rows, so a row's score does not depend on which
 * function asked for it. */
float kn_score_row(const float *q, const float *w, int n_heads, int dim, const float *key);

/* Whether the arguments of a sparse attention call are valid, the same for the C kernel and the
 * reference (out and lse: their float or double outputs). */
static inline int kn_attn_args_ok(const float *q, int n_heads, int d_qk, int d_v,
                                  const float *const *rows, int n_rows, const void *out,
                                  const void *lse)
{
    return q && out && lse && n_heads > 0 && d_qk > 0 && d_v > 0 && d_v <= d_qk && n_rows >= 0 &&
           (n_rows == 0 || rows);
}

#endif
