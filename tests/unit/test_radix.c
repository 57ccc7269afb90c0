/* test_radix.c - the prefix index: inserts, lookups of whole, prefix and
 * diverging chains, run splits, per-segment answers and KDA checkpoints,
 * remote-parent roots and their adoption, leaf-first eviction, holds, and a
 * randomized run against a naive model (seed printed on failure). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "arena.h"
#include "radix.h"
#include "support/unit_hash.h"
#include "support/unit_main.h"

static cd_budget_t budget;
static cd_radix_t rx;

static st_hash_t H(uint32_t chain, uint32_t i)
{
    return unit_hash(chain, i, 0x5a);
}

static int setup(void **state)
{
    cd_budget_init(&budget, 256 << 20, 0);
    cd_radix_init(&rx, &budget);
    return 0;
}

static int teardown(void **state)
{
    uint64_t meta;

    cd_radix_destroy(&rx);
    cd_budget_read(&budget, NULL, &meta, NULL);
    assert_int_equal(meta, 0); /* every charge was given back */
    cd_budget_destroy(&budget);
    return 0;
}

static cd_block_t *find(uint32_t chain, uint32_t i)
{
    st_hash_t h = H(chain, i);

    return cd_radix_find(&rx, &h);
}

static void assert_hash(const cd_block_t *b, uint32_t chain, uint32_t i)
{
    st_hash_t h = H(chain, i);

    assert_non_null(b);
    assert_memory_equal(&b->bk_hash, &h, sizeof(h));
}

static void check(void)
{
    char msg[256];

    if (cd_radix_check(&rx, msg) != ST_OK) {
        fail_msg("radix invariant: %s", msg);
    }
}

/* Inserts blocks [from, to) of a chain whose block i has parent i-1; block
 * from's parent is `parent` (NULL: none). Marks KV layer 0 present. */
static void insert_run(uint32_t chain, uint32_t from, uint32_t to, const st_hash_t *parent)
{
    for (uint32_t i = from; i < to; i++) {
        st_hash_t h = H(chain, i), p = i > from ? H(chain, i - 1) : (parent ? *parent : h);
        cd_block_t *b;
        int created;

        assert_int_equal(cd_radix_prepare(&rx, i > from || parent ? &p : NULL), ST_OK);
        assert_int_equal(cd_radix_insert(&rx, &h, i > from || parent ? &p : NULL, i, &b, &created),
                         ST_OK);
        assert_true(created);
        b->bk_present[CD_KIND_KV][0] |= 1;
    }
}

static uint32_t lookup(uint32_t chain, uint32_t n, const cd_require_t *req)
{
    st_hash_t *hs = malloc(n * sizeof(*hs));
    cd_segment_t seg = {0, n, hs};
    cd_seg_answer_t ans;
    uint64_t kda[64];
    size_t kn = 0;

    for (uint32_t i = 0; i < n; i++) {
        hs[i] = H(chain, i);
    }
    cd_radix_lookup(&rx, &seg, req, 1000, &ans, kda, 64, &kn, NULL, NULL);
    free(hs);
    return ans.matched;
}

static const cd_require_t kv0 = {1u << CD_KIND_KV, {1, 0}};

/* The blocks matched (KV layer 0, 5 segments of room) by one segment of n
 * hashes into hs: chain a's up to block shared, chain b's from there on. */
static uint32_t branch_matched(st_hash_t *hs, uint32_t n, uint32_t shared, uint32_t a, uint32_t b)
{
    cd_segment_t seg = {0, n, hs};
    cd_seg_answer_t ans;
    size_t kn = 0;

    for (uint32_t i = 0; i < n; i++) {
        hs[i] = i < shared ? H(a, i) : H(b, i);
    }
    cd_radix_lookup(&rx, &seg, &kv0, 5, &ans, NULL, 0, &kn, NULL, NULL);
    return ans.matched;
}

