/*
 * test_engine_score.c - the engine's near-data scoring mode (remote_scoring)
 * against real daemons on loopback (1 to 4, argv[3]; segments of 4 blocks).
 *
 * Each history is written as a turn, then answered again (resumed) with a
 * bounded pool of 1, 3 and 8 blocks, once scoring every key locally (the
 * engine as before) and once with near-data scoring (the history outside
 * the pool scored by the daemons, the pool's keys here, merged). The two
 * runs must select the same rows at every DSA step (on_select: every
 * layer, every token of the tail and of 150 decode steps, in order), give
 * bit-identical logits and the same greedy ids, and both equal the full
 * recompute without the cache within the engine's tolerance. The
 * near-data run must hold fewer indexer-key bytes and fetch fewer bytes.
 * Then other k (topk 7 and 300) and a node killed in the middle of the
 * decode (the Score call fails, the fallback is counted, the logits stay
 * equal).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "client_fixture.h"
#include "cluster.h"
#include "engine_fixture.h"
#include "ring.h"
#include "strata/engine.h"
#include "stratad_arg.h"

#define VOCAB    512
#define TOL      1e-5
#define N_DECODE 150

static const char *stratad_path;
static int n_nodes = 3;

/* What the on_select hook saw: a digest of every selection, in order. */
typedef struct sel_log {
    uint64_t digest, calls;
    uint64_t kill_at;       /* kill victim at a layer-0 selection from this position on */
    uint64_t kill_force_at; /* or at any selection from this position on */
    int kill_at_prompt_end; /* or once the prompt is computed (on_progress) */
    tc_cluster_t *cl;
    int victim;
    const int *owner; /* per block: the node that holds it */
    size_t n_owner;
} sel_log_t;

/* Whether none of the n rows selected at pos that are read remotely (a
 * pool of 3) lies on node v, so that their reads succeed. */
static int rows_avoid(const sel_log_t *g, uint64_t pos, const int32_t *rows, uint32_t n, int v)
{
    size_t open = (size_t)pos / 64, kbase = open + 1 > 4 ? open + 1 - 4 : 0;

    for (uint32_t i = 0; i < n; i++) {
        size_t b = (size_t)rows[i] / 64;

        if (b < kbase && (b >= g->n_owner || g->owner[b] == v)) {
            return 0;
        }
    }
    return 1;
}

static void on_select(void *arg, uint32_t layer, uint64_t pos, const int32_t *rows, uint32_t n)
{
    sel_log_t *g = arg;
    uint64_t h = g->digest ? g->digest : 1469598103934665603ull;
    uint64_t head[3] = {layer, pos, n};

    for (int i = 0; i < 3; i++) {
        h = (h ^ head[i]) * 1099511628211ull;
    }
    for (uint32_t i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(uint32_t)rows[i]) * 1099511628211ull;
    }
    g->digest = h;
    g->calls++;
    /* Killed after a selection whose rows it holds none of: the next thing
     * that needs it is the next DSA layer's Score call. */
    if (g->victim >= 0 && pos >= g->kill_at &&
        (pos >= g->kill_force_at || rows_avoid(g, pos, rows, n, g->victim))) {
        tc_kill(g->cl, g->victim);
        g->victim = -1;
    }
}

