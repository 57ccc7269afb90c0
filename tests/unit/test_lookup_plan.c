/*
 * test_lookup_plan.c - the lookup planner (proto/plan.h): grouping by
 * owner, the compact form on the wire, answers that do not fit, answers of
 * several owners merged and composed, resolve rounds.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "plan.h"
#include "support/unit_main.h"

#define S     4 /* segment_blocks */
#define NODES 3

/* The placer of the tests: the owner is written in the first byte of a
 * segment's first hash (0xff: no owner). */
static int place(void *arg, const st_hash_t *first)
{
    (void)arg;
    return first->b[0] == 0xff ? -1 : first->b[0];
}

static int misfits;

static void misfit(void *arg, uint32_t m, uint32_t u, uint64_t blocks)
{
    (void)arg;
    assert_true((uint64_t)m + u > blocks);
    misfits++;
}

/* A chain of n blocks whose segments are owned by owners[k]. */
static st_hash_t *chain_of(size_t n, const uint8_t *owners)
{
    st_hash_t *h = calloc(n, sizeof(*h));

    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        h[i].b[0] = i % S == 0 ? owners[i / S] : 0x77;
        h[i].b[1] = (uint8_t)i;
        h[i].b[2] = (uint8_t)(i >> 8);
    }
    return h;
}

static lp_params_t params(const st_hash_t *h, size_t n, const Strata__V1__LookupRequest *tmpl)
{
    return (lp_params_t){.hashes = h,
                         .n_blocks = n,
                         .first_block = 0,
                         .segment_blocks = S,
                         .n_nodes = NODES,
                         .place = place,
                         .max_segments = LP_UNLIMITED,
                         .max_hashes = LP_UNLIMITED,
                         .merge_runs = 1,
                         .tmpl = tmpl,
                         .misfit = misfit};
}

static Strata__V1__LookupRequest tmpl_of(void)
{
    Strata__V1__LookupRequest t = STRATA__V1__LOOKUP_REQUEST__INIT;

    t.namespace_id = 42;
    t.kinds_mask = 3;
    return t;
}

static void test_groups_by_owner(void **state)
{
    static const uint8_t owners[] = {0, 0, 1, 0, 1, 1, 0xff};
    st_hash_t *h = chain_of(26, owners); /* 6 full segments and one of 2 */
    Strata__V1__LookupRequest t = tmpl_of();
    lp_params_t prm = params(h, 26, &t);
    lp_plan_t p;

    (void)state;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(p.n_segs, 7);
    assert_int_equal(p.ans[6].n_blocks, 2);
    /* One request per owner; consecutive segments of one owner as one run. */
    assert_int_equal(p.n_groups, 2);
    assert_int_equal(p.groups[0].node, 0);
    assert_int_equal(p.groups[0].req.namespace_id, 42);
    assert_int_equal(p.groups[0].req.kinds_mask, 3);
    assert_int_equal(p.groups[0].req.n_segments, 2);
    assert_int_equal(p.groups[0].req.segments[0]->first_block, 0);
    assert_int_equal(p.groups[0].req.segments[0]->block_hashes.len, 8 * ST_HASH_BYTES);
    assert_ptr_equal(p.groups[0].req.segments[0]->block_hashes.data, h[0].b);
    assert_int_equal(p.groups[0].req.segments[1]->first_block, 12);
    assert_int_equal(p.groups[1].node, 1);
    assert_int_equal(p.groups[1].req.n_segments, 2);
    assert_int_equal(p.groups[1].req.segments[0]->first_block, 8);
    assert_int_equal(p.groups[1].req.segments[1]->first_block, 16);
    assert_int_equal(p.groups[1].req.segments[1]->block_hashes.len, 8 * ST_HASH_BYTES);
    assert_int_equal(p.seg_run[6], SIZE_MAX); /* no owner: asked nowhere */
    lp_plan_free(&p);

    /* Without runs: a request segment per segment. */
    prm.merge_runs = 0;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(p.n_groups, 2);
    assert_int_equal(p.groups[0].req.n_segments, 3);
    assert_int_equal(p.groups[1].req.n_segments, 3);
    lp_plan_free(&p);

    /* Limits split a node's request: 1 request segment, then 5 blocks. */
    prm.merge_runs = 1;
    prm.max_segments = 1;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(p.n_groups, 6); /* the limit is met before a run would grow */
    lp_plan_free(&p);
    prm.max_segments = LP_UNLIMITED;
    prm.max_hashes = 5;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(p.n_groups, 6); /* 4 + 4 passes 5: each segment alone */
    for (size_t g = 0; g < p.n_groups; g++) {
        assert_int_equal(p.groups[g].req.n_segments, 1);
        assert_true(p.groups[g].req.segments[0]->block_hashes.len <= 5 * ST_HASH_BYTES);
    }
    lp_plan_free(&p);
    free(h);
}