static void test_chain_prefix_and_divergence(void **state)
{
    insert_run(1, 0, 100, NULL);
    check();
    assert_int_equal(rx.rx_nodes, 1); /* one compressed run */
    assert_int_equal(lookup(1, 100, &kv0), 100);
    assert_int_equal(lookup(1, 40, &kv0), 40);
    assert_int_equal(lookup(1, 150, &kv0), 100); /* only the prefix that is here */
    assert_int_equal(lookup(2, 10, &kv0), 0);
    /* A chain diverging after block 59: chain 3 shares 0..59 with chain 1. */
    st_hash_t *hs = malloc(80 * sizeof(*hs));
    assert_int_equal(branch_matched(hs, 80, 60, 1, 3), 60);
    /* Requirements: layer 1 is absent everywhere. */
    cd_require_t kv01 = {1u << CD_KIND_KV, {3, 0}};
    assert_int_equal(lookup(1, 100, &kv01), 0);
    cd_require_t any = {0, {0, 0}};
    assert_int_equal(lookup(1, 100, &any), 100);
    cd_radix_find(&rx, &hs[10])->bk_present[CD_KIND_KV][0] = 0;
    assert_int_equal(lookup(1, 100, &kv0), 10);
    free(hs);
}

static void test_split_of_a_run(void **state)
{
    insert_run(1, 0, 10, NULL);
    assert_int_equal(rx.rx_nodes, 1);
    /* A branch after block 4: the run splits into [0..4] and [5..9]. */
    st_hash_t p = H(1, 4);
    insert_run(2, 5, 8, &p);
    check();
    assert_int_equal(rx.rx_nodes, 3);
    assert_int_equal(rx.rx_splits, 1);
    cd_block_t *b4 = cd_radix_find(&rx, &p);
    st_hash_t h5 = H(1, 5), h9 = H(1, 9), h25 = H(2, 5);
    assert_int_equal(b4->bk_off, 4);
    assert_int_equal(b4->bk_node->rn_len, 5);
    assert_int_equal(b4->bk_node->rn_nchildren, 2);
    assert_int_equal(cd_radix_find(&rx, &h5)->bk_off, 0);
    assert_int_equal(cd_radix_find(&rx, &h9)->bk_off, 4);
    assert_ptr_equal(cd_radix_find(&rx, &h25)->bk_node->rn_parent, b4->bk_node);
    assert_int_equal(lookup(1, 10, &kv0), 10);
    /* The branch is only a suffix: its lookup goes through chain 1's blocks. */
    st_hash_t hs[8];
    assert_int_equal(branch_matched(hs, 8, 5, 1, 2), 8);
    /* Branching at the end of a run with no children extends it instead. */
    st_hash_t p9 = H(1, 9);
    insert_run(4, 10, 12, &p9);
    assert_int_equal(rx.rx_nodes, 3);
    check();
}

static void test_segments_and_checkpoints(void **state)
{
    enum { NB = 64, SEG = 16 };
    st_hash_t hs[NB];
    cd_segment_t segs[NB / SEG];
    cd_seg_answer_t ans[NB / SEG];
    uint64_t kda[NB];
    size_t kn = 0;

    insert_run(1, 0, 40, NULL); /* blocks 40..63 are missing */
    for (int i = 0; i < NB; i++) {
        hs[i] = H(1, (uint32_t)i);
        if (i < 40 && (i % 16 == 15 || i == 37)) {
            cd_radix_find(&rx, &hs[i])->bk_present[CD_KIND_KDA][0] = 1;
        }
    }
    for (int s = 0; s < NB / SEG; s++) {
        segs[s].first_block = (uint64_t)s * SEG;
        segs[s].n = SEG;
        segs[s].hashes = &hs[s * SEG];
    }
    for (int s = 0; s < NB / SEG; s++) {
        cd_radix_lookup(&rx, &segs[s], &kv0, 7, &ans[s], kda, NB, &kn, NULL, NULL);
    }
    assert_int_equal(ans[0].matched, 16);
    assert_int_equal(ans[1].matched, 16);
    assert_int_equal(ans[2].matched, 8);
    assert_int_equal(ans[3].matched, 0);
    assert_int_equal(kn, 3);
    assert_int_equal(kda[0], 15);
    assert_int_equal(kda[1], 31);
    assert_int_equal(kda[2], 37);
    assert_int_equal(ans[0].kda_count, 1);
    assert_int_equal(ans[2].kda_first, 2);
    assert_int_equal(ans[2].kda_count, 1);
    assert_int_equal(ans[3].kda_count, 0);
}

