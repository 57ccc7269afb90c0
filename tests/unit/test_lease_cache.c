/* test_lease_cache.c - the data plane's lease cache (client/lease.c): hits,
 * misses, the lease's bound, replacement in a full set, invalidation, row
 * sums, and threads sharing one cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>

#include "lease.h"
#include "support/unit_hash.h"
#include "support/unit_main.h"

#define NOW 10000000000000ull /* an arbitrary monotonic time, in ns */

static st_hash_t key_hash(uint32_t i)
{
    return unit_hash(i, 0, 0xa5);
}

/* An entry of object i (kind KV, layer 3) at node 1, its lease ending at expiry. */
static sc_lc_ent_t ent(uint32_t i, uint64_t expiry)
{
    sc_lc_ent_t e = {.hash = key_hash(i),
                     .gen = 1,
                     .epoch = 7,
                     .offset = 4096ull * i,
                     .length = 1000 + i,
                     .expiry_ns = expiry,
                     .node = 1,
                     .region_id = 2,
                     .layer = 3,
                     .kind = ST_KIND_KV};

    return e;
}

static int find(sc_lc_t *lc, uint32_t i, uint64_t now, sc_lc_ent_t *out)
{
    st_hash_t h = key_hash(i);

    return sc_lc_find(lc, 1, &h, ST_KIND_KV, 3, now, NULL, NULL, out);
}

/* Packed sums (rowsum.h: 8 bytes each, little-endian) with sum r = base + r. */
static uint8_t *packed_sums(uint64_t n, uint64_t base)
{
    uint8_t *p = malloc(n * 8);

    for (uint64_t r = 0; p != NULL && r < n; r++) {
        for (int b = 0; b < 8; b++) {
            p[r * 8 + (uint64_t)b] = (uint8_t)((base + r) >> (8 * b));
        }
    }
    return p;
}

static void test_insert_and_hit(void **state)
{
    sc_lc_t lc;
    sc_lc_ent_t out, e = ent(5, NOW + 10 * SC_LC_MIN_LEFT);
    st_hash_t h = key_hash(5);

    (void)state;
    assert_int_equal(sc_lc_init(&lc, SC_LC_SETS), ST_OK);
    assert_false(find(&lc, 5, NOW, &out));
    sc_lc_put(&lc, &e);
    memset(&out, 0, sizeof(out));
    assert_true(find(&lc, 5, NOW, &out));
    assert_memory_equal(out.hash.b, e.hash.b, ST_HASH_BYTES);
    assert_int_equal(out.offset, e.offset);
    assert_int_equal(out.length, e.length);
    assert_int_equal(out.epoch, 7);
    assert_int_equal(out.region_id, 2);
    assert_int_equal(out.expiry_ns, e.expiry_ns);
    assert_null(out.sums);
    /* Another object, node, kind or layer is no hit. */
    assert_false(find(&lc, 6, NOW, &out));
    assert_false(sc_lc_find(&lc, 2, &h, ST_KIND_KV, 3, NOW, NULL, NULL, &out));
    assert_false(sc_lc_find(&lc, 1, &h, ST_KIND_IDX, 3, NOW, NULL, NULL, &out));
    assert_false(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 4, NOW, NULL, NULL, &out));
    /* Putting the object again replaces its entry. */
    e.offset = 77;
    sc_lc_put(&lc, &e);
    assert_true(find(&lc, 5, NOW, &out));
    assert_int_equal(out.offset, 77);
    sc_lc_destroy(&lc);
}

static void test_expiry(void **state)
{
    sc_lc_t lc;
    sc_lc_ent_t out, e = ent(9, NOW + SC_LC_MIN_LEFT + 1000);

    (void)state;
    assert_int_equal(sc_lc_init(&lc, 16), ST_OK);
    sc_lc_put(&lc, &e);
    /* A hit needs more than SC_LC_MIN_LEFT of the lease left. */
    assert_true(find(&lc, 9, NOW, &out));
    assert_true(find(&lc, 9, NOW + 999, &out));
    assert_false(find(&lc, 9, NOW + 1000, &out));
    assert_false(find(&lc, 9, NOW + SC_LC_MIN_LEFT + 1000, &out));
    /* An expired entry is still its object's slot: a fresh put renews it. */
    e.expiry_ns = NOW + 5 * SC_LC_MIN_LEFT;
    sc_lc_put(&lc, &e);
    assert_true(find(&lc, 9, NOW + 1000, &out));
    sc_lc_destroy(&lc);
}

