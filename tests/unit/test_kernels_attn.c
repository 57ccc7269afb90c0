/*
 * test_kernels_attn.c - sparse attention partial, LSE merge and fused RMSNorm
 * in C against the double references; a partial-then-merge over any split of
 * the rows equals attention over all rows.
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

enum { H = 16, DQK = 576, DV = 512, NR = 300 };

/* Rows scattered over two "places" (a pool and a staging buffer), in random order. */
static float *make_rows(const float **rows, int n)
{
    float *mem = malloc(sizeof(float) * (size_t)2 * n * DQK);
    tk_fill(mem, (size_t)2 * n * DQK, -1, 1);
    for (int r = 0; r < n; r++) {
        int slot = (int)(tk_uniform() * 2 * n);
        rows[r] = mem + (size_t)slot * DQK;
    }
    return mem;
}

static void test_attn_matches_reference(void **unused)
{
    float *q = malloc(sizeof(float) * H * DQK), *out = malloc(sizeof(float) * H * DV);
    double *rout = malloc(sizeof(double) * H * DV);
    float lse[H];
    double rlse[H];
    const float *rows[NR];
    float *mem = make_rows(rows, NR);
    FOR_EACH_PATH(p)
    {
        tk_fill(q, (size_t)H * DQK, -1, 1);
        float scale = 1.0f / sqrtf((float)DQK) * 3.0f;
        assert_int_equal(st_cpu_sparse_attn(q, H, DQK, DV, rows, NR, scale, out, lse), ST_OK);
        assert_int_equal(st_ref_sparse_attn(q, H, DQK, DV, rows, NR, scale, rout, rlse), ST_OK);
        double e_o = tk_rel_err(out, rout, (size_t)H * DV), e_l = tk_rel_err(lse, rlse, H);
        printf("# attn path=%d out rel_err=%.3g lse rel_err=%.3g\n", st_kernels_simd(), e_o, e_l);
        assert_true(e_o <= TK_TOL);
        assert_true(e_l <= TK_TOL);
    }
    free(q), free(out), free(rout), free(mem);
}

static void test_empty_partial(void **unused)
{
    float q[H * DQK], out[H * DV], lse[H];
    tk_fill(q, H * DQK, -1, 1);
    assert_int_equal(st_cpu_sparse_attn(q, H, DQK, DV, NULL, 0, 1.0f, out, lse), ST_OK);
    for (int h = 0; h < H; h++) {
        assert_true(isinf(lse[h]) && lse[h] < 0);
        assert_true(out[h * DV] == 0.0f);
    }
}

