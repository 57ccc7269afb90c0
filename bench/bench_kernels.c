/*
 * bench_kernels.c - the fp32 C kernels (AVX2 or portable, as chosen at run
 * time, and portable forced) against a plain scalar loop doing the same
 * arithmetic, on this machine. Prints one line per kernel: median time and
 * the speed-up over the scalar loop. Usage: bench_kernels [reps]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "strata/kernels.h"

static int reps = 5;

typedef void (*fn_t)(void *);

static double median_s(fn_t fn, void *ctx)
{
    double *t = malloc(sizeof(double) * reps);
    fn(ctx);
    for (int i = 0; i < reps; i++) {
        uint64_t t0 = bench_now_ns();
        fn(ctx);
        t[i] = (bench_now_ns() - t0) * 1e-9;
    }
    bench_stats_t st;
    bench_stats(t, reps, &st);
    free(t);
    return st.median;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static void fill(float *x, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        x[i] = lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
    }
}

/* The scalar baselines: straightforward loops, kept scalar on purpose. */
#pragma GCC push_options
#pragma GCC optimize("no-tree-vectorize", "no-tree-slp-vectorize")
static void scalar_indexer(const float *q, const float *w, int H, int D, const float *keys, int N,
                           float *s)
{
    for (int r = 0; r < N; r++) {
        float tot = 0.0f;
        for (int j = 0; j < H; j++) {
            float d = 0.0f;
            for (int c = 0; c < D; c++) {
                d += q[j * D + c] * keys[(size_t)r * D + c];
            }
            tot += d > 0.0f ? w[j] * d : 0.0f;
        }
        s[r] = tot;
    }
}

static void scalar_attn(const float *q, int H, const float *const *rows, int R, float *s,
                        float *out)
{
    for (int h = 0; h < H; h++) {
        float m = -INFINITY, sum = 0.0f;
        for (int r = 0; r < R; r++) {
            float d = 0.0f;
            for (int c = 0; c < 576; c++) {
                d += q[h * 576 + c] * rows[r][c];
            }
            s[r] = d * 0.07f;
            m = s[r] > m ? s[r] : m;
        }
        float *o = out + (size_t)h * 512;
        memset(o, 0, 512 * sizeof(float));
        for (int r = 0; r < R; r++) {
            float p = expf(s[r] - m);
            sum += p;
            for (int c = 0; c < 512; c++) {
                o[c] += p * rows[r][c];
            }
        }
        for (int c = 0; c < 512; c++) {
            o[c] /= sum;
        }
    }
}

static void scalar_kda_step(float *S, const float *q, const float *k, const float *v,
                            const float *g, float beta, float *o)
{
    float kn[128], u[128], nq = 0, nk = 0;
    for (int c = 0; c < 128; c++) {
        nq += q[c] * q[c], nk += k[c] * k[c];
    }
    nq = 1.0f / sqrtf(nq + 1e-12f), nk = 1.0f / sqrtf(nk + 1e-12f);
    for (int c = 0; c < 128; c++) {
        kn[c] = k[c] * nk;
        float a = expf(g[c] < -5.0f ? -5.0f : g[c]);
        for (int e = 0; e < 128; e++) {
            S[c * 128 + e] *= a;
        }
    }
    for (int e = 0; e < 128; e++) {
        float acc = 0;
        for (int c = 0; c < 128; c++) {
            acc += kn[c] * S[c * 128 + e];
        }
        u[e] = beta * (v[e] - acc);
    }
    for (int e = 0; e < 128; e++) {
        o[e] = 0;
    }
    for (int c = 0; c < 128; c++) {
        for (int e = 0; e < 128; e++) {
            S[c * 128 + e] += kn[c] * u[e];
            o[e] += q[c] * nq * S[c * 128 + e];
        }
    }
}
#pragma GCC pop_options

typedef struct {
    float *q, *w, *keys, *s, *out, *lse, *state, *k, *v, *g, *beta;
    const float **rows;
    int H, D, N, R, T;
} ctx_t;