static void test_remote_parent_roots_and_adoption(void **state)
{
    /* Segment 1 (blocks 16..31) arrives before segment 0. */
    st_hash_t p15 = H(1, 15);
    insert_run(1, 16, 32, &p15);
    check();
    cd_block_t *b16 = find(1, 16);
    assert_null(b16->bk_node->rn_parent);
    assert_true(b16->bk_node->rn_has_remote);
    assert_memory_equal(&b16->bk_node->rn_remote_parent, &p15, sizeof(p15));
    /* It answers for its own segment. */
    st_hash_t hs[16];
    for (int i = 0; i < 16; i++) {
        hs[i] = H(1, (uint32_t)(16 + i));
    }
    cd_segment_t seg = {16, 16, hs};
    cd_seg_answer_t ans;
    size_t kn = 0;
    cd_radix_lookup(&rx, &seg, &kv0, 1, &ans, NULL, 0, &kn, NULL, NULL);
    assert_int_equal(ans.matched, 16);
    /* As a leaf it is evictable; block 31 goes first. */
    assert_ptr_equal(cd_radix_victim(&rx), cd_radix_find(&rx, &hs[15]));
    /* Segment 0 arrives: block 15 adopts the root. */
    insert_run(1, 0, 16, NULL);
    check();
    assert_int_equal(rx.rx_adoptions, 1);
    assert_false(b16->bk_node->rn_has_remote);
    assert_ptr_equal(b16->bk_node->rn_parent, cd_radix_find(&rx, &p15)->bk_node);
    /* Now nothing of segment 0 is evictable before segment 1 is gone. */
    for (int i = 0; i < 32; i++) {
        cd_block_t *v = cd_radix_victim(&rx);

        assert_non_null(v);
        assert_hash(v, 1, (uint32_t)(31 - i));
        cd_radix_remove(&rx, v);
        check();
    }
    assert_null(cd_radix_victim(&rx));
    assert_int_equal(rx.rx_nodes, 0);
}

static void test_eviction_is_leaf_first_and_holds(void **state)
{
    st_hash_t p3 = H(1, 3), h7 = H(1, 7), h5 = H(1, 5), h22 = H(2, 5);

    insert_run(1, 0, 8, NULL);
    insert_run(2, 4, 6, &p3);
    /* Pin block 7 (a tail) and lease block 5 (inside a run). */
    cd_block_t *b7 = cd_radix_find(&rx, &h7), *b5 = cd_radix_find(&rx, &h5);
    cd_radix_hold(&rx, b7, 1);
    cd_radix_hold(&rx, b5, 0);
    check();
    /* Only chain 2's tail can go: then its other block, then nothing. */
    cd_block_t *v = cd_radix_victim(&rx);
    assert_ptr_equal(v, cd_radix_find(&rx, &h22));
    cd_radix_remove(&rx, v);
    v = cd_radix_victim(&rx);
    assert_non_null(v);
    assert_hash(v, 2, 4);
    cd_radix_remove(&rx, v);
    check();
    assert_null(cd_radix_victim(&rx)); /* 0..3 have a child; 7 is pinned */
    cd_radix_unhold(&rx, b7, 1);
    check();
    /* 7 and 6 go; 5 is leased, so 5..0 stay. */
    cd_radix_remove(&rx, cd_radix_victim(&rx));
    cd_radix_remove(&rx, cd_radix_victim(&rx));
    assert_null(cd_radix_victim(&rx));
    cd_radix_unhold(&rx, b5, 0);
    for (int i = 5; i >= 0; i--) {
        v = cd_radix_victim(&rx);
        assert_hash(v, 1, (uint32_t)i);
        cd_radix_remove(&rx, v);
        check();
    }
    assert_null(cd_radix_victim(&rx));
}