static void test_eviction_at_capacity(void **state)
{
    sc_lc_t lc;
    sc_lc_ent_t out;

    (void)state;
    /* One set: every object competes for its SC_LC_WAYS slots. */
    assert_int_equal(sc_lc_init(&lc, 1), ST_OK);
    for (uint32_t i = 0; i < SC_LC_WAYS; i++) {
        /* Object 3's lease ends first. */
        sc_lc_ent_t e = ent(i, NOW + (i == 3 ? 2 : 10 + i) * SC_LC_MIN_LEFT);

        sc_lc_put(&lc, &e);
    }
    for (uint32_t i = 0; i < SC_LC_WAYS; i++) {
        assert_true(find(&lc, i, NOW, &out));
    }
    {
        sc_lc_ent_t e = ent(100, NOW + 50 * SC_LC_MIN_LEFT);

        sc_lc_put(&lc, &e);
    }
    assert_true(find(&lc, 100, NOW, &out));
    assert_int_equal(out.offset, 4096ull * 100);
    assert_false(find(&lc, 3, NOW, &out)); /* the one whose lease ended first went */
    for (uint32_t i = 0; i < SC_LC_WAYS; i++) {
        if (i != 3) {
            assert_true(find(&lc, i, NOW, &out));
        }
    }
    /* A dropped entry frees its slot: the next object takes it, nobody else goes. */
    {
        st_hash_t h = key_hash(5);
        sc_lc_ent_t e = ent(101, NOW + 3 * SC_LC_MIN_LEFT);

        sc_lc_drop(&lc, &h, ST_KIND_KV, 3);
        sc_lc_put(&lc, &e);
    }
    assert_false(find(&lc, 5, NOW, &out));
    assert_true(find(&lc, 101, NOW, &out));
    for (uint32_t i = 0; i < SC_LC_WAYS; i++) {
        if (i != 3 && i != 5) {
            assert_true(find(&lc, i, NOW, &out));
        }
    }
    sc_lc_destroy(&lc);
}

static void test_invalidation(void **state)
{
    sc_lc_t lc;
    sc_lc_ent_t out, e = ent(1, NOW + 10 * SC_LC_MIN_LEFT), f = ent(2, NOW + 10 * SC_LC_MIN_LEFT);
    st_hash_t h1 = key_hash(1), h3 = key_hash(3);

    (void)state;
    assert_int_equal(sc_lc_init(&lc, 1), ST_OK);
    e.row_bytes = 64;
    e.n_sums = 4;
    e.sums = packed_sums(4, 100); /* the cache takes them; drop frees them */
    sc_lc_put(&lc, &e);
    sc_lc_put(&lc, &f);
    sc_lc_drop(&lc, &h3, ST_KIND_KV, 3); /* not there: nothing happens */
    assert_true(find(&lc, 1, NOW, &out));
    sc_lc_drop(&lc, &h1, ST_KIND_IDX, 3); /* another kind: not this entry */
    assert_true(find(&lc, 1, NOW, &out));
    sc_lc_drop(&lc, &h1, ST_KIND_KV, 3);
    assert_false(find(&lc, 1, NOW, &out));
    assert_true(find(&lc, 2, NOW, &out));
    sc_lc_destroy(&lc);
}

