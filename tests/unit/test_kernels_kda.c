/*
 * test_kernels_kda.c - KDA in C: the decode step and the chunked prefill
 * against the double recurrence, and chunked against recurrent over the same
 * tokens (lengths that end inside a chunk included).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "strata/kernels.h"
#include "test_kernels_util.h"
#include "support/unit_main.h"

static const st_simd_t paths[] = {ST_SIMD_PORTABLE, ST_SIMD_AVX2};

#define FOR_EACH_PATH(p)                       \
    for (size_t p##_i = 0; p##_i < 2; p##_i++) \
        if (st_kernels_set_simd(paths[p##_i]) == ST_OK)

typedef struct {
    int T, Hh, dk, dv;
    float *q, *k, *v, *g, *beta, *s0;
} kda_in_t;

static void kda_make(kda_in_t *in, int T, int Hh, int dk, int dv)
{
    in->T = T, in->Hh = Hh, in->dk = dk, in->dv = dv;
    size_t nk = (size_t)T * Hh * dk, nv = (size_t)T * Hh * dv;
    in->q = malloc(sizeof(float) * nk);
    in->k = malloc(sizeof(float) * nk);
    in->g = malloc(sizeof(float) * nk);
    in->v = malloc(sizeof(float) * nv);
    in->beta = malloc(sizeof(float) * T * Hh);
    in->s0 = malloc(sizeof(float) * Hh * dk * dv);
    tk_fill(in->q, nk, -1, 1);
    tk_fill(in->k, nk, -1, 1);
    tk_fill(in->g, nk, -6, 0); /* some below the lower bound g_lo = -5 */
    tk_fill(in->v, nv, -1, 1);
    tk_fill(in->beta, (size_t)T * Hh, 0, 1);
    tk_fill(in->s0, (size_t)Hh * dk * dv, -1, 1);
}

static void kda_free(kda_in_t *in)
{
    free(in->q), free(in->k), free(in->g), free(in->v), free(in->beta), free(in->s0);
}

static void test_kda_against_reference(void **unused)
{
    const int lens[] = {1, 64, 150};
    FOR_EACH_PATH(p)
    {
        for (int li = 0; li < 3; li++) {
            kda_in_t in;
            kda_make(&in, lens[li], 3, 128, 128);
            size_t ns = (size_t)in.Hh * in.dk * in.dv, no = (size_t)in.T * in.Hh * in.dv;
            double *rs = malloc(sizeof(double) * ns), *ro = malloc(sizeof(double) * no);
            float *cs = malloc(sizeof(float) * ns), *co = malloc(sizeof(float) * no);
            float *ds = malloc(sizeof(float) * ns), *dout = malloc(sizeof(float) * no);
            for (size_t i = 0; i < ns; i++) {
                rs[i] = in.s0[i];
            }
            memcpy(cs, in.s0, sizeof(float) * ns);
            memcpy(ds, in.s0, sizeof(float) * ns);
            assert_int_equal(st_ref_kda(rs, in.q, in.k, in.v, in.g, in.beta, in.T, in.Hh, in.dk,
                                        in.dv, -5.0f, ro),
                             ST_OK);
            assert_int_equal(st_cpu_kda_prefill(cs, in.q, in.k, in.v, in.g, in.beta, in.T, in.Hh,
                                                in.dk, in.dv, -5.0f, co),
                             ST_OK);
            for (int t = 0; t < in.T; t++) {
                size_t ok = (size_t)t * in.Hh * in.dk, ov = (size_t)t * in.Hh * in.dv;
                assert_int_equal(st_cpu_kda_decode(ds, in.q + ok, in.k + ok, in.v + ov, in.g + ok,
                                                   in.beta + (size_t)t * in.Hh, in.Hh, in.dk, in.dv,
                                                   -5.0f, dout + ov),
                                 ST_OK);
            }
            double e[6] = {tk_rel_err(co, ro, no),     tk_rel_err(cs, rs, ns),
                           tk_rel_err(dout, ro, no),   tk_rel_err(ds, rs, ns),
                           tk_rel_err_f(co, dout, no), tk_rel_err_f(cs, ds, ns)};
            printf("# kda path=%d T=%d chunked out %.3g state %.3g | recurrent out %.3g state "
                   "%.3g | chunked vs recurrent %.3g %.3g\n",
                   st_kernels_simd(), in.T, e[0], e[1], e[2], e[3], e[4], e[5]);
            for (int i = 0; i < 6; i++) {
                assert_true(e[i] <= TK_TOL);
            }
            free(rs), free(ro), free(cs), free(co), free(ds), free(dout);
            kda_free(&in);
        }
    }
}

