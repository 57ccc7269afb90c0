/*
 * test_kernels_indexer.c - the CPU indexer against the double reference, the
 * block bounds against every row, and two-stage selection against the exact
 * top-k, on fresh random inputs, for every SIMD path the processor has.
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

/* Runs body once per available path. */
#define FOR_EACH_PATH(p)                       \
    for (size_t p##_i = 0; p##_i < 2; p##_i++) \
        if (st_kernels_set_simd(paths[p##_i]) == ST_OK)

static void test_scores_match_reference(void **unused)
{
    const int dims[] = {128, 37};
    FOR_EACH_PATH(p)
    {
        for (int di = 0; di < 2; di++) {
            int n_q = 3, H = 8, D = dims[di], N = 301;
            float *q = malloc(sizeof(float) * n_q * H * D), *w = malloc(sizeof(float) * n_q * H);
            float *keys = malloc(sizeof(float) * N * D), *s = malloc(sizeof(float) * n_q * N);
            double *ref = malloc(sizeof(double) * n_q * N);
            tk_fill(q, (size_t)n_q * H * D, -1, 1);
            tk_fill(w, (size_t)n_q * H, -1, 1);
            tk_fill(keys, (size_t)N * D, -1, 1);
            assert_int_equal(st_cpu_indexer_scores(q, w, n_q, H, D, keys, N, s), ST_OK);
            assert_int_equal(st_ref_indexer_scores(q, w, n_q, H, D, keys, N, ref), ST_OK);
            double err = tk_rel_err(s, ref, (size_t)n_q * N);
            printf("# indexer scores path=%d dim=%d rel_err=%.3g\n", st_kernels_simd(), D, err);
            assert_true(err <= TK_TOL);
            free(q), free(w), free(keys), free(s), free(ref);
        }
    }
}

/* Keys whose blocks differ in offset and spread, so that bounds separate blocks. */
static void structured_keys(float *keys, int n, int dim, int block_rows)
{
    for (int b = 0; b * block_rows < n; b++) {
        double u = tk_uniform();
        float off = tk_range(-1, 1), spread = (float)(0.02 + 0.3 * u * u * u);
        for (int r = b * block_rows; r < n && r < (b + 1) * block_rows; r++) {
            for (int c = 0; c < dim; c++) {
                keys[(size_t)r * dim + c] = off * ((c % 3) - 1) + tk_range(-spread, spread);
            }
        }
    }
}

static void test_bounds_hold_for_every_row(void **unused)
{
    int H = 6, D = 64, N = 64 * 40 + 17, B = 64, nb = (N + B - 1) / B;
    float *q = malloc(sizeof(float) * H * D), *w = malloc(sizeof(float) * H);
    float *keys = malloc(sizeof(float) * N * D), *sum = malloc(sizeof(float) * nb * 2 * D);
    float *bound = malloc(sizeof(float) * nb), *s = malloc(sizeof(float) * N);
    FOR_EACH_PATH(p)
    {
        for (int trial = 0; trial < 4; trial++) {
            tk_fill(q, (size_t)H * D, -1, 1);
            tk_fill(w, H, -1, 1); /* weights of both signs */
            structured_keys(keys, N, D, B);
            assert_int_equal(st_cpu_block_summary(keys, N, D, B, sum), ST_OK);
            assert_int_equal(st_cpu_block_bounds(q, w, H, D, sum, nb, bound), ST_OK);
            assert_int_equal(st_cpu_indexer_scores(q, w, 1, H, D, keys, N, s), ST_OK);
            for (int r = 0; r < N; r++) {
                assert_true(s[r] <= bound[r / B]);
            }
        }
    }
    free(q), free(w), free(keys), free(sum), free(bound), free(s);
}

typedef struct {
    float s;
    int32_t i;
} rank_t;

static int cmp_rank(const void *a, const void *b)
{
    const rank_t *x = a, *y = b;
    if (x->s != y->s) {
        return x->s > y->s ? -1 : 1;
    }
    return x->i - y->i;
}

static void check_topk(int structured, int *pruned_any)
{
    int H = 8, D = 128, B = 64, N = B * 97 + 5, nb = (N + B - 1) / B, K = 200;
    float *q = malloc(sizeof(float) * H * D), *w = malloc(sizeof(float) * H);
    float *keys = malloc(sizeof(float) * N * D), *sum = malloc(sizeof(float) * nb * 2 * D);
    float *s = malloc(sizeof(float) * N), *score = malloc(sizeof(float) * K);
    int32_t *idx = malloc(sizeof(int32_t) * K);
    rank_t *all = malloc(sizeof(rank_t) * N);
    tk_fill(q, (size_t)H * D, -1, 1);
    tk_fill(w, H, -0.5, 1);
    if (structured) {
        structured_keys(keys, N, D, B);
    } else {
        tk_fill(keys, (size_t)N * D, -1, 1);
    }
    assert_int_equal(st_cpu_block_summary(keys, N, D, B, sum), ST_OK);
    int scored = -1;
    assert_int_equal(st_cpu_indexer_topk(q, w, H, D, keys, N, B, sum, K, idx, score, &scored),
                     ST_OK);
    assert_int_equal(st_cpu_indexer_scores(q, w, 1, H, D, keys, N, s), ST_OK);
    for (int r = 0; r < N; r++) {
        all[r].s = s[r];
        all[r].i = r;
    }
    qsort(all, N, sizeof(rank_t), cmp_rank);
    for (int i = 0; i < K; i++) {
        assert_int_equal(idx[i], all[i].i);
        assert_true(score[i] == all[i].s);
    }
    printf("# topk structured=%d scored %d of %d blocks\n", structured, scored, nb);
    assert_true(scored >= 1 && scored <= nb);
    if (scored < nb) {
        *pruned_any = 1;
    }
    free(q), free(w), free(keys), free(sum), free(s), free(score), free(idx), free(all);
}

static void test_two_stage_equals_exact_topk(void **unused)
{
    FOR_EACH_PATH(p)
    {
        int pruned = 0;
        for (int trial = 0; trial < 3; trial++) {
            check_topk(0, &pruned);
            check_topk(1, &pruned);
        }
        /* The structured inputs must actually exercise pruning. */
        assert_true(pruned);
    }
}

static void test_topk_k_larger_than_rows(void **unused)
{
    int H = 2, D = 16, N = 10, B = 4;
    float q[2 * 16], w[2], keys[10 * 16], sum[3 * 2 * 16], score[10];
    int32_t idx[10];
    tk_fill(q, 32, -1, 1);
    tk_fill(w, 2, 0, 1);
    tk_fill(keys, 160, -1, 1);
    assert_int_equal(st_cpu_block_summary(keys, N, D, B, sum), ST_OK);
    assert_int_equal(st_cpu_indexer_topk(q, w, H, D, keys, N, B, sum, 50, idx, score, NULL), ST_OK);
    int seen[10] = {0};
    for (int i = 0; i < N; i++) {
        seen[idx[i]]++;
        if (i > 0) {
            assert_true(score[i] <= score[i - 1]);
        }
    }
    for (int i = 0; i < N; i++) {
        assert_int_equal(seen[i], 1);
    }
}

static void test_invalid_arguments(void **unused)
{
    float x[16] = {0};
    int32_t idx[1];
    assert_int_equal(st_cpu_indexer_scores(NULL, x, 1, 1, 4, x, 1, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_indexer_scores(x, x, 1, 0, 4, x, 1, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_block_summary(x, 4, 4, 0, x), ST_ERR_INVALID);
    assert_int_equal(st_cpu_indexer_topk(x, x, 1, 4, x, 4, 4, x, 0, idx, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_kernels_set_simd((st_simd_t)42), ST_ERR_INVALID);
}

int main(void)
{
    tk_seed();
    UNIT_RUN(cmocka_unit_test(test_scores_match_reference),
             cmocka_unit_test(test_bounds_hold_for_every_row),
             cmocka_unit_test(test_two_stage_equals_exact_topk),
             cmocka_unit_test(test_topk_k_larger_than_rows),
             cmocka_unit_test(test_invalid_arguments));
}
