/* test_arena.c - the memory budget and the arena: chunks, regions, pages,
 * trimming, and resident memory that never passes the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "arena.h"
#include "support/unit_main.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

struct regions {
    int added, removed;
    void *base[64];
    size_t len[64];
};

static void on_added(void *ctx, uint32_t region, void *base, size_t len)
{
    struct regions *r = ctx;

    assert_true(region < 64);
    r->added++;
    r->base[region] = base;
    r->len[region] = len;
}

static void on_removed(void *ctx, uint32_t region, void *base, size_t len)
{
    struct regions *r = ctx;

    assert_ptr_equal(r->base[region], base);
    assert_int_equal(r->len[region], len);
    r->removed++;
}

static void test_budget_limit_and_reserve(void **state)
{
    cd_budget_t b;
    uint64_t arena, meta, limit;

    cd_budget_init(&b, 10 * MiB, 2 * MiB);
    /* Arena growth leaves the metadata reserve alone. */
    assert_int_equal(cd_budget_charge_arena(&b, 8 * MiB), ST_OK);
    assert_int_equal(cd_budget_charge_arena(&b, 1), ST_ERR_EXHAUSTED);
    /* Metadata may use the reserve, but not more than the limit. */
    assert_int_equal(cd_budget_charge_meta(&b, 2 * MiB), ST_OK);
    assert_int_equal(cd_budget_charge_meta(&b, 1), ST_ERR_EXHAUSTED);
    cd_budget_read(&b, &arena, &meta, &limit);
    assert_int_equal(arena, 8 * MiB);
    assert_int_equal(meta, 2 * MiB);
    assert_int_equal(limit, 10 * MiB);
    /* Metadata may also take what the arena leaves. */
    cd_budget_release_arena(&b, 4 * MiB);
    assert_int_equal(cd_budget_charge_meta(&b, 3 * MiB), ST_OK);
    assert_int_equal(cd_budget_charge_arena(&b, 2 * MiB), ST_ERR_EXHAUSTED);
    assert_int_equal(cd_budget_charge_arena(&b, 1 * MiB), ST_OK);
    cd_budget_read(&b, &arena, &meta, NULL);
    assert_true(arena + meta <= 10 * MiB);
    cd_budget_destroy(&b);
}

/* A budget, an arena's configuration over it (64 MiB reserved, 4 MiB chunks
 * of 256 KiB pages, THP) and the regions the arena reports. */
typedef struct arena_fx {
    cd_budget_t b;
    cd_arena_config_t c;
    cd_arena_t a;
    struct regions r;
} arena_fx_t;

static void arena_config(arena_fx_t *f)
{
    f->c = (cd_arena_config_t){.reserve_bytes = 64 * MiB,
                               .chunk_bytes = 4 * MiB,
                               .page_bytes = 256 * KiB,
                               .huge = CD_HUGE_THP,
                               .budget = &f->b,
                               .region_added = on_added,
                               .region_removed = on_removed,
                               .cb_ctx = &f->r};
}

/* The budget of limit bytes less reserve, and the configuration over it. */
static void fx_init(arena_fx_t *f, uint64_t limit, uint64_t reserve)
{
    memset(&f->r, 0, sizeof(f->r));
    cd_budget_init(&f->b, limit, reserve);
    arena_config(f);
}

static void test_bad_geometry(void **state)
{
    arena_fx_t f;

    fx_init(&f, 64 * MiB, 0);
    f.c.page_bytes = 5000;
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_ERR_INVALID);
    arena_config(&f);
    f.c.chunk_bytes = 4 * MiB + 4096;
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_ERR_INVALID);
    arena_config(&f);
    f.c.budget = NULL;
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_ERR_INVALID);
    cd_budget_destroy(&f.b);
}

static void test_chunks_regions_and_pages(void **state)
{
    arena_fx_t f;
    uint64_t pages[64], p, arena;
    int n = 0;

    fx_init(&f, 64 * MiB, 0);
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_OK);
    assert_int_equal(f.r.added, 0); /* nothing committed yet */
    assert_int_equal(cd_arena_committed(&f.a), 0);

    /* 16 pages per chunk: the 17th page commits a second chunk. */
    for (n = 0; n < 17; n++) {
        assert_int_equal(cd_arena_pages_alloc(&f.a, 1, &pages[n]), ST_OK);
        memset(cd_arena_ptr(&f.a, pages[n] * f.c.page_bytes), n, f.c.page_bytes);
    }
    assert_int_equal(f.r.added, 2);
    assert_int_equal(cd_arena_committed(&f.a), 8 * MiB);
    assert_ptr_equal(f.r.base[0], f.a.ar_base);
    assert_ptr_equal(f.r.base[1], f.a.ar_base + 4 * MiB);
    assert_int_equal(f.r.len[1], 4 * MiB);
    /* Page runs stay in one chunk: a 16-page run needs a fresh chunk. */
    assert_int_equal(cd_arena_pages_alloc(&f.a, 16, &p), ST_OK);
    assert_int_equal(p % 16, 0);
    assert_int_equal(f.r.added, 3);
    assert_int_equal(cd_arena_pages_alloc(&f.a, 17, &p), ST_ERR_INVALID);
    assert_int_equal(cd_arena_pages_alloc(&f.a, 0, &p), ST_ERR_INVALID);

    /* Freed pages are reused before any growth. */
    cd_arena_pages_free(&f.a, pages[3], 1);
    assert_int_equal(cd_arena_pages_alloc(&f.a, 1, &p), ST_OK);
    assert_int_equal(p, pages[3]);
    assert_int_equal(f.r.added, 3);

    /* A wholly free chunk goes back on trim; the others stay. */
    cd_arena_pages_free(&f.a, 32, 16);
    assert_int_equal(cd_arena_trim(&f.a, 0), 4 * MiB);
    assert_int_equal(f.r.removed, 1);
    cd_budget_read(&f.b, &arena, NULL, NULL);
    assert_int_equal(arena, 8 * MiB);
    /* Page contents of live chunks survived. */
    assert_int_equal(((uint8_t *)cd_arena_ptr(&f.a, pages[5] * f.c.page_bytes))[100], 5);

    cd_arena_destroy(&f.a);
    assert_int_equal(f.r.removed, 3);
    cd_budget_read(&f.b, &arena, NULL, NULL);
    assert_int_equal(arena, 0);
    cd_budget_destroy(&f.b);
}

