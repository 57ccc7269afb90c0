/*
 * test_engine.c - the engine against three real daemons on loopback
 * (segments of 4 blocks, so a prompt of a few hundred tokens spans every
 * node). The logits of every resumed request are compared with a full
 * recompute of the same tokens without the cache: resuming at the end of a
 * turn, at a periodic checkpoint, between checkpoints (the cached prefix
 * runs past the last checkpoint), after a node was killed before the
 * request, and with a node killed between the lookup and the fetch.
 *
 * Tolerance (docs/engine.md): max |logit - ref| / max |ref| <= 1e-5. The
 * resumed and the full run use the same kernels in the same order on
 * bit-identical restored state, so the measured difference is 0.
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

#define N_NODES 3
#define VOCAB   512
#define TOL     1e-5

static const char *stratad_path;
static const char *transport; /* the client's and the daemons' (NULL: inline) */

typedef struct fixture {
    tc_cluster_t cl;
    st_client_t *client;
    st_model_t *model;
    st_engine_t *ref;    /* no cache */
    st_engine_t *cached; /* with the cluster */
    int victim;          /* node the on_lookup hook kills, -1 for none */
} fixture_t;

static void kill_on_lookup(void *arg, const st_lookup_result_t *r)
{
    fixture_t *f = arg;

    if (f->victim >= 0) {
        tc_kill(&f->cl, f->victim);
        f->victim = -1;
    }
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    st_client_params_t p;
    st_engine_params_t ep;

    assert_non_null(f);
    f->victim = -1;
    {
        char args[128];

        snprintf(args, sizeof(args), "--segment-blocks 4%s%s", transport ? " --transport " : "",
                 transport ? transport : "");
        assert_int_equal(tc_start(&f->cl, stratad_path, N_NODES, args), 0);
    }
    ef_client_params(&p, f->cl.peers);
    p.field_mask |= transport ? ST_CLIENT_FIELD_TRANSPORT : 0;
    p.transport = transport;
    f->client = cf_connect(&p);
    ef_model_open(&f->model, &f->ref);
    ef_cached_params(&ep, f->client);
    ep.field_mask |= ST_ENGINE_FIELD_ON_LOOKUP;
    ep.on_lookup = kill_on_lookup;
    ep.on_lookup_arg = f;
    ef_cached_open(f->model, &ep, &f->cached);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    ef_teardown(f->cached, f->ref, f->model, f->client, &f->cl);
    free(f);
    return 0;
}

/* A prompt: base[0..cut) then tokens of stream salt up to n. */
static uint32_t *prompt(const uint32_t *base, size_t cut, size_t n, uint32_t salt)
{
    uint32_t *t = malloc(sizeof(uint32_t) * n);

    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        t[i] =
            i < cut ? base[i] : (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 2246822519u)) % VOCAB;
    }
    return t;
}

/*
 * Runs tokens through the cached engine and through the reference, checks
 * the logits and 4 greedy decode steps agree, and returns the stats.
 */
static st_engine_stats_t run_and_compare(fixture_t *f, const uint32_t *tok, size_t n,
                                         const char *what)
{
    float lc[VOCAB], lr[VOCAB];
    uint32_t ic[4], ir[4];
    st_engine_stats_t s, sr;
    double diff = 0.0, ref = 0.0;

    assert_int_equal(st_engine_run(f->cached, tok, n, 4, lc, ic, &s), ST_OK);
    assert_int_equal(st_engine_run(f->ref, tok, n, 4, lr, ir, &sr), ST_OK);
    assert_int_equal(sr.computed_tokens, n);
    if (s.pool_fallbacks == 0) {
        assert_int_equal(s.computed_tokens + s.resumed_blocks * 64, n);
    } else { /* the resumed prefix was recomputed too */
        assert_true(s.computed_tokens >= n);
    }
    for (int v = 0; v < VOCAB; v++) {
        diff = fmax(diff, fabs((double)lc[v] - lr[v]));
        ref = fmax(ref, fabs((double)lr[v]));
    }
    printf("# %-28s tokens=%zu lookup_resumable=%llu resumed_blocks=%llu computed=%llu "
           "lookups=%llu misses=%llu written=%llu kda=%llu write_failures=%llu rel_diff=%.3g\n",
           what, n, (unsigned long long)s.lookup_resumable, (unsigned long long)s.resumed_blocks,
           (unsigned long long)s.computed_tokens, (unsigned long long)s.lookups,
           (unsigned long long)s.fetch_misses, (unsigned long long)s.objects_written,
           (unsigned long long)s.kda_written, (unsigned long long)s.write_failures, diff / ref);
    assert_true(ref > 0.0);
    assert_true(diff / ref <= TOL);
    assert_memory_equal(ic, ir, sizeof(ic));
    return s;
}