/* Packs the request and reads it back, as an owner would. */
static Strata__V1__LookupRequest *wire(const Strata__V1__LookupRequest *q)
{
    size_t len = strata__v1__lookup_request__get_packed_size(q);
    uint8_t *buf = malloc(len + 1);
    Strata__V1__LookupRequest *back;

    assert_non_null(buf);
    strata__v1__lookup_request__pack(q, buf);
    back = strata__v1__lookup_request__unpack(NULL, len, buf);
    free(buf);
    assert_non_null(back);
    return back;
}

static void test_compact_round_trip(void **state)
{
    static const uint8_t owners[] = {0, 1, 0};
    /* Segments of 200 blocks (three: 0 and 2 on node 0, not one run). */
    size_t n = 3 * 200;
    st_hash_t *h;
    Strata__V1__LookupRequest t = tmpl_of(), *back;
    lp_params_t prm;
    lp_plan_t p;
    static const uint32_t want[] = {0, 64, 128, 192, 199};

    (void)state;
    h = calloc(n, sizeof(*h));
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        h[i].b[0] = i % 200 == 0 ? owners[i / 200] : 0x77;
        h[i].b[1] = (uint8_t)i;
        h[i].b[2] = (uint8_t)(i >> 8);
    }
    prm = params(h, n, &t);
    prm.segment_blocks = 200;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(lp_plan_compact(&p), ST_OK);
    back = wire(&p.groups[0].req);
    assert_int_equal(back->n_segments, 0);
    assert_int_equal(back->namespace_id, 42);
    assert_int_equal(back->n_compact_first, 2);
    assert_int_equal(back->compact_first[0], 0);
    assert_int_equal(back->compact_first[1], 400);
    assert_int_equal(back->compact_blocks[0], 200);
    /* The probe rule: every 64th block and the last. */
    assert_int_equal(back->compact_probes[0], 5);
    assert_int_equal(back->compact_probes[1], 5);
    assert_int_equal(back->n_compact_offsets, 10);
    assert_int_equal(back->compact_hashes.len, 10 * ST_HASH_BYTES);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(back->compact_offsets[i], want[i]);
        assert_int_equal(back->compact_offsets[5 + i], want[i]);
        assert_memory_equal(back->compact_hashes.data + i * ST_HASH_BYTES, h[want[i]].b,
                            ST_HASH_BYTES);
        assert_memory_equal(back->compact_hashes.data + (5 + i) * ST_HASH_BYTES, h[400 + want[i]].b,
                            ST_HASH_BYTES);
    }
    strata__v1__lookup_request__free_unpacked(back, NULL);
    lp_plan_free(&p);

    /* A segment whose last block is a 64th one has no extra probe: 129
     * blocks are probed at 0, 64 and 128. */
    prm.n_blocks = 129;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(lp_plan_compact(&p), ST_OK);
    assert_int_equal(p.groups[0].req.compact_probes[0], 3);
    assert_int_equal(p.groups[0].req.compact_offsets[2], 128);
    lp_plan_free(&p);
    free(h);
}

/* A compact answer for n request segments. */
static void compact_answer(Strata__V1__LookupResponse *r, size_t n, uint32_t *m, uint32_t *u,
                           uint32_t *counts, uint64_t *kda, size_t n_kda)
{
    *r = (Strata__V1__LookupResponse){
        .base = PROTOBUF_C_MESSAGE_INIT(&strata__v1__lookup_response__descriptor),
        .compact = 1,
        .n_compact_matched = n,
        .compact_matched = m,
        .n_compact_unresolved = n,
        .compact_unresolved = u,
        .n_compact_kda_counts = n,
        .compact_kda_counts = counts,
        .n_compact_kda = n_kda,
        .compact_kda = kda,
    };
}