typedef struct fixture {
    tc_cluster_t cl;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));

    assert_non_null(f);
    assert_int_equal(tc_start(&f->cl, stratad_path, n_nodes, "--segment-blocks 4"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    tc_stop_all(&f->cl);
    free(f);
    return 0;
}

/* A model of topk k, a client in a namespace of its own, and its reference. */
typedef struct world {
    st_client_t *client;
    st_model_t *model;
    st_engine_t *ref;
} world_t;

static world_t world_open(fixture_t *f, uint32_t topk)
{
    world_t w = {0};
    st_client_params_t p;
    st_model_config_t mc;
    char name[64];

    snprintf(name, sizeof(name), "score-topk-%u", topk);
    cf_params_session(&p, f->cl.peers, name, 30000);
    w.client = cf_connect(&p);
    st_model_config_default(&mc);
    mc.topk = topk;
    assert_int_equal(st_model_create(&mc, &w.model), ST_OK);
    assert_int_equal(st_engine_create(w.model, NULL, &w.ref), ST_OK);
    return w;
}

static void world_close(world_t *w)
{
    st_engine_free(w->ref);
    st_model_free(w->model);
    st_client_close(w->client);
}

/* Kills the victim once the prompt is computed: the first thing that needs
 * it then is the first decoded token's Score call, whatever the ring's
 * placement of this run's ports (a kill at a selection that avoids the
 * victim's rows may never come). */
static void on_progress(void *arg, size_t done, size_t total)
{
    sel_log_t *g = arg;

    if (g->victim >= 0 && g->kill_at_prompt_end && done == total) {
        tc_kill(g->cl, g->victim);
        g->victim = -1;
    }
}

static st_engine_t *engine(world_t *w, uint32_t local_blocks, uint32_t remote, sel_log_t *log)
{
    st_engine_params_t ep;
    st_engine_t *e = NULL;

    ef_cached_params(&ep, w->client);
    if (local_blocks) {
        ep.field_mask |= ST_ENGINE_FIELD_LOCAL_BLOCKS | ST_ENGINE_FIELD_REMOTE_SCORING |
                         ST_ENGINE_FIELD_ON_SELECT;
        ep.local_blocks = local_blocks;
        ep.remote_scoring = remote;
        ep.on_select = on_select;
        ep.on_select_arg = log;
        if (log && log->kill_at_prompt_end) {
            ep.field_mask |= ST_ENGINE_FIELD_ON_PROGRESS;
            ep.on_progress = on_progress;
            ep.on_progress_arg = log;
        }
    }
    assert_int_equal(st_engine_create(w->model, &ep, &e), ST_OK);
    return e;
}

static uint32_t *prompt(size_t n, uint32_t salt)
{
    uint32_t *t = malloc(sizeof(uint32_t) * n);

    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        t[i] = (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 2246822519u)) % VOCAB;
    }
    return t;
}

/* One answer: logits, greedy ids, stats, selections. */
typedef struct answer {
    float logits[VOCAB];
    uint32_t ids[N_DECODE];
    st_engine_stats_t s;
    sel_log_t sel;
} answer_t;

static void answer(st_engine_t *e, const uint32_t *tok, size_t n, answer_t *a)
{
    assert_int_equal(st_engine_run(e, tok, n, N_DECODE, a->logits, a->ids, &a->s), ST_OK);
}

static double rel_diff(const float *a, const float *ref)
{
    double diff = 0.0, mx = 0.0;

    for (int v = 0; v < VOCAB; v++) {
        diff = fmax(diff, fabs((double)a[v] - ref[v]));
        mx = fmax(mx, fabs((double)ref[v]));
    }
    assert_true(mx > 0.0);
    return diff / mx;
}

static void print(const char *what, const answer_t *a, double diff)
{
    printf("# %-30s resumed=%llu computed=%llu selections=%llu score_calls=%llu "
           "score_fallbacks=%llu pool_fallbacks=%llu score_bytes=%llu fetched=%llu "
           "keys_bytes=%llu rows_remote=%llu rel_diff=%.3g\n",
           what, (unsigned long long)a->s.resumed_blocks, (unsigned long long)a->s.computed_tokens,
           (unsigned long long)a->sel.calls, (unsigned long long)a->s.score_calls,
           (unsigned long long)a->s.score_fallbacks, (unsigned long long)a->s.pool_fallbacks,
           (unsigned long long)a->s.score_bytes, (unsigned long long)a->s.bytes_fetched,
           (unsigned long long)a->s.keys_bytes, (unsigned long long)a->s.rows_remote, diff);
}

/*
 * A history of n tokens written as a turn, then answered again with each
 * pool size, scored locally and near the data: equal selections, logits,
 * ids; both within TOL of the full recompute.
 */
