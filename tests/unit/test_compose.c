/* test_compose.c - longest prefix and resumable prefix from segment answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "compose.h"
#include "support/unit_main.h"

#define S 16

static void seg(compose_seg_answer_t *a, uint64_t first, uint32_t matched, int answered,
                const uint64_t *kda, size_t n_kda)
{
    a->first_block = first;
    a->n_blocks = S;
    a->matched = matched;
    a->answered = answered;
    a->kda = kda;
    a->n_kda = n_kda;
}

static void test_full_partial_and_lost(void **state)
{
    compose_seg_answer_t a[4];
    compose_prefix_t p;
    static const uint64_t k0[] = {15}, k1[] = {31}, k2[] = {40, 47};

    seg(&a[0], 0, S, 1, k0, 1);
    seg(&a[1], 16, S, 1, k1, 1);
    seg(&a[2], 32, 10, 1, k2, 2);
    seg(&a[3], 48, S, 1, NULL, 0);
    compose_prefix(a, 4, &p);
    assert_int_equal(p.matched_blocks, 42); /* 16 + 16 + 10 */
    assert_int_equal(p.segments_full, 2);
    /* 40 is inside the matched 10 blocks of segment 2; 47 is not. */
    assert_int_equal(p.resumable_blocks, 41);

    /* The owner of segment 1 is down: the prefix ends before it, and a
     * checkpoint beyond is never claimed. */
    seg(&a[1], 16, S, 0, k1, 1);
    compose_prefix(a, 4, &p);
    assert_int_equal(p.matched_blocks, 16);
    assert_int_equal(p.resumable_blocks, 16);

    /* No checkpoints at all: nothing is resumable. */
    seg(&a[0], 0, S, 1, NULL, 0);
    compose_prefix(a, 1, &p);
    assert_int_equal(p.matched_blocks, 16);
    assert_int_equal(p.resumable_blocks, 0);

    /* Nothing asked. */
    compose_prefix(a, 0, &p);
    assert_int_equal(p.matched_blocks, 0);
}

static void test_gap_ends_prefix(void **state)
{
    compose_seg_answer_t a[2];
    compose_prefix_t p;

    seg(&a[0], 0, S, 1, NULL, 0);
    seg(&a[1], 32, S, 1, NULL, 0); /* segment 16..31 missing from the answers */
    compose_prefix(a, 2, &p);
    assert_int_equal(p.matched_blocks, 16);
}

/* Random answers against a block-by-block model. */
static void test_random_against_model(void **state)
{
    srand(12345);
    for (int iter = 0; iter < 2000; iter++) {
        compose_seg_answer_t a[8];
        uint64_t kda[8][4];
        int present[8 * S] = {0}, ckpt[8 * S] = {0};
        size_t n = 1 + (size_t)(rand() % 8);
        uint64_t want = 0, want_res = 0;
        compose_prefix_t p;

        for (size_t k = 0; k < n; k++) {
            uint32_t m = (rand() % 3 == 0) ? (uint32_t)(rand() % S) : S;
            int up = rand() % 10 != 0;
            size_t nk = (size_t)(rand() % 3);

            for (size_t i = 0; i < nk; i++) {
                kda[k][i] = k * S + (uint64_t)(rand() % S);
            }
            if (nk == 2 && kda[k][0] > kda[k][1]) {
                uint64_t t = kda[k][0];
                kda[k][0] = kda[k][1];
                kda[k][1] = t;
            }
            seg(&a[k], k * S, m, up, kda[k], nk);
            for (uint32_t b = 0; b < m && up; b++) {
                present[k * S + b] = 1;
            }
            for (size_t i = 0; i < nk; i++) {
                ckpt[kda[k][i]] = 1;
            }
        }
        while (want < n * S && present[want]) {
            want++;
        }
        for (uint64_t b = 0; b < want; b++) {
            if (ckpt[b]) {
                want_res = b + 1;
            }
        }
        compose_prefix(a, n, &p);
        assert_int_equal(p.matched_blocks, want);
        assert_int_equal(p.resumable_blocks, want_res);
    }
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_full_partial_and_lost), cmocka_unit_test(test_gap_ends_prefix),
             cmocka_unit_test(test_random_against_model));
}