static void test_bad_answers(void **state)
{
    static const uint8_t owners[] = {0, 1, 1, 2};
    st_hash_t *h = chain_of(16, owners);
    Strata__V1__LookupRequest t = tmpl_of();
    lp_params_t prm = params(h, 16, &t);
    Strata__V1__LookupResponse r0, r1, r2;
    uint32_t m[2] = {4, 9}, u[2] = {0, 0}, counts[2] = {1, 1};
    uint64_t kda[2] = {3, 7};
    lp_plan_t p;

    (void)state;
    prm.merge_runs = 0;
    assert_int_equal(lp_plan_init(&p, &prm), ST_OK);
    assert_int_equal(lp_plan_compact(&p), ST_OK);
    assert_int_equal(p.n_groups, 3);

    /* Node 0: the call failed; its segment stays unanswered with that status. */
    p.groups[0].status = ST_ERR_TIMEOUT;
    p.groups[0].msg = "deadline";
    assert_int_equal(lp_plan_take(&p, 0), ST_ERR_TIMEOUT);
    assert_false(p.ans[0].answered);
    assert_int_equal(p.fail[0].why, ST_ERR_TIMEOUT);
    assert_string_equal(p.fail[0].msg, "deadline");
    assert_int_equal(p.fail[0].round, 1);

    /* Node 1: segment 1 answered, segment 2 says 9 of 4 blocks (a misfit:
     * that segment alone is lost). */
    compact_answer(&r1, 2, m, u, counts, kda, 2);
    p.groups[1].status = ST_OK;
    p.groups[1].resp = &r1;
    misfits = 0;
    assert_int_equal(lp_plan_take(&p, 1), ST_OK);
    assert_int_equal(misfits, 1);
    assert_true(p.ans[1].answered);
    assert_int_equal(p.ans[1].matched, 4);
    assert_int_equal(p.ans[1].n_kda, 1);
    assert_int_equal(p.ans[1].kda[0], 3);
    assert_false(p.ans[2].answered);
    assert_int_equal(p.fail[2].why, ST_ERR_PROTOCOL);
    assert_null(p.fail[2].msg);

    /* Node 2: an answer without the compact flag (an older daemon's). */
    compact_answer(&r2, 1, m, u, counts, kda, 1);
    r2.compact = 0;
    p.groups[2].status = ST_OK;
    p.groups[2].resp = &r2;
    assert_int_equal(lp_plan_take(&p, 2), ST_ERR_PROTOCOL);
    assert_false(p.ans[3].answered);
    lp_plan_free(&p);

    /* Short answers: counts for fewer segments, or checkpoints that do not
     * add up; the full form with too few segments. */
    compact_answer(&r0, 1, m, u, counts, kda, 1);
    assert_int_equal(lp_answer_check(&r0, 1, 1), ST_OK);
    assert_int_equal(lp_answer_check(&r0, 1, 2), ST_ERR_PROTOCOL);
    r0.n_compact_kda = 2;
    assert_int_equal(lp_answer_check(&r0, 1, 1), ST_ERR_PROTOCOL);
    r0.n_compact_kda = 1;
    r0.n_compact_unresolved = 0;
    assert_int_equal(lp_answer_check(&r0, 1, 1), ST_ERR_PROTOCOL);
    strata__v1__lookup_response__init(&r0);
    assert_int_equal(lp_answer_check(&r0, 0, 1), ST_ERR_PROTOCOL);
    assert_int_equal(lp_answer_check(&r0, 0, 0), ST_OK);
    assert_int_equal(lp_answer_check(NULL, 0, 0), ST_ERR_PROTOCOL);
    free(h);
}

/* Plans the chain (compact) and takes the answers of its three owners. */
static void take_three(lp_plan_t *p, const lp_params_t *prm, const Strata__V1__LookupResponse *r0,
                       const Strata__V1__LookupResponse *r1, const Strata__V1__LookupResponse *r2)
{
    assert_int_equal(lp_plan_init(p, prm), ST_OK);
    assert_int_equal(lp_plan_compact(p), ST_OK);
    assert_int_equal(p->n_groups, 3);
    p->groups[0].resp = r0;
    p->groups[1].resp = r1;
    p->groups[2].resp = r2;
    for (size_t g = 0; g < 3; g++) {
        p->groups[g].status = ST_OK;
        assert_int_equal(lp_plan_take(p, g), ST_OK);
    }
}