/* A cold turn through the cached engine alone (the cold case is compared in test_resume_turns). */
static void write_turn(fixture_t *f, const uint32_t *tok, size_t n)
{
    st_engine_stats_t s;

    assert_int_equal(st_engine_run(f->cached, tok, n, 0, NULL, NULL, &s), ST_OK);
    assert_int_equal(s.computed_tokens, n);
    assert_int_equal(s.write_failures, 0);
}

/*
 * Turn 1 (600 tokens: 9 full blocks) computes everything and writes; turn 2
 * extends it and resumes at turn 1's end-of-turn checkpoint (block 8); a
 * third request shares only 420 tokens with them: the cached prefix is 6
 * blocks but the last checkpoint inside it is after block 3, so it resumes
 * at block 4, between checkpoints.
 */
static void test_resume_turns(void **state)
{
    fixture_t *f = *state;
    uint32_t *t1 = prompt(NULL, 0, 900, 1), *t3 = prompt(t1, 420, 700, 3);
    st_engine_stats_t s;

    s = run_and_compare(f, t1, 600, "turn 1 (cold)");
    assert_int_equal(s.resumed_blocks, 0);
    assert_int_equal(s.kda_written, 3); /* blocks 3 and 7 (interval 4), 8 (end) */
    assert_int_equal(s.objects_written, 9 * 2 * 2 + 3);
    assert_int_equal(s.write_failures, 0);

    s = run_and_compare(f, t1, 900, "turn 2 (end of turn 1)");
    assert_int_equal(s.lookup_resumable, 9);
    assert_int_equal(s.resumed_blocks, 9);
    assert_int_equal(s.computed_tokens, 900 - 9 * 64);
    assert_int_equal(s.fetch_misses, 0);

    s = run_and_compare(f, t3, 700, "diverged (between ckpts)");
    assert_int_equal(s.resumed_blocks, 4);

    /* The same prompt again: everything but the last block's tail resumes. */
    s = run_and_compare(f, t1, 900, "repeat (end of turn 2)");
    assert_int_equal(s.resumed_blocks, 14);
    assert_int_equal(s.computed_tokens, 900 - 14 * 64);
    free(t1);
    free(t3);
}

/*
 * A conversation: turn 1 is a 600-token prompt and a 100-token reply (the
 * reply completes block 9, written with the end-of-turn checkpoint); turn 2
 * is turn 1's prompt, the reply and 200 new tokens, and resumes after the
 * reply.
 */
static void test_resume_after_reply(void **state)
{
    fixture_t *f = *state;
    uint32_t *t = prompt(NULL, 0, 900, 41), ids[100], ids_ref[100];
    float lc[VOCAB], lr[VOCAB];
    st_engine_stats_t s;

    assert_int_equal(st_engine_run(f->cached, t, 600, 100, lc, ids, &s), ST_OK);
    assert_int_equal(st_engine_run(f->ref, t, 600, 100, lr, ids_ref, NULL), ST_OK);
    assert_memory_equal(ids, ids_ref, sizeof(ids));
    assert_memory_equal(lc, lr, sizeof(lc));
    assert_int_equal(s.kda_written, 4); /* 3, 7, 8 (prompt end), 9 (turn end) */
    assert_int_equal(s.objects_written, 10 * 2 * 2 + 4);
    memcpy(t + 600, ids, sizeof(ids));
    s = run_and_compare(f, t, 900, "turn 2 after a reply");
    assert_int_equal(s.lookup_resumable, 10);
    assert_int_equal(s.resumed_blocks, 10);
    assert_int_equal(s.computed_tokens, 900 - 640);
    free(t);
}

/*
 * Edges: a prompt shorter than a block whose reply completes block 0 (named
 * from the namespace seed during decode), resumed by the next turn; a prompt
 * of whole blocks, whose last block is never resumed (its last token must
 * be computed) and so resumes at the checkpoint before it.
 */