static void c_indexer(void *p)
{
    ctx_t *x = p;
    st_cpu_indexer_scores(x->q, x->w, 1, x->H, x->D, x->keys, x->N, x->s);
}
static void s_indexer(void *p)
{
    ctx_t *x = p;
    scalar_indexer(x->q, x->w, x->H, x->D, x->keys, x->N, x->s);
}
static void c_attn(void *p)
{
    ctx_t *x = p;
    st_cpu_sparse_attn(x->q, x->H, 576, 512, x->rows, x->R, 0.07f, x->out, x->lse);
}
static void s_attn(void *p)
{
    ctx_t *x = p;
    scalar_attn(x->q, x->H, x->rows, x->R, x->s, x->out);
}
static void c_kda_dec(void *p)
{
    ctx_t *x = p;
    st_cpu_kda_decode(x->state, x->q, x->k, x->v, x->g, x->beta, x->H, 128, 128, -5.0f, x->out);
}
static void s_kda_dec(void *p)
{
    ctx_t *x = p;
    for (int h = 0; h < x->H; h++) {
        scalar_kda_step(x->state + (size_t)h * 16384, x->q + h * 128, x->k + h * 128,
                        x->v + h * 128, x->g + h * 128, x->beta[h], x->out + h * 128);
    }
}
static void c_kda_pre(void *p)
{
    ctx_t *x = p;
    st_cpu_kda_prefill(x->state, x->q, x->k, x->v, x->g, x->beta, x->T, x->H, 128, 128, -5.0f,
                       x->out);
}
static void c_kda_rec(void *p)
{
    ctx_t *x = p;
    size_t o = (size_t)x->H * 128;
    for (int t = 0; t < x->T; t++) {
        st_cpu_kda_decode(x->state, x->q + t * o, x->k + t * o, x->v + t * o, x->g + t * o,
                          x->beta + (size_t)t * x->H, x->H, 128, 128, -5.0f, x->out + t * o);
    }
}

static void report(const char *name, fn_t c, fn_t s, void *ctx, double units, const char *unit)
{
    st_kernels_set_simd(ST_SIMD_AUTO);
    double tc = median_s(c, ctx);
    st_kernels_set_simd(ST_SIMD_PORTABLE);
    double tp = median_s(c, ctx);
    st_kernels_set_simd(ST_SIMD_AUTO);
    double ts = s ? median_s(s, ctx) : 0.0;
    printf("%-34s best(%s) %9.3f ms  portable %9.3f ms  scalar %9.3f ms  speed-up %5.1fx  "
           "(%.3g %s/s)\n",
           name, st_kernels_simd() == ST_SIMD_AVX2 ? "avx2" : "portable", tc * 1e3, tp * 1e3,
           ts * 1e3, s ? ts / tc : 0.0, units / tc, unit);
}

int main(int argc, char **argv)
{
    if (argc > 1 && atoi(argv[1]) > 0) {
        reps = atoi(argv[1]);
    }
    ctx_t x = {0};
    x.H = 64, x.D = 128, x.N = 16384;
    x.q = malloc(sizeof(float) * 128 * 576 * 8), x.w = malloc(sizeof(float) * 128);
    x.keys = malloc(sizeof(float) * x.N * x.D), x.s = malloc(sizeof(float) * 65536);
    fill(x.q, 128 * 576 * 8, -1, 1), fill(x.w, 128, -1, 1), fill(x.keys, (size_t)x.N * x.D, -1, 1);
    report("indexer 64 heads x 128, 16K keys", c_indexer, s_indexer, &x, 2.0 * x.N * x.H * x.D,
           "FLOP");

    x.H = 128, x.R = 2048;
    float *pool = malloc(sizeof(float) * (size_t)x.R * 576);
    fill(pool, (size_t)x.R * 576, -1, 1);
    x.rows = malloc(sizeof(float *) * x.R);
    for (int r = 0; r < x.R; r++) {
        x.rows[r] = pool + (size_t)((r * 7919) % x.R) * 576;
    }
    x.out = malloc(sizeof(float) * 8192 * 128 * 8), x.lse = malloc(sizeof(float) * 128);
    report("sparse attn 128 heads, 2048 rows", c_attn, s_attn, &x, 2.0 * x.H * x.R * (576 + 512),
           "FLOP");

    x.H = 96, x.T = 256;
    size_t nk = (size_t)x.T * x.H * 128;
    x.state = malloc(sizeof(float) * x.H * 16384);
    x.k = malloc(sizeof(float) * nk), x.v = malloc(sizeof(float) * nk);
    x.g = malloc(sizeof(float) * nk), x.beta = malloc(sizeof(float) * x.T * x.H);
    free(x.q), free(x.out);
    x.q = malloc(sizeof(float) * nk), x.out = malloc(sizeof(float) * nk);
    fill(x.q, nk, -1, 1), fill(x.k, nk, -1, 1), fill(x.v, nk, -1, 1), fill(x.g, nk, -1, 0);
    fill(x.beta, (size_t)x.T * x.H, 0, 1), fill(x.state, (size_t)x.H * 16384, -0.1f, 0.1f);
    report("kda decode step, 96 heads", c_kda_dec, s_kda_dec, &x, 1.0, "steps");
    printf("kda prefill, 96 heads x 256 tokens (per token):\n");
    report("  chunked (vs recurrent C)", c_kda_pre, c_kda_rec, &x, x.T, "tokens");
    return 0;
}