/*
 * The chunked prefill of in against the double recurrence: asserts the output
 * and the final state are within tol, prints both errors under label.
 */
static void kda_check_chunked(const kda_in_t *in, double tol, const char *label)
{
    size_t ns = (size_t)in->Hh * in->dk * in->dv, no = (size_t)in->T * in->Hh * in->dv;
    double *rs = malloc(sizeof(double) * ns), *ro = malloc(sizeof(double) * no);
    float *cs = malloc(sizeof(float) * ns), *co = malloc(sizeof(float) * no);

    for (size_t i = 0; i < ns; i++) {
        rs[i] = in->s0[i];
    }
    memcpy(cs, in->s0, sizeof(float) * ns);
    assert_int_equal(st_ref_kda(rs, in->q, in->k, in->v, in->g, in->beta, in->T, in->Hh, in->dk,
                                in->dv, -5.0f, ro),
                     ST_OK);
    assert_int_equal(st_cpu_kda_prefill(cs, in->q, in->k, in->v, in->g, in->beta, in->T, in->Hh,
                                        in->dk, in->dv, -5.0f, co),
                     ST_OK);
    double eo = tk_rel_err(co, ro, no), es = tk_rel_err(cs, rs, ns);
    printf("# kda %s path=%d out %.3g state %.3g\n", label, st_kernels_simd(), eo, es);
    assert_true(eo <= tol);
    assert_true(es <= tol);
    free(rs), free(ro), free(cs), free(co);
}

static void test_kda_odd_sizes(void **unused)
{
    kda_in_t in;
    kda_make(&in, 70, 2, 24, 40);
    kda_check_chunked(&in, TK_TOL, "odd sizes");
    kda_free(&in);
}

/*
 * Every channel decays at the lower bound for 48 tokens, then hardly at all for
 * the last 16: the cumulative log-decay sits near -240, where a float ulp is
 * 1.5e-5, while the factors e^(G_i - G_j) of the last 16 tokens are near 1 and
 * carry the state. The chunked state must still agree with the double
 * recurrence to fp32 rounding, not to that ulp (a plain float running sum
 * missed by 1e-5 here).
 */
static void test_kda_strong_decay(void **unused)
{
    FOR_EACH_PATH(p)
    {
        kda_in_t in;
        kda_make(&in, 64, 2, 128, 128);
        size_t tail = (size_t)48 * in.Hh * in.dk;
        tk_fill(in.g, tail, -5.0, -4.9);
        tk_fill(in.g + tail, (size_t)16 * in.Hh * in.dk, -0.05, 0.0);
        kda_check_chunked(&in, 2e-6, "strong decay");
        kda_free(&in);
    }
}

static void test_kda_invalid(void **unused)
{
    float x[16] = {0};
    assert_int_equal(st_cpu_kda_decode(x, x, x, x, x, x, 1, 2, 2, 0.5f, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_kda_prefill(x, x, x, x, x, x, 0, 1, 2, 2, -1.0f, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_kda_decode(NULL, x, x, x, x, x, 1, 2, 2, -1.0f, x), ST_ERR_INVALID);
}

int main(void)
{
    tk_seed();
    UNIT_RUN(cmocka_unit_test(test_kda_against_reference), cmocka_unit_test(test_kda_odd_sizes),
             cmocka_unit_test(test_kda_strong_decay), cmocka_unit_test(test_kda_invalid));
}
