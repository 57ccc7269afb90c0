/* test_htab.c - the open-addressing table against a plain array, through
 * growth and backward-shift deletions, and its budget charges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "arena.h"
#include "htab.h"
#include "support/unit_main.h"

static void test_against_array(void **state)
{
    enum { N = 20000 };
    cd_budget_t b;
    cd_htab_t t;
    static st_hash_t keys[N];
    static int present[N];
    unsigned seed = 7;
    uint64_t meta;

    cd_budget_init(&b, 64 << 20, 0);
    cd_htab_init(&t, &b);
    for (int i = 0; i < N; i++) {
        /* Ids in sequence make long clusters; mix a few real hashes in. */
        keys[i] = cd_htab_id_key(i % 3 ? (uint64_t)i : (uint64_t)rand_r(&seed) << 20 | i);
    }
    for (int step = 0; step < 200000; step++) {
        int i = rand_r(&seed) % N;
        uint32_t tag = (uint32_t)(i % 2);

        if (present[i]) {
            assert_ptr_equal(cd_htab_find(&t, &keys[i], tag), &keys[i]);
            assert_null(cd_htab_find(&t, &keys[i], tag ^ 1)); /* tags keep spaces apart */
            if (rand_r(&seed) % 2) {
                assert_ptr_equal(cd_htab_remove(&t, &keys[i], tag), &keys[i]);
                present[i] = 0;
            }
        } else {
            assert_null(cd_htab_find(&t, &keys[i], tag));
            assert_null(cd_htab_remove(&t, &keys[i], tag));
            assert_int_equal(cd_htab_insert(&t, &keys[i], tag, &keys[i]), ST_OK);
            present[i] = 1;
        }
    }
    size_t count = 0;
    for (int i = 0; i < N; i++) {
        count += (size_t)present[i];
        assert_true((cd_htab_find(&t, &keys[i], (uint32_t)(i % 2)) != NULL) == present[i]);
    }
    assert_int_equal(count, t.ht_count);
    cd_budget_read(&b, NULL, &meta, NULL);
    assert_int_equal(meta, cd_htab_bytes(&t));
    cd_htab_destroy(&t);
    cd_budget_read(&b, NULL, &meta, NULL);
    assert_int_equal(meta, 0);
    cd_budget_destroy(&b);
}

static void test_budget_refuses_growth(void **state)
{
    cd_budget_t b;
    cd_htab_t t;

    cd_budget_init(&b, 64 * sizeof(cd_htab_entry_t), 0);
    cd_htab_init(&t, &b);
    for (uint64_t i = 0; i < 48; i++) {
        st_hash_t k = cd_htab_id_key(i);

        assert_int_equal(cd_htab_insert(&t, &k, 0, &t), ST_OK);
    }
    st_hash_t k = cd_htab_id_key(1000);
    assert_int_equal(cd_htab_insert(&t, &k, 0, &t), ST_ERR_EXHAUSTED);
    assert_int_equal(t.ht_count, 48);
    assert_null(cd_htab_find(&t, &k, 0));
    cd_htab_destroy(&t);
    cd_budget_destroy(&b);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_against_array), cmocka_unit_test(test_budget_refuses_growth));
}