static void check_history(world_t *w, size_t n, uint32_t salt, const uint32_t *pools,
                          size_t n_pools)
{
    uint32_t *t = prompt(n, salt);
    answer_t *ref = calloc(1, sizeof(*ref)), *loc = calloc(1, sizeof(*loc));
    answer_t *rem = calloc(1, sizeof(*rem));
    st_engine_t *e;
    char what[96];

    assert_true(ref && loc && rem);
    e = engine(w, 0, 0, NULL); /* writes the history */
    assert_int_equal(st_engine_run(e, t, n, 0, NULL, NULL, &ref->s), ST_OK);
    assert_int_equal(ref->s.write_failures, 0);
    st_engine_free(e);
    answer(w->ref, t, n, ref);
    for (size_t i = 0; i < n_pools; i++) {
        memset(loc, 0, sizeof(*loc));
        memset(rem, 0, sizeof(*rem));
        loc->sel.victim = rem->sel.victim = -1;
        e = engine(w, pools[i], 0, &loc->sel);
        answer(e, t, n, loc);
        st_engine_free(e);
        e = engine(w, pools[i], 1, &rem->sel);
        answer(e, t, n, rem);
        st_engine_free(e);
        snprintf(what, sizeof(what), "%zu tokens, pool %u, local", n, pools[i]);
        print(what, loc, rel_diff(loc->logits, ref->logits));
        snprintf(what, sizeof(what), "%zu tokens, pool %u, near-data", n, pools[i]);
        print(what, rem, rel_diff(rem->logits, ref->logits));
        /* The same rows at every step, in the same order, the same logits. */
        assert_true(rem->sel.calls > 0);
        assert_int_equal(rem->sel.calls, loc->sel.calls);
        assert_true(rem->sel.digest == loc->sel.digest);
        assert_memory_equal(rem->logits, loc->logits, sizeof(rem->logits));
        assert_memory_equal(rem->ids, loc->ids, sizeof(rem->ids));
        assert_memory_equal(rem->ids, ref->ids, sizeof(rem->ids));
        assert_true(rel_diff(rem->logits, ref->logits) <= TOL);
        /* Near the data: the history's keys neither fetched nor held. */
        assert_int_equal(rem->s.resumed_blocks, loc->s.resumed_blocks);
        assert_true(rem->s.resumed_blocks > pools[i] + 1);
        assert_int_equal(rem->s.score_fallbacks, 0);
        assert_int_equal(rem->s.pool_fallbacks, 0);
        assert_true(rem->s.score_calls > 0);
        assert_true(rem->s.score_bytes > 0);
        assert_int_equal(loc->s.score_calls, 0);
        assert_true(rem->s.keys_bytes < loc->s.keys_bytes);
        assert_true(rem->s.bytes_fetched < loc->s.bytes_fetched);
    }
    free(t);
    free(ref);
    free(loc);
    free(rem);
}

/* Two histories (1100 and 700 tokens), pools of 1, 3 and 8 blocks, topk 128. */
static void test_score_equal(void **state)
{
    world_t w = world_open(*state, 128);
    const uint32_t pools[] = {1, 3, 8};

    check_history(&w, 1100, 41, pools, 3);
    check_history(&w, 700, 42, pools, 2);
    world_close(&w);
}

/* Other k: 7 (fewer than a block's rows) and 300 (more than the pool's). */
static void test_score_topk(void **state)
{
    const uint32_t ks[] = {7, 300}, pools[] = {3};

    for (size_t i = 0; i < 2; i++) {
        world_t w = world_open(*state, ks[i]);

        check_history(&w, 900, 43 + (uint32_t)i, pools, 1);
        world_close(&w);
    }
}

/*
 * A node killed, of the nodes that hold a segment of the history the one
 * that holds fewest; at_prompt_end: once the prompt is computed, so that the
 * first decoded token's Score call fails: the engine falls back (counted),
 * cannot fetch that node's keys either, recomputes the sequence with every
 * block local. Otherwise in the decode: 20 tokens in or later, after a
 * selection that reads none of its rows (topk 7, so that one comes soon; the
 * same then), or, when the ring's placement of this run's ports gives none
 * by 60 tokens in, at the next selection, whose row read then fails first
 * (a pool fallback without a Score fallback). Either way the logits and ids
 * equal the full recompute. Skipped over one daemon (nothing would survive).
 */
