/* test_ring.c - consistent-hash placement: balance, stability, routing around. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ring.h"
#include "support/unit_hash.h"
#include "support/unit_main.h"

#define N_SEG 20000

static const char *const names[] = {"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003",
                                    "127.0.0.1:7004"};

static st_hash_t seg_hash(uint32_t i)
{
    return unit_hash(i, 0, 0x5a);
}

static void test_balance_and_determinism(void **state)
{
    ring_t a, b;
    size_t count[4] = {0};

    assert_int_equal(ring_init(&a, names, 4, 128), ST_OK);
    assert_int_equal(ring_init(&b, names, 4, 128), ST_OK);
    for (uint32_t i = 0; i < N_SEG; i++) {
        st_hash_t h = seg_hash(i);
        uint32_t o = ring_home(&a, &h);

        assert_true(o < 4);
        assert_int_equal(o, ring_home(&b, &h));
        count[o]++;
    }
    /* With 128 virtual nodes each of 4 nodes holds a fair share (25%). */
    for (int n = 0; n < 4; n++) {
        assert_true(count[n] > N_SEG * 15 / 100);
        assert_true(count[n] < N_SEG * 35 / 100);
    }
    ring_destroy(&a);
    ring_destroy(&b);
}

static void test_replicas_are_distinct(void **state)
{
    ring_t r;
    uint32_t nodes[4];

    assert_int_equal(ring_init(&r, names, 4, 64), ST_OK);
    for (uint32_t i = 0; i < 1000; i++) {
        st_hash_t h = seg_hash(i);
        size_t n = ring_place(&r, &h, nodes, 3);

        assert_int_equal(n, 3);
        assert_int_equal(nodes[0], ring_home(&r, &h));
        assert_true(nodes[0] != nodes[1] && nodes[1] != nodes[2] && nodes[0] != nodes[2]);
    }
    /* Asking for more replicas than nodes gives each node once. */
    {
        st_hash_t h = seg_hash(7);

        assert_int_equal(ring_place(&r, &h, nodes, 4), 4);
    }
    ring_destroy(&r);
}

static void test_down_node_routed_around_and_back(void **state)
{
    ring_t r;
    uint32_t before[N_SEG], nodes[2];
    size_t moved = 0;

    assert_int_equal(ring_init(&r, names, 4, 128), ST_OK);
    for (uint32_t i = 0; i < N_SEG; i++) {
        st_hash_t h = seg_hash(i);

        assert_int_equal(ring_place(&r, &h, &before[i], 1), 1);
    }
    ring_set_up(&r, 2, 0);
    for (uint32_t i = 0; i < N_SEG; i++) {
        st_hash_t h = seg_hash(i);

        assert_int_equal(ring_place(&r, &h, nodes, 2), 2);
        assert_true(nodes[0] != 2 && nodes[1] != 2);
        if (before[i] != 2) {
            /* Consistency: only the down node's segments move. */
            assert_int_equal(nodes[0], before[i]);
        } else {
            moved++;
        }
    }
    assert_true(moved > 0);
    ring_set_up(&r, 2, 1);
    for (uint32_t i = 0; i < N_SEG; i++) {
        st_hash_t h = seg_hash(i);

        assert_int_equal(ring_place(&r, &h, nodes, 1), 1);
        assert_int_equal(nodes[0], before[i]);
    }
    for (uint32_t n = 0; n < 4; n++) {
        ring_set_up(&r, n, 0);
    }
    {
        st_hash_t h = seg_hash(1);

        assert_int_equal(ring_place(&r, &h, nodes, 2), 0);
    }
    ring_destroy(&r);
}

static void test_invalid(void **state)
{
    ring_t r;
    const char *dup[] = {"a:1", "b:2", "a:1"};

    assert_int_equal(ring_init(&r, dup, 3, 16), ST_ERR_INVALID);
    assert_int_equal(ring_init(&r, dup, 0, 16), ST_ERR_INVALID);
    assert_int_equal(ring_init(&r, dup, 2, 0), ST_ERR_INVALID);
}

/* A ring rebuilt with a node left (NULL) and one added places every segment
 * where a fresh ring over the same names does (the daemons build theirs
 * fresh over the serving members; a client rebuilds its own in place). */
static void test_rebuild_matches_a_fresh_ring(void **state)
{
    const char *first[] = {"10.0.0.1:7700", "10.0.0.2:7700", "10.0.0.3:7700"};
    const char *later[] = {"10.0.0.1:7700", NULL, "10.0.0.3:7700", "10.0.0.4:7700"};
    const char *fresh_names[] = {"10.0.0.4:7700", "10.0.0.3:7700", "10.0.0.1:7700"};
    ring_t r, fresh;

    (void)state;
    assert_int_equal(ring_init(&r, first, 3, 64), ST_OK);
    assert_int_equal(ring_rebuild(&r, later, 2), ST_ERR_INVALID); /* may not shrink */
    assert_int_equal(ring_rebuild(&r, later, 4), ST_OK);
    assert_int_equal(ring_n_nodes(&r), 4);
    assert_int_equal(ring_init(&fresh, fresh_names, 3, 64), ST_OK);
    for (uint32_t i = 0; i < 2000; i++) {
        st_hash_t h = seg_hash(i);
        uint32_t a[3], b[3];

        assert_int_equal(ring_place(&r, &h, a, 3), 3);
        assert_int_equal(ring_place(&fresh, &h, b, 3), 3);
        for (int k = 0; k < 3; k++) {
            assert_string_equal(later[a[k]], fresh_names[b[k]]);
            assert_int_not_equal(a[k], 1); /* nothing on the node that left */
        }
    }
    {
        const char *dup[] = {"10.0.0.1:7700", NULL, "10.0.0.1:7700", "x:1"};
        const char *none[] = {NULL, NULL, NULL, NULL};

        assert_int_equal(ring_rebuild(&r, dup, 4), ST_ERR_INVALID);
        assert_int_equal(ring_rebuild(&r, none, 4), ST_ERR_INVALID);
    }
    ring_destroy(&r);
    ring_destroy(&fresh);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_balance_and_determinism),
             cmocka_unit_test(test_replicas_are_distinct),
             cmocka_unit_test(test_down_node_routed_around_and_back),
             cmocka_unit_test(test_invalid), cmocka_unit_test(test_rebuild_matches_a_fresh_ring));
}