static void test_merge_and_resolve(void **state)
{
    static const uint8_t owners[] = {0, 0, 1, 2};
    st_hash_t *h = chain_of(16, owners);
    Strata__V1__LookupRequest t = tmpl_of();
    lp_params_t prm = params(h, 16, &t);
    Strata__V1__LookupResponse r0, r1, r2, rr;
    Strata__V1__SegmentMatch sm = STRATA__V1__SEGMENT_MATCH__INIT, *smp = &sm;
    uint32_t m0[1] = {8}, u0[1] = {0}, c0[1] = {2};
    uint32_t m1[1] = {1}, u1[1] = {2}, c1[1] = {1};
    uint32_t m2[1] = {4}, u2[1] = {0}, c2[1] = {0};
    uint64_t kda0[2] = {3, 7}, kda1[1] = {8}, kda_more[1] = {10};
    size_t runs[4], n;
    lp_round_t r;
    compose_prefix_t pre;
    lp_plan_t p;

    (void)state;
    compact_answer(&r0, 1, m0, u0, c0, kda0, 2); /* node 0: its run of 8, whole */
    compact_answer(&r1, 1, m1, u1, c1, kda1, 1); /* node 1: 1 proven, 2 undecided */
    compact_answer(&r2, 1, m2, u2, c2, NULL, 0); /* node 2: whole */
    take_three(&p, &prm, &r0, &r1, &r2);
    /* The run of node 0 spreads over its two segments. */
    assert_int_equal(p.ans[0].matched, 4);
    assert_int_equal(p.ans[1].matched, 4);
    lp_plan_compose(&p, &pre);
    assert_int_equal(pre.matched_blocks, 9);
    assert_int_equal(pre.resumable_blocks, 9); /* the checkpoint at 8 */

    /* The prefix ends on node 1's undecided blocks: ask for them. */
    assert_int_equal(lp_plan_next_undecided(&p), p.seg_run[2]);
    n = lp_plan_undecided(&p, runs);
    assert_int_equal(n, 1);
    assert_int_equal(lp_round_init(&p, &r, runs, n), ST_OK);
    assert_int_equal(r.n_groups, 1);
    assert_int_equal(r.groups[0].node, 1);
    assert_int_equal(r.groups[0].req.n_segments, 1);
    assert_int_equal(r.groups[0].req.n_compact_first, 0);
    assert_int_equal(r.groups[0].req.segments[0]->first_block, 9);
    assert_int_equal(r.groups[0].req.segments[0]->block_hashes.len, 2 * ST_HASH_BYTES);
    assert_ptr_equal(r.groups[0].req.segments[0]->block_hashes.data, h[9].b);

    /* More than was undecided does not fit: the run is lost. */
    strata__v1__lookup_response__init(&rr);
    rr.segments = &smp;
    rr.n_segments = 1;
    sm.matched_blocks = 3;
    r.groups[0].status = ST_OK;
    r.groups[0].resp = &rr;
    assert_int_equal(lp_round_take(&p, &r, 0), ST_ERR_PROTOCOL);
    assert_false(p.ans[2].answered);
    assert_int_equal(p.fail[2].round, 2);
    lp_round_free(&r);
    lp_plan_free(&p);

    /* Again, with an answer that fits: the match grows, checkpoints merged. */
    take_three(&p, &prm, &r0, &r1, &r2);
    n = lp_plan_undecided(&p, runs);
    assert_int_equal(lp_round_init(&p, &r, runs, n), ST_OK);
    sm.matched_blocks = 2;
    sm.kda_checkpoints = kda_more;
    sm.n_kda_checkpoints = 1;
    r.groups[0].status = ST_OK;
    r.groups[0].resp = &rr;
    assert_int_equal(lp_round_take(&p, &r, 0), ST_OK);
    lp_round_free(&r);
    assert_int_equal(p.ans[2].matched, 3);
    assert_int_equal(p.ans[2].n_kda, 2);
    assert_int_equal(p.ans[2].kda[0], 8);
    assert_int_equal(p.ans[2].kda[1], 10);
    assert_int_equal(lp_plan_next_undecided(&p), SIZE_MAX);
    lp_plan_compose(&p, &pre);
    assert_int_equal(pre.matched_blocks, 11); /* 8 + 3: segment 2 is not whole */
    assert_int_equal(pre.resumable_blocks, 11);
    lp_plan_free(&p);
    free(h);
}

static void test_bad_params(void **state)
{
    static const uint8_t owners[] = {0};
    st_hash_t *h = chain_of(4, owners);
    Strata__V1__LookupRequest t = tmpl_of();
    lp_params_t prm = params(h, 0, &t);
    lp_plan_t p;

    (void)state;
    assert_int_equal(lp_plan_init(&p, &prm), ST_ERR_INVALID);
    prm.n_blocks = 4;
    prm.segment_blocks = 0;
    assert_int_equal(lp_plan_init(&p, &prm), ST_ERR_INVALID);
    prm.segment_blocks = S;
    prm.tmpl = NULL;
    assert_int_equal(lp_plan_init(&p, &prm), ST_ERR_INVALID);
    free(h);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_groups_by_owner), cmocka_unit_test(test_compact_round_trip),
             cmocka_unit_test(test_bad_answers), cmocka_unit_test(test_merge_and_resolve),
             cmocka_unit_test(test_bad_params));
}
