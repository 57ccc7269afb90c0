/*
 * simd_avx2.c - AVX2 + FMA inner loops. This file alone is compiled with
 * -mavx2 -mfma; simd.c calls into it only after __builtin_cpu_supports.
 */
#include <immintrin.h>
#include <string.h>

#include "kn_internal.h"

static float kn_hsum256(__m256 v)
{
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

float kn_dot_avx2(const float *a, const float *b, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    }
    float s = kn_hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) {
        s += a[i] * b[i];
    }
    return s;
}

void kn_axpy_avx2(float a, const float *x, float *y, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] += a * x[i];
    }
}

void kn_scale_avx2(float a, float *y, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) {
        y[i] *= a;
    }
}

/*
 * Indexer scores of n key rows, eight rows at a time: each head's eight dot
 * products accumulate lane-wise and are reduced together by a tree of
 * horizontal adds (the same order for every row, whatever its place in the
 * group: a short last group is padded with zero rows). dim must be a multiple
 * of 8 up to 256; otherwise the rows are scored one by one.
 */
void kn_score_rows_avx2(const float *q, const float *w, int n_heads, int dim, const float *keys,
                        int n, float *out)
{
    float pad[8 * 256], res[8];

    if (dim % 8 != 0 || dim > 256) {
        kn_score_rows_portable(q, w, n_heads, dim, keys, n, out);
        return;
    }
    for (int r0 = 0; r0 < n; r0 += 8) {
        const float *k = keys + (size_t)r0 * dim;
        int m = n - r0 < 8 ? n - r0 : 8;
        __m256 tot = _mm256_setzero_ps();

        if (m < 8) {
            memcpy(pad, k, sizeof(float) * (size_t)m * dim);
            memset(pad + (size_t)m * dim, 0, sizeof(float) * (size_t)(8 - m) * dim);
            k = pad;
        }
        for (int h = 0; h < n_heads; h++) {
            const float *qh = q + (size_t)h * dim;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
                   a7 = a0;

            for (int c = 0; c < dim; c += 8) {
                __m256 qv = _mm256_loadu_ps(qh + c);

                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + c), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + dim + c), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * dim + c), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * dim + c), a3);
                a4 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 4 * dim + c), a4);
                a5 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 5 * dim + c), a5);
                a6 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 6 * dim + c), a6);
                a7 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 7 * dim + c), a7);
            }
            __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
            __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
            __m256 d = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                     _mm256_permute2f128_ps(u0, u1, 0x31));

            d = _mm256_max_ps(d, _mm256_setzero_ps()); /* ReLU */
            tot = _mm256_fmadd_ps(_mm256_set1_ps(w[h]), d, tot);
        }
        _mm256_storeu_ps(res, tot);
        memcpy(out + r0, res, sizeof(float) * (size_t)m);
    }
}