static void test_cache_edges(void **state)
{
    fixture_t *f = *state;
    uint32_t *t = prompt(NULL, 0, 700, 61), ids[40];
    float lg[VOCAB];
    st_engine_stats_t s;

    assert_int_equal(st_engine_run(f->cached, t, 30, 40, lg, ids, &s), ST_OK);
    assert_int_equal(s.lookups, 0);
    assert_int_equal(s.objects_written, 2 * 2 + 1); /* block 0 and its end-of-turn KDA */
    memcpy(t + 30, ids, sizeof(ids));
    s = run_and_compare(f, t, 100, "short prompt + reply");
    assert_int_equal(s.resumed_blocks, 1);

    free(t);
    t = prompt(NULL, 0, 640, 62);
    write_turn(f, t, 640);
    s = run_and_compare(f, t, 640, "whole blocks, again");
    assert_int_equal(s.lookup_resumable, 8); /* looked up within 9 blocks: checkpoint 7 */
    assert_int_equal(s.resumed_blocks, 8);
    assert_int_equal(s.computed_tokens, 128);
    free(t);
}

/*
 * Another model (seed 2, same shape) in the same namespace finds turn 1's
 * objects, but every KDA checkpoint carries the other model's fingerprint:
 * each resume attempt fails, and the engine recomputes from the start. (KV
 * and IDX rows carry no fingerprint, so the namespace, the client's model
 * name, must name the weights.)
 */
static void test_cache_other_model(void **state)
{
    fixture_t *f = *state;
    st_model_config_t mc;
    st_model_t *m2;
    st_engine_t *e2, *r2;
    st_engine_params_t ep = {.field_mask = ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL,
                             .client = f->client,
                             .kda_interval = 4};
    uint32_t *t = prompt(NULL, 0, 600, 51);
    float lc[VOCAB], lr[VOCAB];
    st_engine_stats_t s;

    write_turn(f, t, 600);
    st_model_config_default(&mc);
    mc.seed = 2;
    assert_int_equal(st_model_create(&mc, &m2), ST_OK);
    assert_int_equal(st_engine_create(m2, &ep, &e2), ST_OK);
    assert_int_equal(st_engine_create(m2, NULL, &r2), ST_OK);
    assert_int_equal(st_engine_run(e2, t, 600, 0, lc, NULL, &s), ST_OK);
    assert_int_equal(st_engine_run(r2, t, 600, 0, lr, NULL, NULL), ST_OK);
    assert_int_equal(s.lookup_resumable, 9);
    assert_int_equal(s.resumed_blocks, 0);
    assert_true(s.fetch_misses >= 3);
    assert_true(s.write_failures > 0); /* objects are immutable: other bytes are refused */
    assert_memory_equal(lc, lr, sizeof(lc));
    st_engine_free(e2);
    st_engine_free(r2);
    st_model_free(m2);
    free(t);
}

/* With the default interval of 16 blocks: resume exactly at a periodic checkpoint. */
static void test_resume_periodic_checkpoint(void **state)
{
    fixture_t *f = *state;
    st_engine_t *e16 = NULL;
    st_engine_params_t ep = {.field_mask = ST_ENGINE_FIELD_CLIENT, .client = f->client};
    uint32_t *t1 = prompt(NULL, 0, 1100, 11), *t2 = prompt(t1, 1050, 1150, 12);
    st_engine_t *keep = f->cached;
    st_engine_stats_t s;

    assert_int_equal(st_engine_create(f->model, &ep, &e16), ST_OK);
    f->cached = e16;
    assert_int_equal(st_engine_run(f->cached, t1, 1100, 0, NULL, NULL, &s), ST_OK);
    assert_int_equal(s.kda_written, 2); /* block 15 (interval), 16 (end) */
    s = run_and_compare(f, t2, 1150, "interval 16, at block 16");
    assert_int_equal(s.lookup_resumable, 16);
    assert_int_equal(s.resumed_blocks, 16);
    f->cached = keep;
    st_engine_free(e16);
    free(t1);
    free(t2);
}

/*
 * Picks the node to kill for a prompt of n tokens: the home of its first
 * segment (of 4 blocks) that does not live where segment 0 does, so that a
 * prefix survives. Returns the node; *lost_seg_p is that segment. The KDA
 * checkpoints are on two nodes, so the one before the lost segment survives.
 */
