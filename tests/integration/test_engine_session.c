/*
 * test_engine_session.c - engine sessions (engine/session.c) against three
 * real daemons on loopback (segments of 4 blocks, KDA checkpoints every 4
 * blocks): a three-turn conversation whose later turns resume the earlier
 * ones, with the logits of a fresh engine without the cache over the same
 * tokens; the session record's head and length; reopening a session and
 * giving it its history back; and what is refused. And a durable engine
 * (st_engine_params_t.durable) against two daemons with data_dir: with one
 * of them killed, its checkpoints and session record are counted as partial
 * writes, and the turn goes on.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "data_dirs.h"
#include "client_fixture.h"
#include "cluster.h"
#include "engine_fixture.h"
#include "strata/engine.h"
#include "stratad_arg.h"

#define N_NODES 3
#define VOCAB   512
#define BT      64
#define TOL     1e-5

static const char *stratad_path;

typedef struct fixture {
    char dir[64]; /* data directories of the durable fixture ("" otherwise) */
    tc_cluster_t cl;
    st_client_t *client;
    st_model_t *model;
    st_engine_t *ref;    /* no cache */
    st_engine_t *cached; /* with the cluster */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    st_client_params_t p;
    st_engine_params_t ep;

    assert_non_null(f);
    assert_int_equal(tc_start(&f->cl, stratad_path, N_NODES, "--segment-blocks 4"), 0);
    ef_client_params(&p, f->cl.peers);
    f->client = cf_connect(&p);
    ef_model_open(&f->model, &f->ref);
    ef_cached_params(&ep, f->client);
    ef_cached_open(f->model, &ep, &f->cached);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;

    ef_teardown(f->cached, f->ref, f->model, f->client, &f->cl);
    if (f->dir[0] != '\0') {
        dd_rm_node_dirs(f->dir, 2);
    }
    free(f);
    return 0;
}

/* Two daemons, each with its own data_dir; a durable engine (W = R = 2). */
static int setup_durable(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    st_client_params_t p;
    st_engine_params_t ep;
    char args[256], d[128];

    assert_non_null(f);
    snprintf(f->dir, sizeof(f->dir), "/tmp/strata-engine-durable-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    for (int i = 0; i < 2; i++) {
        snprintf(d, sizeof(d), "%s/%d", f->dir, i);
        assert_int_equal(mkdir(d, 0700), 0);
    }
    snprintf(args, sizeof(args), "--segment-blocks 4 --ssd-map-size 256M --data-dir %s/{node}",
             f->dir);
    assert_int_equal(tc_start(&f->cl, stratad_path, 2, args), 0);
    ef_client_params(&p, f->cl.peers);
    p.field_mask |= ST_CLIENT_FIELD_REPLICAS;
    p.replicas = 2;
    f->client = cf_connect(&p);
    ef_model_open(&f->model, &f->ref);
    ef_cached_params(&ep, f->client);
    ep.field_mask |= ST_ENGINE_FIELD_DURABLE;
    ep.durable = 1;
    ef_cached_open(f->model, &ep, &f->cached);
    *state = f;
    return 0;
}

/* n tokens of stream salt. */
static uint32_t *turn_tokens(size_t n, uint32_t salt)
{
    uint32_t *t = malloc(sizeof(uint32_t) * n);

    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        t[i] = (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 2246822519u)) % VOCAB;
    }
    return t;
}

/*
 * Appends n tokens of stream salt to the session, generates n_decode, and
 * checks the logits and the reply against the engine without the cache
 * run over the same conversation. Returns the session's stats.
 */