static void node_killed_case(fixture_t *f, int at_prompt_end)
{
    world_t w = world_open(f, 7);
    size_t n = 1100, nb = 0;
    int segs[4] = {0};
    uint32_t *t = prompt(n, 44);
    answer_t *ref = calloc(1, sizeof(*ref)), *rem = calloc(1, sizeof(*rem));
    const char *names[4];
    st_hash_t chain[32];
    int owner[32];
    ring_t ring;
    st_engine_t *e;

    if (n_nodes < 2) {
        printf("# skipped: one daemon\n");
        free(t);
        free(ref);
        free(rem);
        world_close(&w);
        return;
    }
    assert_true(ref && rem);
    e = engine(&w, 0, 0, NULL);
    assert_int_equal(st_engine_run(e, t, n, 0, NULL, NULL, &ref->s), ST_OK);
    st_engine_free(e);
    answer(w.ref, t, n, ref);
    for (int i = 0; i < n_nodes; i++) {
        names[i] = f->cl.node[i].addr;
    }
    assert_int_equal(st_client_hash(w.client, t, n, NULL, 0, chain, 32, &nb), ST_OK);
    assert_int_equal(ring_init(&ring, names, (uint32_t)n_nodes, 128), ST_OK);
    for (size_t b = 0; b < nb; b++) {
        owner[b] = (int)ring_home(&ring, &chain[b / 4 * 4]);
    }
    ring_destroy(&ring);
    for (size_t b = 0; b < 16; b += 4) { /* the segments outside the pool */
        segs[owner[b]]++;
    }
    rem->sel.victim = -1;
    for (int i = 0; i < n_nodes; i++) {
        if (segs[i] > 0 && (rem->sel.victim < 0 || segs[i] < segs[rem->sel.victim])) {
            rem->sel.victim = i;
        }
    }
    rem->sel.owner = owner;
    rem->sel.n_owner = nb;
    rem->sel.cl = &f->cl;
    rem->sel.kill_at = at_prompt_end ? UINT64_MAX : n + 20;
    rem->sel.kill_force_at = at_prompt_end ? UINT64_MAX : n + 60;
    rem->sel.kill_at_prompt_end = at_prompt_end;
    e = engine(&w, 3, 1, &rem->sel);
    answer(e, t, n, rem);
    st_engine_free(e);
    print(at_prompt_end ? "1100 tokens, pool 3, node killed at the prompt's end"
                        : "1100 tokens, pool 3, node killed in the decode",
          rem, rel_diff(rem->logits, ref->logits));
    assert_int_equal(rem->sel.victim, -1); /* killed */
    assert_true(rem->s.score_fallbacks >= (at_prompt_end ? 1u : 0u));
    assert_int_equal(rem->s.pool_fallbacks, 1);
    assert_true(rel_diff(rem->logits, ref->logits) <= TOL);
    assert_memory_equal(rem->ids, ref->ids, sizeof(rem->ids));
    free(t);
    free(ref);
    free(rem);
    world_close(&w);
}

static void test_score_node_killed(void **state)
{
    node_killed_case(*state, 1);
}

static void test_score_node_killed_decode(void **state)
{
    node_killed_case(*state, 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_score_equal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_score_topk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_score_node_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_score_node_killed_decode, setup, teardown),
    };

    if (TM_STRATAD_FILTER_ARG(argc, argv, "test_engine_score",
                              "PATH-TO-STRATAD [TEST-NAME-PATTERN [NODES]]", &stratad_path) != 0) {
        return 2;
    }
    if (argc > 3) {
        n_nodes = atoi(argv[3]);
        if (n_nodes < 1 || n_nodes > 4) {
            fprintf(stderr, "test_engine_score: NODES is 1 to 4\n");
            return 2;
        }
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
