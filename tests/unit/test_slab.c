/* test_slab.c - size classes, extent reuse, generations, large extents,
 * eviction through the hook, the limit and the exhaustion message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "slab.h"
#include "support/unit_main.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

typedef struct fixture {
    cd_budget_t budget;
    cd_slab_t slab;
} fixture_t;

static fixture_t *make(uint64_t limit, uint64_t reserve)
{
    fixture_t *f = calloc(1, sizeof(*f));
    cd_slab_config_t c;

    assert_non_null(f);
    cd_budget_init(&f->budget, limit, 0);
    memset(&c, 0, sizeof(c));
    c.arena.reserve_bytes = reserve;
    c.arena.chunk_bytes = 4 * MiB;
    c.arena.page_bytes = 1 * MiB;
    c.arena.huge = CD_HUGE_OFF;
    c.arena.budget = &f->budget;
    assert_int_equal(cd_slab_init(&f->slab, &c), ST_OK);
    return f;
}

static void unmake(fixture_t *f)
{
    cd_slab_destroy(&f->slab);
    cd_budget_destroy(&f->budget);
    free(f);
}

static void test_size_classes(void **state)
{
    fixture_t *f = make(64 * MiB, 64 * MiB);
    cd_slab_t *s = &f->slab;

    assert_int_equal(s->sl_classes[0].sc_size, 64);
    assert_int_equal(s->sl_classes[s->sl_n_classes - 1].sc_size, 1 * MiB);
    for (uint32_t i = 1; i < s->sl_n_classes; i++) {
        uint32_t a = s->sl_classes[i - 1].sc_size, b = s->sl_classes[i].sc_size;

        assert_true(b > a);
        assert_int_equal(b % 16, 0);
        /* About 1.25 apart (16-byte rounding makes small steps bigger). */
        assert_true(b <= a * 1.25 + 16 || i == s->sl_n_classes - 1);
    }
    assert_int_equal(cd_slab_class_for(s, 1), 0);
    assert_int_equal(cd_slab_class_for(s, 64), 0);
    assert_int_equal(cd_slab_class_for(s, 65), 1);
    for (uint64_t len = 1; len <= 1 * MiB; len = len * 3 + 1) {
        uint32_t c = cd_slab_class_for(s, len);

        assert_true(s->sl_classes[c].sc_size >= len);
        assert_true(c == 0 || s->sl_classes[c - 1].sc_size < len);
    }
    assert_int_equal(cd_slab_class_for(s, 1 * MiB + 1), CD_SLAB_LARGE);
    unmake(f);
}

static void test_reuse_changes_generation(void **state)
{
    fixture_t *f = make(64 * MiB, 64 * MiB);
    cd_extent_t a, b, c;

    assert_int_equal(cd_slab_alloc(&f->slab, 100, &a, NULL), ST_OK);
    assert_int_equal(cd_slab_alloc(&f->slab, 100, &b, NULL), ST_OK);
    assert_true(a.offset != b.offset);
    assert_true(a.gen != b.gen);
    assert_int_equal(a.size, f->slab.sl_classes[a.cls].sc_size);
    assert_int_equal(cd_slab_free(&f->slab, &a), ST_OK);
    assert_int_equal(cd_slab_alloc(&f->slab, 90, &c, NULL), ST_OK);
    assert_int_equal(c.offset, a.offset); /* the freed slot comes back */
    assert_true(c.gen > b.gen);           /* with a generation never seen */
    /* A double free is refused, not obeyed. */
    assert_int_equal(cd_slab_free(&f->slab, &a), ST_OK); /* c is at a's place */
    assert_int_equal(cd_slab_free(&f->slab, &c), ST_ERR_INTERNAL);
    assert_int_equal(cd_slab_free(&f->slab, &b), ST_OK);
    assert_int_equal(f->slab.sl_used_bytes, 0);
    unmake(f);
}

/* Random sizes: extents never overlap, stay in one region, and keep their
 * bytes; a page emptied by one class serves another. */