static st_engine_stats_t turn(fixture_t *f, st_engine_session_t *s, size_t n, uint32_t salt,
                              uint32_t n_decode, const char *what)
{
    uint32_t *t = turn_tokens(n, salt), ids[64], ids_ref[64];
    float lc[VOCAB], lr[VOCAB];
    size_t before = st_engine_session_length(s), prompt = before + n;
    uint32_t *conv = malloc(sizeof(uint32_t) * prompt);
    st_engine_stats_t st, sr;
    double diff = 0.0, ref = 0.0;

    assert_true(n_decode <= 64);
    assert_non_null(conv);
    assert_int_equal(st_engine_session_append(s, t, n), ST_OK);
    assert_int_equal(st_engine_session_length(s), prompt);
    memcpy(conv, st_engine_session_tokens(s), sizeof(uint32_t) * prompt);
    assert_int_equal(st_engine_session_generate(s, n_decode, ids, lc, &st), ST_OK);
    assert_int_equal(st_engine_session_length(s), prompt + n_decode);
    assert_memory_equal(st_engine_session_tokens(s), conv, sizeof(uint32_t) * prompt);
    assert_memory_equal(st_engine_session_tokens(s) + prompt, ids, sizeof(uint32_t) * n_decode);

    assert_int_equal(st_engine_run(f->ref, conv, prompt, n_decode, lr, ids_ref, &sr), ST_OK);
    assert_int_equal(sr.computed_tokens, prompt);
    assert_int_equal(st.computed_tokens + st.resumed_blocks * BT, prompt);
    for (int v = 0; v < VOCAB; v++) {
        diff = fmax(diff, fabs((double)lc[v] - lr[v]));
        ref = fmax(ref, fabs((double)lr[v]));
    }
    printf("# %-22s prompt=%zu resumed_blocks=%llu computed=%llu fetched=%llu written=%llu "
           "rel_diff=%.3g\n",
           what, prompt, (unsigned long long)st.resumed_blocks,
           (unsigned long long)st.computed_tokens, (unsigned long long)st.bytes_fetched,
           (unsigned long long)st.bytes_written, diff / ref);
    assert_true(ref > 0.0);
    assert_true(diff / ref <= TOL);
    assert_memory_equal(ids, ids_ref, sizeof(uint32_t) * n_decode);
    assert_int_equal(st.write_failures, 0);
    free(conv);
    free(t);
    return st;
}

/* The record in the cluster matches the conversation's last full block. */
static void check_record(fixture_t *f, st_engine_session_t *s, const char *id)
{
    size_t n = st_engine_session_length(s), nb = n / BT, got = 0;
    st_hash_t *chain = malloc(sizeof(*chain) * (nb + 1));
    st_session_info_t info;

    assert_non_null(chain);
    assert_int_equal(st_session_get(f->client, id, &info), ST_OK);
    assert_int_equal(info.length, nb * BT);
    assert_int_equal(
        st_client_hash(f->client, st_engine_session_tokens(s), nb * BT, NULL, 0, chain, nb, &got),
        ST_OK);
    assert_int_equal(got, nb);
    assert_memory_equal(&info.head, &chain[nb - 1], sizeof(st_hash_t));
    assert_memory_equal(&st_engine_session_info(s)->head, &info.head, sizeof(st_hash_t));
    assert_int_equal(st_engine_session_info(s)->length, info.length);
    free(chain);
}

/*
 * Three turns: 300 tokens + a 20-token reply (block 4 completes during the
 * reply, with the end-of-turn checkpoint), then 150 more + 20, then 130
 * more + 20, then 70 more without a reply. Each later turn resumes every
 * block of the turns before it and computes only its own tokens (and the
 * partial block before them).
 */