/* LRU order: the chain looked up last is evicted last. */
static void test_lru_order(void **state)
{
    insert_run(1, 0, 4, NULL);
    insert_run(2, 0, 4, NULL);
    insert_run(3, 0, 4, NULL);
    assert_int_equal(lookup(1, 4, &kv0), 4); /* chain 1 becomes the hottest */
    cd_block_t *v = cd_radix_victim(&rx);
    assert_hash(v, 2, 3);
    for (int i = 0; i < 8; i++) {
        v = cd_radix_victim(&rx);
        assert_true(v->bk_hash.b[0] != 1); /* chains 2 and 3 go first */
        cd_radix_remove(&rx, v);
    }
    v = cd_radix_victim(&rx);
    assert_int_equal(v->bk_hash.b[0], 1);
    check();
}

/* --- randomized operations against a naive model ------------------------------- */

#define M_CHAINS 24
#define M_LEN    40

/* Model: chain c block i has parent (c, i-1), except chains branch off
 * others: chain c's blocks below br[c] are chain par[c]'s blocks. */
static int m_par[M_CHAINS], m_br[M_CHAINS];
static int m_present[M_CHAINS][M_LEN];
static int m_hold[M_CHAINS][M_LEN];

/* The owner chain of block (c, i): follows branches down. */
static int owner(int c, int i)
{
    while (c != m_par[c] && i < m_br[c]) {
        c = m_par[c];
    }
    return c;
}

static int m_has_child(int c, int i)
{
    for (int d = 0; d < M_CHAINS; d++) {
        if (i + 1 < M_LEN && owner(d, i + 1) == d && owner(d, i) == c && m_present[d][i + 1]) {
            return 1;
        }
    }
    return 0;
}