static void test_split_merge_equals_whole(void **unused)
{
    float *q = malloc(sizeof(float) * H * DQK);
    float *whole = malloc(sizeof(float) * H * DV), *acc = malloc(sizeof(float) * H * DV);
    float *part = malloc(sizeof(float) * H * DV);
    float lw[H], la[H], lp[H];
    const float *rows[NR];
    float *mem = make_rows(rows, NR);
    FOR_EACH_PATH(p)
    {
        for (int trial = 0; trial < 5; trial++) {
            tk_fill(q, (size_t)H * DQK, -1, 1);
            float scale = 0.1f;
            assert_int_equal(st_cpu_sparse_attn(q, H, DQK, DV, rows, NR, scale, whole, lw), ST_OK);
            /* Random cut points, empty parts allowed; parts merged in a random order. */
            int cuts[6] = {0, 0, 0, 0, 0, NR};
            for (int c = 1; c < 5; c++) {
                cuts[c] = (int)(tk_uniform() * (NR + 1));
            }
            for (int a = 1; a < 5; a++) { /* sort the inner cuts */
                for (int b = a + 1; b < 5; b++) {
                    if (cuts[b] < cuts[a]) {
                        int t = cuts[a];
                        cuts[a] = cuts[b];
                        cuts[b] = t;
                    }
                }
            }
            int order[5] = {0, 1, 2, 3, 4};
            for (int i = 4; i > 0; i--) {
                int j = (int)(tk_uniform() * (i + 1));
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            for (int i = 0; i < 5; i++) {
                int pi = order[i], lo = cuts[pi], n = cuts[pi + 1] - lo;
                float *dst = i == 0 ? acc : part;
                float *dl = i == 0 ? la : lp;
                assert_int_equal(st_cpu_sparse_attn(q, H, DQK, DV, rows + lo, n, scale, dst, dl),
                                 ST_OK);
                if (i > 0) {
                    assert_int_equal(st_cpu_lse_merge(acc, la, part, lp, H, DV), ST_OK);
                }
            }
            assert_true(tk_rel_err_f(acc, whole, (size_t)H * DV) <= TK_TOL);
            assert_true(tk_rel_err_f(la, lw, H) <= TK_TOL);
        }
    }
    free(q), free(whole), free(acc), free(part), free(mem);
}

static void test_merge_identity_and_both_empty(void **unused)
{
    float oa[4 * 8], ob[4 * 8], keep[4 * 8];
    float la[4] = {1.0f, -INFINITY, -INFINITY, 2.0f}, lb[4] = {-INFINITY, 0.5f, -INFINITY, 2.0f};
    tk_fill(oa, 32, -1, 1);
    tk_fill(ob, 32, -1, 1);
    for (int c = 0; c < 8; c++) {
        oa[16 + c] = 0.0f;
    }
    memcpy(keep, oa, sizeof(oa));
    assert_int_equal(st_cpu_lse_merge(oa, la, ob, lb, 4, 8), ST_OK);
    assert_true(la[0] == 1.0f && memcmp(oa, keep, 8 * sizeof(float)) == 0);
    assert_true(la[1] == 0.5f && memcmp(oa + 8, ob + 8, 8 * sizeof(float)) == 0);
    assert_true(isinf(la[2]) && oa[16] == 0.0f);
    assert_true(fabsf(la[3] - (2.0f + logf(2.0f))) < 1e-6f);
    assert_true(fabsf(oa[24] - 0.5f * (keep[24] + ob[24])) < 1e-6f);
}

static void test_rmsnorm_matches_reference(void **unused)
{
    int n = 7, d = 1000;
    float *x = malloc(sizeof(float) * n * d), *res = malloc(sizeof(float) * n * d);
    float *wt = malloc(sizeof(float) * d), *out = malloc(sizeof(float) * n * d);
    double *rres = malloc(sizeof(double) * n * d), *rout = malloc(sizeof(double) * n * d);
    FOR_EACH_PATH(p)
    {
        tk_fill(x, (size_t)n * d, -2, 2);
        tk_fill(res, (size_t)n * d, -2, 2);
        tk_fill(wt, d, 0.5, 1.5);
        assert_int_equal(st_ref_rmsnorm_residual(x, res, wt, n, d, 1e-6f, rres, rout), ST_OK);
        assert_int_equal(st_cpu_rmsnorm_residual(x, res, wt, n, d, 1e-6f, out), ST_OK);
        assert_true(tk_rel_err(res, rres, (size_t)n * d) <= TK_TOL);
        assert_true(tk_rel_err(out, rout, (size_t)n * d) <= TK_TOL);
    }
    assert_int_equal(st_cpu_rmsnorm_residual(x, res, wt, n, 0, 1e-6f, out), ST_ERR_INVALID);
    free(x), free(res), free(wt), free(out), free(rres), free(rout);
}

static void test_invalid_arguments(void **unused)
{
    float x[8] = {0};
    assert_int_equal(st_cpu_sparse_attn(x, 1, 4, 8, NULL, 0, 1.0f, x, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_sparse_attn(x, 1, 8, 4, NULL, 3, 1.0f, x, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_lse_merge(x, x, NULL, x, 1, 4), ST_ERR_INVALID);
}

int main(void)
{
    tk_seed();
    UNIT_RUN(cmocka_unit_test(test_attn_matches_reference), cmocka_unit_test(test_empty_partial),
             cmocka_unit_test(test_split_merge_equals_whole),
             cmocka_unit_test(test_merge_identity_and_both_empty),
             cmocka_unit_test(test_rmsnorm_matches_reference),
             cmocka_unit_test(test_invalid_arguments));
}