static void test_session_turns(void **state)
{
    fixture_t *f = *state;
    st_engine_session_t *s;
    st_engine_stats_t st;

    assert_int_equal(st_engine_session_open(f->cached, "chat-1", 60000, &s), ST_OK);
    assert_int_equal(st_engine_session_info(s)->length, 0);
    assert_int_equal(st_engine_session_length(s), 0);
    assert_null(st_engine_session_tokens(s));

    st = turn(f, s, 300, 1, 20, "turn 1 (cold)");
    assert_int_equal(st.resumed_blocks, 0);
    assert_int_equal(st.computed_tokens, 300);
    check_record(f, s, "chat-1");
    assert_int_equal(st_engine_session_info(s)->length, 320);

    st = turn(f, s, 150, 2, 20, "turn 2");
    assert_int_equal(st.resumed_blocks, 5); /* 320 tokens: prompt 1 and its reply */
    assert_int_equal(st.computed_tokens, 470 - 320);
    assert_true(st.bytes_fetched > 0);
    check_record(f, s, "chat-1");
    assert_int_equal(st_engine_session_info(s)->length, 448);

    st = turn(f, s, 130, 3, 20, "turn 3");
    assert_int_equal(st.resumed_blocks, 7); /* 490 tokens before it: 7 full blocks */
    assert_int_equal(st.computed_tokens, 620 - 448);
    assert_true(st.computed_tokens * 3 < 620);
    check_record(f, s, "chat-1");
    assert_int_equal(st_engine_session_length(s), 640);
    assert_int_equal(st_engine_session_info(s)->length, 640);

    /* A prefill-only turn (no reply) moves the record too. */
    st = turn(f, s, 70, 4, 0, "turn 4 (prefill only)");
    assert_int_equal(st.resumed_blocks, 10);
    assert_int_equal(st.computed_tokens, 70);
    check_record(f, s, "chat-1");
    assert_int_equal(st_engine_session_info(s)->length, 704);

    assert_int_equal(st_engine_session_close(s), ST_OK);
    assert_int_equal(st_session_get(f->client, "chat-1", NULL), ST_ERR_NOT_FOUND);
}

/*
 * A session freed (not closed) keeps its record; another session object
 * reopens it, gets the history back (checked against the record's head)
 * and goes on, resuming everything before the new turn. A history that is
 * another conversation, or shorter than the record, is refused.
 */
static void test_session_reopen(void **state)
{
    fixture_t *f = *state;
    st_engine_session_t *s, *s2;
    st_engine_stats_t st;
    uint32_t *hist, *other;
    size_t n;

    assert_int_equal(st_engine_session_open(f->cached, "chat-2", 0, &s), ST_OK);
    turn(f, s, 350, 11, 10, "first life, turn 1");
    turn(f, s, 100, 12, 10, "first life, turn 2");
    n = st_engine_session_length(s);
    assert_int_equal(n, 470);
    hist = malloc(sizeof(uint32_t) * n);
    assert_non_null(hist);
    memcpy(hist, st_engine_session_tokens(s), sizeof(uint32_t) * n);
    st_engine_session_free(s);

    assert_int_equal(st_engine_session_open(f->cached, "chat-2", 0, &s2), ST_OK);
    assert_int_equal(st_engine_session_info(s2)->length, 448);
    assert_int_equal(st_engine_session_length(s2), 0);
    /* Another conversation of the same length, and one too short. */
    other = turn_tokens(n, 99);
    assert_int_equal(st_engine_session_restore(s2, other, n), ST_ERR_CORRUPT);
    other[0] = hist[0] + 1 >= VOCAB ? 0 : hist[0] + 1; /* the rest equal, the first not */
    memcpy(other + 1, hist + 1, sizeof(uint32_t) * (n - 1));
    assert_int_equal(st_engine_session_restore(s2, other, n), ST_ERR_CORRUPT);
    assert_int_equal(st_engine_session_restore(s2, hist, 440), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_length(s2), 0);
    assert_int_equal(st_engine_session_restore(s2, hist, n), ST_OK);
    assert_int_equal(st_engine_session_length(s2), n);
    assert_int_equal(st_engine_session_restore(s2, hist, n), ST_ERR_INVALID); /* not empty */

    st = turn(f, s2, 75, 13, 10, "second life, turn 3");
    assert_int_equal(st.resumed_blocks, 7); /* 470 tokens: 7 full blocks */
    assert_int_equal(st.computed_tokens, 545 - 448);
    check_record(f, s2, "chat-2");
    assert_int_equal(st_engine_session_close(s2), ST_OK);
    free(hist);
    free(other);
}

