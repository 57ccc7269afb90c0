/*
 * simd.c - the portable inner loops and the run-time choice between them and
 * the AVX2 ones (simd_avx2.c).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kn_internal.h"

kn_ops_t kn_ops = {kn_dot_portable, kn_axpy_portable, kn_scale_portable, kn_score_rows_portable};
static st_simd_t kn_current = ST_SIMD_PORTABLE;

/* Eight independent partial sums let the compiler vectorise without -ffast-math. */
float kn_dot_portable(const float *a, const float *b, int n)
{
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; j++) {
            acc[j] += a[i + j] * b[i + j];
        }
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) {
        s += a[i] * b[i];
    }
    return s;
}

void kn_axpy_portable(float a, const float *x, float *y, int n)
{
    for (int i = 0; i < n; i++) {
        y[i] += a * x[i];
    }
}

void kn_scale_portable(float a, float *y, int n)
{
    for (int i = 0; i < n; i++) {
        y[i] *= a;
    }
}

/*
 * exp on (-inf, 0]: x = n ln2 + r with |r| <= ln2/2, exp(r) by a degree-7
 * Taylor polynomial (error below 1e-8 relative), times 2^n built in the
 * exponent bits. Results below about 1e-38 flush to zero.
 */
void kn_exp_neg(const float *x, float *y, int n)
{
    for (int i = 0; i < n; i++) {
        float v = x[i] < -87.0f ? -87.0f : (x[i] > 0.0f ? 0.0f : x[i]);
        float kf = floorf(v * 1.44269504f + 0.5f);
        float r = v - kf * 0.693145752f;
        r = r - kf * 1.42860677e-6f;
        float p = 1.0f / 5040.0f;
        p = p * r + 1.0f / 720.0f;
        p = p * r + 1.0f / 120.0f;
        p = p * r + 1.0f / 24.0f;
        p = p * r + 1.0f / 6.0f;
        p = p * r + 0.5f;
        p = p * r + 1.0f;
        p = p * r + 1.0f;
        int32_t e = ((int32_t)kf + 127) << 23;
        float scale;
        memcpy(&scale, &e, sizeof(scale));
        y[i] = x[i] < -87.0f ? 0.0f : p * scale;
    }
}

float kn_score_row(const float *q, const float *w, int n_heads, int dim, const float *key)
{
    float s = 0.0f;
    for (int j = 0; j < n_heads; j++) {
        float d = kn_ops.dot(q + (size_t)j * dim, key, dim);
        if (d > 0.0f) {
            s += w[j] * d;
        }
    }
    return s;
}

void kn_score_rows_portable(const float *q, const float *w, int n_heads, int dim, const float *keys,
                            int n, float *out)
{
    for (int r = 0; r < n; r++) {
        out[r] = kn_score_row(q, w, n_heads, dim, keys + (size_t)r * dim);
    }
}

static int kn_have_avx2(void)
{
#if defined(__x86_64__) && defined(STRATA_KN_AVX2)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

st_status_t st_kernels_set_simd(st_simd_t simd)
{
    switch (simd) {
    case ST_SIMD_PORTABLE:
        kn_ops = (kn_ops_t){kn_dot_portable, kn_axpy_portable, kn_scale_portable,
                            kn_score_rows_portable};
        kn_current = ST_SIMD_PORTABLE;
        return ST_OK;
    case ST_SIMD_AUTO:
        if (!kn_have_avx2()) {
            return st_kernels_set_simd(ST_SIMD_PORTABLE);
        }
        /* fall through */
    case ST_SIMD_AVX2:
#if defined(__x86_64__) && defined(STRATA_KN_AVX2)
        if (!kn_have_avx2()) {
            return ST_ERR_UNSUPPORTED;
        }
        kn_ops = (kn_ops_t){kn_dot_avx2, kn_axpy_avx2, kn_scale_avx2, kn_score_rows_avx2};
        kn_current = ST_SIMD_AVX2;
        return ST_OK;
#else
        return ST_ERR_UNSUPPORTED;
#endif
    }
    return ST_ERR_INVALID;
}

st_simd_t st_kernels_simd(void)
{
    return kn_current;
}

/* The best path is chosen once when the library is loaded. */
__attribute__((constructor)) static void kn_simd_init(void)
{
    (void)st_kernels_set_simd(ST_SIMD_AUTO);
}
