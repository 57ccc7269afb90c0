/*
 * test_kernels_util.h - what the kernel tests share: a seeded random source
 * (a fresh seed each run, printed; STRATA_TEST_SEED repeats one) and the error
 * metric of docs/kernels.md: max |a - ref| / max(max |ref|, 1e-30).
 */
#ifndef STRATA_TEST_KERNELS_UTIL_H
#define STRATA_TEST_KERNELS_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t tk_state;

static inline void tk_seed(void)
{
    const char *env = getenv("STRATA_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    tk_state = seed * 2654435761u + 1;
    printf("# seed %llu (set STRATA_TEST_SEED to repeat)\n", (unsigned long long)seed);
}

/* xorshift64*: uniform in [0, 1). */
static inline double tk_uniform(void)
{
    tk_state ^= tk_state >> 12;
    tk_state ^= tk_state << 25;
    tk_state ^= tk_state >> 27;
    return (double)((tk_state * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}

/* uniform in [lo, hi) */
static inline float tk_range(double lo, double hi)
{
    return (float)(lo + (hi - lo) * tk_uniform());
}

static inline void tk_fill(float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = tk_range(lo, hi);
    }
}

static inline double tk_rel_err(const float *a, const double *ref, size_t n)
{
    double num = 0.0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        num = d > num || isnan(d) ? d : num;
        den = fabs(ref[i]) > den ? fabs(ref[i]) : den;
    }
    return num / den;
}

static inline double tk_rel_err_f(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 1e-30;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = d > num || isnan(d) ? d : num;
        den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
    }
    return num / den;
}

#define TK_TOL 1e-5

#endif