/* What is refused, and what happens when the cluster goes away. */
static void test_session_refused(void **state)
{
    fixture_t *f = *state;
    st_engine_session_t *s = NULL;
    uint32_t tok[4] = {1, 2, 3, VOCAB}, ids[8];
    char long_id[80];
    uint32_t *t = turn_tokens(200, 21);
    st_engine_stats_t st;

    memset(long_id, 'x', sizeof(long_id) - 1);
    long_id[64] = '\0';
    assert_int_equal(st_engine_session_open(NULL, "a", 0, &s), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_open(f->ref, "a", 0, &s), ST_ERR_INVALID); /* no client */
    assert_int_equal(st_engine_session_open(f->cached, NULL, 0, &s), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_open(f->cached, "a", 0, NULL), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_open(f->cached, "", 0, &s), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_open(f->cached, long_id, 0, &s), ST_ERR_INVALID);
    assert_null(s);

    assert_int_equal(st_engine_session_append(NULL, tok, 3), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_generate(NULL, 1, ids, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_restore(NULL, tok, 3), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_close(NULL), ST_OK);
    assert_int_equal(st_engine_session_length(NULL), 0);
    assert_null(st_engine_session_tokens(NULL));
    assert_null(st_engine_session_info(NULL));
    st_engine_session_free(NULL);

    assert_int_equal(st_engine_session_open(f->cached, "chat-3", 0, &s), ST_OK);
    assert_int_equal(st_engine_session_generate(s, 1, ids, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_append(s, NULL, 3), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_append(s, tok, 0), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_append(s, tok, 4), ST_ERR_INVALID); /* 512 >= vocab */
    assert_int_equal(st_engine_session_length(s), 0);
    assert_int_equal(st_engine_session_restore(s, tok, 4), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_append(s, tok, 3), ST_OK);
    /* A conversation shorter than a block: no head to record yet. */
    assert_int_equal(st_engine_session_generate(s, 8, NULL, NULL, &st), ST_OK);
    assert_int_equal(st_engine_session_length(s), 11);
    assert_int_equal(st_engine_session_info(s)->length, 0);

    /* The cluster goes away: the turn still runs (recomputed, nothing
     * written), the reply joins the conversation, and the record's update
     * fails with the cluster's status. Opening a session fails too. */
    for (int i = 0; i < N_NODES; i++) {
        tc_kill(&f->cl, i);
    }
    assert_int_equal(st_engine_session_append(s, t, 200), ST_OK);
    assert_int_equal(st_engine_session_generate(s, 8, ids, NULL, &st), ST_ERR_UNAVAILABLE);
    assert_int_equal(st.computed_tokens, 211);
    assert_int_equal(st_engine_session_length(s), 219);
    assert_memory_equal(st_engine_session_tokens(s) + 211, ids, sizeof(ids));
    assert_int_equal(st_engine_session_info(s)->length, 0);
    st_engine_session_free(s);
    s = NULL;
    assert_int_equal(st_engine_session_open(f->cached, "chat-4", 0, &s), ST_ERR_UNAVAILABLE);
    assert_null(s);
    free(t);
}

/*
 * A durable engine: with both daemons up every checkpoint and the session
 * record reach both disks (no partial write); with one killed the next turn
 * still answers right, and its checkpoints and record, stored on one disk
 * of the two asked, are counted as partial writes, not as full successes.
 */
static void test_session_durable(void **state)
{
    fixture_t *f = *state;
    st_engine_session_t *s;
    st_engine_stats_t st;

    assert_int_equal(st_engine_session_open(f->cached, "chat-d", 60000, &s), ST_OK);
    st = turn(f, s, 300, 5, 20, "durable turn 1");
    assert_true(st.kda_written > 0);
    assert_int_equal(st.partial_writes, 0);
    check_record(f, s, "chat-d");

    tc_kill(&f->cl, 1);
    st = turn(f, s, 150, 6, 20, "durable turn 2, 1 of 2");
    assert_true(st.kda_written > 0);
    /* Every checkpoint of the turn and the session record. */
    printf("# partial writes with one of two replicas down: %llu\n",
           (unsigned long long)st.partial_writes);
    assert_int_equal(st.partial_writes, st.kda_written + 1);
    check_record(f, s, "chat-d");
    st_engine_session_free(s);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_session_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_session_durable, setup_durable, teardown),
    };

    if (TM_STRATAD_FILTER_ARG(argc, argv, "test_engine_session",
                              "PATH-TO-STRATAD [TEST-NAME-PATTERN]", &stratad_path) != 0) {
        return 2;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