static void test_random_extents_disjoint(void **state)
{
    enum { N = 3000 };
    fixture_t *f = make(512 * MiB, 512 * MiB);
    cd_extent_t *e = calloc(N, sizeof(*e));
    uint64_t *len = calloc(N, sizeof(*len));
    unsigned seed = 12345;

    assert_non_null(e);
    assert_non_null(len);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++) {
            uint64_t r = (uint64_t)rand_r(&seed);

            len[i] = (r % 40 == 0) ? 1 + r % (3 * MiB) : 1 + r % (64 * KiB);
            assert_int_equal(cd_slab_alloc(&f->slab, len[i], &e[i], NULL), ST_OK);
            assert_true(e[i].size >= len[i]);
            assert_int_equal(e[i].region, e[i].offset / (4 * MiB));
            assert_true(cd_extent_region_offset(&f->slab, &e[i]) + e[i].size <= 4 * MiB);
            memset(cd_extent_ptr(&f->slab, &e[i]), i & 0xff, len[i]);
        }
        for (int i = 0; i < N; i++) {
            uint8_t *p = cd_extent_ptr(&f->slab, &e[i]);

            assert_int_equal(p[0], i & 0xff);
            assert_int_equal(p[len[i] - 1], i & 0xff);
        }
        for (int i = 0; i < N; i++) {
            assert_int_equal(cd_slab_free(&f->slab, &e[i]), ST_OK);
        }
        assert_int_equal(f->slab.sl_used_bytes, 0);
        for (uint32_t c = 0; c < f->slab.sl_n_classes; c++) {
            assert_int_equal(f->slab.sl_classes[c].sc_pages, 0);
        }
    }
    free(e);
    free(len);
    unmake(f);
}

/* A FIFO of live extents as the evictor. */
struct fifo {
    cd_slab_t *slab;
    cd_extent_t e[4096];
    int head, tail;
    int evictions;
};

static int fifo_evict(void *ctx)
{
    struct fifo *q = ctx;

    if (q->head == q->tail) {
        return 0;
    }
    assert_int_equal(cd_slab_free(q->slab, &q->e[q->head % 4096]), ST_OK);
    q->head++;
    q->evictions++;
    return 1;
}

static uint64_t fifo_evictable(void *ctx)
{
    struct fifo *q = ctx;

    return (uint64_t)(q->tail - q->head) * 4096;
}

static void test_limit_eviction_and_message(void **state)
{
    fixture_t *f = make(16 * MiB, 64 * MiB);
    static struct fifo q;
    cd_slab_evictor_t ev = {fifo_evict, fifo_evictable, &q};
    char msg[CD_SLAB_MSG_LEN];
    uint64_t arena, meta, limit;
    cd_extent_t x;

    memset(&q, 0, sizeof(q));
    q.slab = &f->slab;
    /* Without an evictor, allocation stops at the limit. */
    for (;;) {
        st_status_t st = cd_slab_alloc(&f->slab, 4000, &q.e[q.tail % 4096], msg);

        cd_budget_read(&f->budget, &arena, &meta, &limit);
        assert_true(arena + meta <= limit);
        if (st != ST_OK) {
            assert_int_equal(st, ST_ERR_EXHAUSTED);
            break;
        }
        q.tail++;
        assert_true(q.tail < 4096);
    }
    assert_non_null(strstr(msg, "requested=4000"));
    assert_non_null(strstr(msg, "limit=16777216"));
    assert_non_null(strstr(msg, "used="));
    assert_non_null(strstr(msg, "evictable=0"));
    /* With one, it evicts the oldest and goes on. */
    cd_slab_set_evictor(&f->slab, &ev);
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(cd_slab_alloc(&f->slab, 4000, &q.e[q.tail % 4096], msg), ST_OK);
        q.tail++;
        cd_budget_read(&f->budget, &arena, &meta, &limit);
        assert_true(arena + meta <= limit);
    }
    assert_true(q.evictions >= 2000);
    /* A large extent needs whole free pages: the evictor frees enough. */
    assert_int_equal(cd_slab_alloc(&f->slab, 3 * MiB, &x, msg), ST_OK);
    assert_int_equal(x.cls, CD_SLAB_LARGE);
    assert_int_equal(x.size, 3 * MiB);
    /* Sizes out of range are refused with the range. */
    assert_int_equal(cd_slab_alloc(&f->slab, 0, &x, msg), ST_ERR_INVALID);
    assert_int_equal(cd_slab_alloc(&f->slab, 4 * MiB + 1, &x, msg), ST_ERR_INVALID);
    assert_non_null(strstr(msg, "4194304"));
    unmake(f);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_size_classes), cmocka_unit_test(test_reuse_changes_generation),
             cmocka_unit_test(test_random_extents_disjoint),
             cmocka_unit_test(test_limit_eviction_and_message));
}