static void test_row_sums(void **state)
{
    sc_lc_t lc;
    sc_lc_ent_t out, e = ent(4, NOW + 10 * SC_LC_MIN_LEFT), w = ent(8, NOW + 10 * SC_LC_MIN_LEFT);
    st_hash_t h = key_hash(4), hw = key_hash(8);
    uint32_t rows[3] = {0, 5, 9}, past[2] = {1, 10};
    uint64_t rsum[3] = {0};
    uint8_t dst[3 * 64];
    st_get_op_t op = {.block = 0,
                      .kind = ST_KIND_KV,
                      .layer = 3,
                      .dst = dst,
                      .dst_len = sizeof(dst),
                      .row_bytes = 64,
                      .rows = rows,
                      .n_rows = 3};

    (void)state;
    assert_int_equal(sc_lc_init(&lc, SC_LC_SETS), ST_OK);
    e.row_bytes = 64;
    e.n_sums = 10;
    e.sums = packed_sums(10, 1000);
    sc_lc_put(&lc, &e);
    sc_lc_put(&lc, &w); /* a whole object's entry: no sums */
    assert_true(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, &op, rsum, &out));
    assert_int_equal(rsum[0], 1000);
    assert_int_equal(rsum[1], 1005);
    assert_int_equal(rsum[2], 1009);
    assert_null(out.sums); /* the slot keeps its own */
    /* A row past the sums, another row size, no room, no sums: no hit. */
    op.rows = past;
    op.n_rows = 2;
    assert_false(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, &op, rsum, &out));
    op.rows = rows;
    op.n_rows = 3;
    op.row_bytes = 32;
    assert_false(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, &op, rsum, &out));
    op.row_bytes = 64;
    assert_false(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, &op, NULL, &out));
    assert_false(sc_lc_find(&lc, 1, &hw, ST_KIND_KV, 3, NOW, &op, rsum, &out));
    /* Without rows asked for, both are hits. */
    assert_true(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, NULL, NULL, &out));
    assert_true(sc_lc_find(&lc, 1, &hw, ST_KIND_KV, 3, NOW, NULL, NULL, &out));
    /* A new put of the object frees the old sums (checked under ASan). */
    e.sums = packed_sums(10, 2000);
    sc_lc_put(&lc, &e);
    assert_true(sc_lc_find(&lc, 1, &h, ST_KIND_KV, 3, NOW, &op, rsum, &out));
    assert_int_equal(rsum[1], 2005);
    sc_lc_destroy(&lc);
}

/* Threads put, find and drop objects of their own in one small shared
 * cache; every hit must be a whole entry of the object asked for. */
#define TH_N      4
#define TH_ROUNDS 20000

typedef struct {
    sc_lc_t *lc;
    uint32_t id;
    int bad;
} th_arg_t;

static void *th_main(void *p)
{
    th_arg_t *a = p;

    for (uint32_t r = 0; r < TH_ROUNDS; r++) {
        uint32_t i = a->id * 1000 + r % 16;
        sc_lc_ent_t e = ent(i, NOW + (10 + r % 7) * SC_LC_MIN_LEFT), out;
        st_hash_t h = key_hash(i);

        e.row_bytes = 64;
        e.n_sums = 2;
        e.sums = r % 3 == 0 ? packed_sums(2, i) : NULL;
        sc_lc_put(a->lc, &e);
        if (find(a->lc, i, NOW, &out) &&
            (memcmp(out.hash.b, h.b, ST_HASH_BYTES) != 0 || out.offset != 4096ull * i ||
             out.length != 1000 + i || out.sums != NULL)) {
            a->bad = 1;
        }
        if (r % 5 == 0) {
            sc_lc_drop(a->lc, &h, ST_KIND_KV, 3);
        }
    }
    return NULL;
}

static void test_threads_share(void **state)
{
    sc_lc_t lc;
    pthread_t th[TH_N];
    th_arg_t arg[TH_N];
    int hits = 0;

    (void)state;
    assert_int_equal(sc_lc_init(&lc, 2), ST_OK); /* 16 slots for 64 objects: constant eviction */
    for (uint32_t t = 0; t < TH_N; t++) {
        arg[t] = (th_arg_t){&lc, t + 1, 0};
        assert_int_equal(pthread_create(&th[t], NULL, th_main, &arg[t]), 0);
    }
    for (uint32_t t = 0; t < TH_N; t++) {
        pthread_join(th[t], NULL);
        assert_false(arg[t].bad);
    }
    for (uint32_t t = 1; t <= TH_N; t++) {
        for (uint32_t i = 0; i < 16; i++) {
            sc_lc_ent_t out;

            hits += find(&lc, t * 1000 + i, NOW, &out);
        }
    }
    assert_true(hits > 0 && hits <= 2 * (int)SC_LC_WAYS);
    sc_lc_destroy(&lc);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_insert_and_hit), cmocka_unit_test(test_expiry),
             cmocka_unit_test(test_eviction_at_capacity), cmocka_unit_test(test_invalidation),
             cmocka_unit_test(test_row_sums), cmocka_unit_test(test_threads_share));
}