static int pick_victim(fixture_t *f, const uint32_t *tok, size_t n, size_t *lost_seg_p)
{
    const char *names[N_NODES];
    st_hash_t chain[64];
    size_t nb, S = st_client_segment_blocks(f->client);
    ring_t ring;
    int victim = -1;

    assert_int_equal(S, 4);
    for (int i = 0; i < N_NODES; i++) {
        names[i] = f->cl.node[i].addr;
    }
    assert_int_equal(st_client_hash(f->client, tok, n, NULL, 0, chain, 64, &nb), ST_OK);
    assert_int_equal(ring_init(&ring, names, N_NODES, 128), ST_OK);
    for (size_t k = 1; k * S < nb && victim < 0; k++) {
        if (ring_home(&ring, &chain[k * S]) != ring_home(&ring, &chain[0])) {
            victim = (int)ring_home(&ring, &chain[k * S]);
            *lost_seg_p = k;
        }
    }
    ring_destroy(&ring);
    return victim;
}

/* A prompt, the node to kill and the segment of its first block (pick_victim). */
typedef struct victim_turn {
    uint32_t *t;
    int victim;
    size_t lost;
} victim_turn_t;

/*
 * A prompt of 1,100 tokens whose segments are not all on one node (the salt
 * is searched), its first 1,000 written as a turn.
 */
static victim_turn_t spread_turn(fixture_t *f)
{
    for (uint32_t salt = 21;; salt++) {
        victim_turn_t v = {.t = prompt(NULL, 0, 1100, salt)};

        v.victim = pick_victim(f, v.t, 1000, &v.lost);
        if (v.victim >= 0) {
            write_turn(f, v.t, 1000);
            return v;
        }
        free(v.t);
    }
}

/*
 * A node killed before the request: the lookup counts its segments as
 * misses, the resumable prefix ends at the checkpoint before the first of
 * them, and the rest is recomputed.
 */
static void test_node_killed_before(void **state)
{
    fixture_t *f = *state;
    victim_turn_t v = spread_turn(f);
    st_engine_stats_t s;

    tc_kill(&f->cl, v.victim);
    s = run_and_compare(f, v.t, 1100, "node killed before");
    assert_int_equal(s.resumed_blocks, v.lost * 4); /* 15 without the kill */
    assert_int_equal(s.fetch_misses, 0);
    free(v.t);
}

/*
 * A node killed between the lookup and the fetch (the client still thinks it
 * is up): the fetch misses its objects, the engine looks up again and
 * resumes from the prefix that is left.
 */
static void test_node_killed_mid_stream(void **state)
{
    fixture_t *f = *state;
    victim_turn_t v = spread_turn(f);
    st_engine_stats_t s;

    f->victim = v.victim;
    s = run_and_compare(f, v.t, 1100, "node killed mid-stream");
    assert_int_equal(f->victim, -1);
    assert_int_equal(s.lookup_resumable, 15);
    assert_true(s.fetch_misses > 0);
    assert_int_equal(s.lookups, 2);
    assert_int_equal(s.resumed_blocks, v.lost * 4);
    free(v.t);
}

/* ---- the bounded local pool (docs/engine.md, "Overlap") ---- */

static void kill_on_progress(void *arg, size_t done, size_t total)
{
    kill_on_lookup(arg, NULL);
}

/* An engine over the fixture's client that keeps local_blocks closed blocks. */
static st_engine_t *pooled_ex(fixture_t *f, uint32_t local_blocks, int kill_hook, int serial)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    ep.field_mask = ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL |
                    ST_ENGINE_FIELD_LOCAL_BLOCKS | ST_ENGINE_FIELD_SERIAL_ROWS |
                    (kill_hook ? ST_ENGINE_FIELD_ON_PROGRESS : 0);
    ep.serial_rows = (uint32_t)serial;
    ep.client = f->client;
    ep.kda_interval = 4;
    ep.local_blocks = local_blocks;
    ep.on_progress = kill_on_progress;
    ep.on_progress_arg = f;
    assert_int_equal(st_engine_create(f->model, &ep, &e), ST_OK);
    return e;
}

static st_engine_t *pooled(fixture_t *f, uint32_t local_blocks, int kill_hook)
{
    return pooled_ex(f, local_blocks, kill_hook, 0);
}