static void test_random_against_model(void **state)
{
    unsigned seed = (unsigned)time(NULL);
    const char *env = getenv("STRATA_TEST_SEED");

    if (env != NULL) {
        seed = (unsigned)strtoul(env, NULL, 10);
    }
    print_message("test_random_against_model seed=%u (STRATA_TEST_SEED=%u to replay)\n", seed,
                  seed);
    srand(seed);
    memset(m_present, 0, sizeof(m_present));
    memset(m_hold, 0, sizeof(m_hold));
    for (int c = 0; c < M_CHAINS; c++) {
        m_par[c] = c == 0 ? 0 : rand() % c;
        m_br[c] = c == 0 ? 0 : rand() % M_LEN;
        if (rand() % 5 == 0) {
            m_par[c] = c; /* a chain of its own */
            m_br[c] = 0;
        }
    }
    for (int step = 0; step < 20000; step++) {
        int op = rand() % 10, c = rand() % M_CHAINS, i = rand() % M_LEN, o = owner(c, i);
        st_hash_t h = H((uint32_t)o, (uint32_t)i);

        if (op < 4) { /* insert block (c, i), parent (c, i-1) */
            st_hash_t p = H((uint32_t)owner(c, i - 1 < 0 ? 0 : i - 1), (uint32_t)(i - 1));
            cd_block_t *b;
            int created;

            if (m_present[o][i]) {
                continue;
            }
            /* Only a block whose parent is here, or a segment start (every
             * 8th), may arrive: the client writes in order within a segment. */
            if (i > 0 && i % 8 != 0 && !m_present[owner(c, i - 1)][i - 1]) {
                continue;
            }
            assert_int_equal(
                cd_radix_insert(&rx, &h, i > 0 ? &p : NULL, (uint64_t)step, &b, &created), ST_OK);
            assert_true(created);
            b->bk_present[CD_KIND_KV][0] = 1;
            m_present[o][i] = 1;
        } else if (op < 6) { /* evict one */
            cd_block_t *v = cd_radix_victim(&rx);
            int any = 0;

            for (int d = 0; d < M_CHAINS; d++) {
                for (int j = 0; j < M_LEN; j++) {
                    if (owner(d, j) == d && m_present[d][j] && !m_hold[d][j] &&
                        !m_has_child(d, j)) {
                        any = 1;
                    }
                }
            }
            if (v == NULL) {
                if (any) {
                    fail_msg("seed=%u step=%d: nothing evicted but the model has a leaf", seed,
                             step);
                }
                continue;
            }
            int vc = (int)v->bk_hash.b[0], vi = (int)v->bk_hash.b[4];
            if (!m_present[vc][vi] || m_hold[vc][vi] || m_has_child(vc, vi)) {
                fail_msg("seed=%u step=%d: evicted block (%d,%d) is not an unheld leaf", seed, step,
                         vc, vi);
            }
            cd_radix_remove(&rx, v);
            m_present[vc][vi] = 0;
        } else if (op < 7) { /* hold or unhold */
            cd_block_t *b = cd_radix_find(&rx, &h);

            if (!m_present[o][i]) {
                assert_null(b);
            } else if (m_hold[o][i] && rand() % 2) {
                cd_radix_unhold(&rx, b, m_hold[o][i] % 2);
                m_hold[o][i]--;
            } else {
                cd_radix_hold(&rx, b, (m_hold[o][i] + 1) % 2);
                m_hold[o][i]++;
            }
        } else { /* lookup chain c from block 0 */
            uint32_t expect = 0;

            while (expect < M_LEN && m_present[owner(c, (int)expect)][expect]) {
                expect++;
            }
            st_hash_t hs[M_LEN];
            for (int j = 0; j < M_LEN; j++) {
                hs[j] = H((uint32_t)owner(c, j), (uint32_t)j);
            }
            /* As one segment per 8 blocks, answers must match per segment. */
            for (int s0 = 0; s0 < M_LEN; s0 += 8) {
                cd_segment_t seg = {(uint64_t)s0, 8, &hs[s0]};
                cd_seg_answer_t ans;
                size_t kn = 0;
                uint32_t e = 0;

                while (e < 8 && m_present[owner(c, s0 + (int)e)][s0 + (int)e]) {
                    e++;
                }
                cd_radix_lookup(&rx, &seg, &kv0, (uint64_t)step, &ans, NULL, 0, &kn, NULL, NULL);
                if (ans.matched != e) {
                    fail_msg("seed=%u step=%d: chain %d segment %d matched %u, model %u", seed,
                             step, c, s0, ans.matched, e);
                }
            }
            (void)expect;
        }
        if (step % 97 == 0) {
            check();
        }
        /* Never a suffix without its prefix: within a segment, a present
         * block's parent is present. */
        if (step % 211 == 0) {
            for (int d = 0; d < M_CHAINS; d++) {
                for (int j = 1; j < M_LEN; j++) {
                    if (owner(d, j) == d && m_present[d][j] && j % 8 != 0 &&
                        !m_present[owner(d, j - 1)][j - 1]) {
                        fail_msg("seed=%u step=%d: block (%d,%d) kept without its parent", seed,
                                 step, d, j);
                    }
                }
            }
        }
    }
    check();
    /* Release every hold; then everything can be evicted, leaf first. */
    for (int d = 0; d < M_CHAINS; d++) {
        for (int j = 0; j < M_LEN; j++) {
            st_hash_t h = H((uint32_t)d, (uint32_t)j);

            while (m_hold[d][j] > 0) {
                cd_radix_unhold(&rx, cd_radix_find(&rx, &h), m_hold[d][j] % 2);
                m_hold[d][j]--;
            }
        }
    }
    while (cd_radix_victim(&rx) != NULL) {
        cd_radix_remove(&rx, cd_radix_victim(&rx));
    }
    assert_int_equal(rx.rx_blocks, 0);
    check();
}

int main(void)
{
    UNIT_RUN(UNIT_FIXTURE(test_chain_prefix_and_divergence), UNIT_FIXTURE(test_split_of_a_run),
             UNIT_FIXTURE(test_segments_and_checkpoints),
             UNIT_FIXTURE(test_remote_parent_roots_and_adoption),
             UNIT_FIXTURE(test_eviction_is_leaf_first_and_holds), UNIT_FIXTURE(test_lru_order),
             UNIT_FIXTURE(test_random_against_model));
}