/* Growth stops at the limit, and what is resident in the mapping (mincore)
 * never passes the committed bytes, which never pass the limit. */
static void test_limit_and_resident(void **state)
{
    arena_fx_t f;
    uint64_t p, arena, meta, limit;
    st_status_t st;
    int pages = 0;

    fx_init(&f, 20 * MiB, 1 * MiB);
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_OK);
    while ((st = cd_arena_pages_alloc(&f.a, 1, &p)) == ST_OK) {
        memset(cd_arena_ptr(&f.a, p * f.c.page_bytes), 0xab, f.c.page_bytes); /* touch all */
        pages++;
    }
    assert_int_equal(st, ST_ERR_EXHAUSTED);
    /* 20 MiB less 1 MiB of reserve, less the page tables: 4 chunks. */
    assert_int_equal(pages, 4 * 16);
    cd_budget_read(&f.b, &arena, &meta, &limit);
    assert_true(arena + meta <= limit);
    assert_int_equal(arena, cd_arena_committed(&f.a));
    assert_true(cd_arena_resident(&f.a) > 0);
    assert_true(cd_arena_resident(&f.a) <= cd_arena_committed(&f.a));
    /* Trimmed chunks leave RAM. */
    for (uint64_t i = 0; i < 64; i++) {
        cd_arena_pages_free(&f.a, i, 1);
    }
    assert_int_equal(cd_arena_trim(&f.a, 0), 16 * MiB);
    assert_int_equal(cd_arena_resident(&f.a), 0);
    cd_arena_destroy(&f.a);
    cd_budget_destroy(&f.b);
}

/* Trim keeps the number of free chunks asked for; hugetlb works or falls
 * back to transparent huge pages, and the memory is usable either way. */
static void test_trim_keep_and_hugetlb(void **state)
{
    arena_fx_t f;
    uint64_t p;

    fx_init(&f, 64 * MiB, 0);
    f.c.huge = CD_HUGE_HUGETLB;
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_OK);
    assert_true(f.a.ar_huge == CD_HUGE_HUGETLB || f.a.ar_huge == CD_HUGE_THP);
    for (int i = 0; i < 48; i++) {
        assert_int_equal(cd_arena_pages_alloc(&f.a, 1, &p), ST_OK);
        memset(cd_arena_ptr(&f.a, p * f.c.page_bytes), 1, f.c.page_bytes);
    }
    assert_int_equal(f.r.added, 3);
    cd_arena_pages_free(&f.a, 16, 16);
    cd_arena_pages_free(&f.a, 32, 16);
    assert_int_equal(cd_arena_trim(&f.a, 1), 4 * MiB);
    assert_int_equal(cd_arena_trim(&f.a, 1), 0);
    assert_int_equal(cd_arena_committed(&f.a), 8 * MiB);
    assert_int_equal(cd_arena_trim(&f.a, 0), 4 * MiB);
    assert_int_equal(f.r.removed, 2);
    cd_arena_destroy(&f.a);
    cd_budget_destroy(&f.b);
}

/* The page tables of a huge reservation must fit in the budget. */
static void test_page_tables_charged(void **state)
{
    arena_fx_t f;
    uint64_t meta;

    fx_init(&f, 1 * MiB, 0);
    f.c.reserve_bytes = 1ull << 40; /* 1 TiB of 256 KiB pages: 4 MiB of tables */
    assert_int_equal(cd_arena_init(&f.a, &f.c), ST_ERR_EXHAUSTED);
    cd_budget_read(&f.b, NULL, &meta, NULL);
    assert_int_equal(meta, 0);
    cd_budget_destroy(&f.b);
}

int main(void)
{
    UNIT_RUN(
        cmocka_unit_test(test_budget_limit_and_reserve), cmocka_unit_test(test_bad_geometry),
        cmocka_unit_test(test_chunks_regions_and_pages), cmocka_unit_test(test_limit_and_resident),
        cmocka_unit_test(test_trim_keep_and_hugetlb), cmocka_unit_test(test_page_tables_charged));
}