/*
 * The local/remote split forced to several ratios: a 1100-token turn is
 * cached, then the same 1100 tokens (17 blocks resumed) run with 1, 3 and 8 local
 * blocks, and a cold 600-token prompt with 2 (its blocks leave the pool while
 * it computes and are read back from the cluster). Every run equals the full
 * recompute; the smaller the pool, the more rows come from the cluster.
 */
static void test_pool_ratios(void **state)
{
    fixture_t *f = *state;
    uint32_t *t = prompt(NULL, 0, 1100, 31), *c = prompt(NULL, 0, 600, 32);
    const uint32_t sizes[] = {1, 3, 8};
    st_engine_t *saved = f->cached;
    uint64_t last_remote = UINT64_MAX;
    st_engine_stats_t s;

    write_turn(f, t, 1100); /* every pooled run below resumes the same 17 blocks */
    for (size_t i = 0; i < 3; i++) {
        char what[64];

        f->cached = pooled(f, sizes[i], 0);
        snprintf(what, sizeof(what), "pool %u blocks, resumed", sizes[i]);
        s = run_and_compare(f, t, 1100, what);
        printf("#   rows local=%llu remote=%llu fetched=%llu B fallbacks=%llu overlap=%.2f "
               "row reads=%llu us\n",
               (unsigned long long)s.rows_local, (unsigned long long)s.rows_remote,
               (unsigned long long)s.bytes_fetched, (unsigned long long)s.pool_fallbacks,
               st_engine_overlap(&s), (unsigned long long)s.rows_us);
        assert_int_equal(s.resumed_blocks, 17);
        assert_int_equal(s.pool_fallbacks, 0);
        assert_true(s.rows_remote > 0);
        assert_true(s.rows_us > 0 && s.rows_us <= s.fetch_us);
        assert_true(s.rows_remote < last_remote);
        assert_true(s.bytes_fetched > 0);
        last_remote = s.rows_remote;
        st_engine_free(f->cached);
    }
    /* The rows read before the local partials (the benchmark's no-overlap mode). */
    f->cached = pooled_ex(f, 3, 0, 1);
    s = run_and_compare(f, t, 1100, "pool 3 blocks, serial rows");
    assert_true(s.rows_remote > 0);
    assert_true(s.stall_us > 0);
    st_engine_free(f->cached);
    f->cached = pooled(f, 2, 0);
    s = run_and_compare(f, c, 600, "pool 2 blocks, cold");
    assert_int_equal(s.resumed_blocks, 0);
    assert_true(s.rows_remote > 0);
    assert_int_equal(s.pool_fallbacks, 0);
    assert_int_equal(s.write_failures, 0);
    st_engine_free(f->cached);
    f->cached = saved;
    free(t);
    free(c);
}

/*
 * A node dies after the resume, while the engine reads rows of its blocks:
 * the read fails, the engine recomputes the sequence with every block local,
 * and the logits still equal the full recompute.
 */
static void test_pool_node_killed(void **state)
{
    fixture_t *f = *state;
    victim_turn_t v = spread_turn(f);
    st_engine_t *saved = f->cached;
    st_engine_stats_t s;

    f->cached = pooled(f, 1, 1);
    f->victim = v.victim;
    s = run_and_compare(f, v.t, 1100, "pool 1 block, node killed");
    assert_int_equal(f->victim, -1);
    assert_int_equal(s.resumed_blocks, 15);
    assert_int_equal(s.pool_fallbacks, 1);
    assert_true(s.computed_tokens >= 1100); /* the recompute of the prefix, then the tail */
    st_engine_free(f->cached);
    f->cached = saved;
    free(v.t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_resume_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_after_reply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_edges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_other_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_periodic_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_killed_before, setup, teardown),
        cmocka_unit_test_setup_teardown(test_node_killed_mid_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_ratios, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pool_node_killed, setup, teardown),
    };

    if (TM_STRATAD_FILTER_ARG(argc, argv, "test_engine",
                              "PATH-TO-STRATAD [TEST-NAME-PATTERN [TRANSPORT]]",
                              &stratad_path) != 0) {
        return 2;
    }
    if (argc > 3) {
        transport = argv[3]; /* "ucx": rows read one-sided (the lease cache's path) */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
