/*
 * test_score.c - near-data scoring (st_client_score, the daemons' Score
 * call) against real daemons on loopback: over 1, 2, 3 and 4 daemons,
 * histories of random indexer keys written as IDX objects, with ties
 * planted on purpose, and k of 1, 7, 128, 2048 and above the rows: the
 * positions and the scores (bit for bit) are st_cpu_indexer_topk's over the
 * concatenated keys, and each score is st_cpu_indexer_scores' of its row,
 * in one round and in two (STRATA_SCORE_ROUNDS=2).
 * Bad input refused with the status and the field named; an object of the
 * wrong size is ST_ERR_CORRUPT; blocks a node does not hold are answered as
 * missing; a node killed: NOT_FOUND or UNAVAILABLE, then the copies written
 * again on the ring's next nodes answer; another tenant's namespace is
 * refused. Over the transport (transport call 4) the answers are gRPC's,
 * through libstrata and as raw frames; the daemon's /metrics count the calls.
 * Objects evicted to the SSD tier are promoted and scored.
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
#include "grpc_conn.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/kernels.h"
#include "strata/strata.h"
#include "stratad_arg.h"
#include "tcall_raw.h"
#include "tenants.h"

#define HEADS 4
#define DIM   32
#define LAYER 1

#define TOKEN_A "score-test-acme-token-0123456789abcdef"
#define TOKEN_B "score-test-evil-token-0123456789abcdef"

static const char *stratad_path;

/* A history: n blocks of bt rows of DIM floats, and their summaries. */
typedef struct hist {
    size_t n;
    uint32_t bt;
    float *keys;
    float *sum;
    int row_sums; /* written with row sums of DIM floats a row */
} hist_t;

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 11;
}

static float rnd(uint64_t *x)
{
    return (float)((double)lcg(x) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* Random keys; with ties, every fifth block repeats the one two before it
 * and rows 3 and 9 of block 0 are equal (equal scores at several positions). */
static void hist_make(hist_t *h, size_t n, uint32_t bt, uint64_t seed, int ties)
{
    size_t bf = (size_t)bt * DIM;

    h->n = n;
    h->bt = bt;
    h->row_sums = (int)(seed % 2);
    h->keys = malloc(sizeof(float) * n * bf);
    h->sum = malloc(sizeof(float) * n * 2 * DIM);
    assert_true(h->keys && h->sum);
    for (size_t i = 0; i < n * bf; i++) {
        h->keys[i] = rnd(&seed);
    }
    for (size_t b = 4; ties && b < n; b += 5) {
        memcpy(h->keys + b * bf, h->keys + (b - 2) * bf, sizeof(float) * bf);
    }
    if (ties) {
        memcpy(h->keys + 9 * DIM, h->keys + 3 * DIM, sizeof(float) * DIM);
    }
    assert_int_equal(st_cpu_block_summary(h->keys, (int)(n * bt), DIM, (int)bt, h->sum), ST_OK);
}

static void hist_free(hist_t *h)
{
    free(h->keys);
    free(h->sum);
}

/* Block b's IDX object: its rows, then min[DIM], max[DIM]. */
static float *hist_object(const hist_t *h, size_t b, size_t *len)
{
    size_t bf = (size_t)h->bt * DIM;
    float *o = malloc(sizeof(float) * (bf + 2 * DIM));

    assert_non_null(o);
    memcpy(o, h->keys + b * bf, sizeof(float) * bf);
    memcpy(o + bf, h->sum + b * 2 * DIM, sizeof(float) * 2 * DIM);
    *len = sizeof(float) * (bf + 2 * DIM);
    return o;
}

/* Puts blocks [from, to) of h as IDX objects of layer `layer`, with row
 * sums of DIM floats a row when h->row_sums (then the daemon reads a
 * block's summary rows alone for its bound). */
static void hist_put(st_client_t *c, const st_hash_t *chain, const hist_t *h, uint16_t layer,
                     size_t from, size_t to)
{
    size_t n = to - from;
    st_put_op_t *ops = calloc(n, sizeof(*ops));
    float **objs = calloc(n, sizeof(*objs));
    st_handle_t *hd;

    assert_true(ops && objs);
    for (size_t i = 0; i < n; i++) {
        size_t len;

        objs[i] = hist_object(h, from + i, &len);
        ops[i] = (st_put_op_t){
            from + i, ST_KIND_IDX, layer, objs[i], len, 0, h->row_sums ? DIM * sizeof(float) : 0};
    }
    assert_int_equal(st_client_put(c, chain, h->n, ops, n, 0, &hd), ST_OK);
    assert_int_equal(st_handle_wait(hd, 60000), ST_OK);
    st_handle_release(hd);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ops[i].status, ST_OK);
        free(objs[i]);
    }
    free(ops);
    free(objs);
}

static void query_make(float *q, float *w, uint64_t seed)
{
    for (int i = 0; i < HEADS * DIM; i++) {
        q[i] = rnd(&seed);
    }
    for (int j = 0; j < HEADS; j++) {
        w[j] = j == 1 ? -0.25f : rnd(&seed) + 1.5f; /* one negative head weight */
    }
}

/*
 * Scores blocks [first, first + n) of h through the cluster and checks the
 * answer against st_cpu_indexer_topk over the concatenated keys: the same
 * positions in the same order, the same scores bit for bit, each the
 * st_cpu_indexer_scores of its row. Returns the ties seen in the answer.
 */
static size_t check_score(st_client_t *c, const st_hash_t *chain, const hist_t *h, size_t first,
                          size_t n, uint32_t k, uint64_t qseed)
{
    float q[HEADS * DIM], w[HEADS];
    size_t rows = n * h->bt, want = k < rows ? k : rows, n_out = 0, ties = 0;
    int32_t *idx = malloc(sizeof(int32_t) * want);
    float *ref = malloc(sizeof(float) * want), *all = malloc(sizeof(float) * rows);
    uint64_t *pos = malloc(sizeof(uint64_t) * k);
    float *sc = malloc(sizeof(float) * k);
    const float *keys = h->keys + first * h->bt * DIM;
    st_score_stats_t stats;
    st_score_query_t sq;

    assert_true(idx && ref && all && pos && sc);
    query_make(q, w, qseed);
    sq = (st_score_query_t){LAYER, HEADS, DIM, q, w, k};
    assert_int_equal(st_cpu_indexer_topk(q, w, HEADS, DIM, keys, (int)rows, (int)h->bt,
                                         h->sum + first * 2 * DIM, (int)k, idx, ref, NULL),
                     ST_OK);
    assert_int_equal(st_cpu_indexer_scores(q, w, 1, HEADS, DIM, keys, (int)rows, all), ST_OK);
    if (st_client_score(c, chain, first, n, &sq, pos, sc, &n_out, &stats) != ST_OK) {
        fail_msg("score [%zu, +%zu) k=%u: %s", first, n, k, st_client_last_error());
    }
    assert_int_equal(n_out, want);
    for (size_t i = 0; i < want; i++) {
        uint64_t expect = first * h->bt + (uint64_t)idx[i];

        if (pos[i] != expect || memcmp(&sc[i], &ref[i], sizeof(float)) != 0 ||
            memcmp(&sc[i], &all[pos[i] - first * h->bt], sizeof(float)) != 0) {
            fail_msg("score [%zu, +%zu) k=%u: candidate %zu is %llu (%.9g), local scoring %llu "
                     "(%.9g)",
                     first, n, k, i, (unsigned long long)pos[i], (double)sc[i],
                     (unsigned long long)expect, (double)ref[i]);
        }
        ties += i > 0 && sc[i] == sc[i - 1];
    }
    assert_int_equal(stats.blocks, n);
    assert_true(stats.blocks_scored >= 1 && stats.blocks_scored <= 2 * n); /* two rounds: twice */
    assert_true(stats.nodes >= 1 && stats.bytes_sent > 0 && stats.bytes_received > 0);
    free(idx);
    free(ref);
    free(all);
    free(pos);
    free(sc);
    return ties;
}

static st_client_t *connect_as(const tc_cluster_t *cl, const char *token)
{
    st_client_params_t p;

    cf_params_session(&p, cl->peers, "k3", 30000);
    p.token = token;
    p.field_mask |= token != NULL ? ST_CLIENT_FIELD_TOKEN : 0;
    return token != NULL ? cf_connect(&p) : cf_connect_retry(&p, 50);
}

/* Over 1, 2, 3 and 4 daemons: two histories, several ranges and k. */
static void test_score_equals_local(void **state)
{
    static const uint32_t ks[] = {1, 7, 128, 2048};

    (void)state;
    for (int nn = 1; nn <= 4; nn++) {
        tc_cluster_t cl;
        st_client_t *c;
        st_hash_t *chain, *chain2;
        hist_t h, h2;
        size_t ties = 0;

        assert_int_equal(tc_start(&cl, stratad_path, nn, "--memory-limit 256M"), 0);
        c = connect_as(&cl, NULL);
        chain = cf_chain(c, 100 + (uint64_t)nn, 300);
        chain2 = cf_chain(c, 200 + (uint64_t)nn, 90);
        hist_make(&h, 300, st_client_block_tokens(c), 7 + (uint64_t)nn, 1);
        hist_make(&h2, 90, st_client_block_tokens(c), 70 + (uint64_t)nn, 0);
        hist_put(c, chain, &h, LAYER, 0, h.n);
        hist_put(c, chain2, &h2, LAYER, 0, h2.n);
        /* One round, then two (STRATA_SCORE_ROUNDS=2: a floor from every
         * node's top k / nodes first): the same answers. */
        for (int rounds = 1; rounds <= 2; rounds++) {
            if (rounds == 2) {
                assert_int_equal(setenv("STRATA_SCORE_ROUNDS", "2", 1), 0);
            }
            for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
                ties += check_score(c, chain, &h, 0, h.n, ks[i], 1000 + i);
                ties += check_score(c, chain, &h, 37, 150, ks[i], 2000 + i);
                check_score(c, chain2, &h2, 0, h2.n, ks[i], 3000 + i);
            }
            /* k above the rows of the range: every row, ranked. */
            ties += check_score(c, chain, &h, 5, 3, 2048, 4000);
            ties += check_score(c, chain, &h, 296, 4, 300, 4001);
            check_score(c, chain2, &h2, 89, 1, 65, 4002);
        }
        assert_int_equal(unsetenv("STRATA_SCORE_ROUNDS"), 0);
        /* The planted ties reach the answers (equal scores, lower position first). */
        assert_true(ties > 0);
        hist_free(&h);
        hist_free(&h2);
        free(chain);
        free(chain2);
        st_client_close(c);
        tc_stop_all(&cl);
    }
}

/* A raw Score request over blocks[0..n) of chain (indices from 0). */
typedef struct raw_score {
    Strata__V1__ScoreRequest req;
    uint64_t blocks[512];
    float q[HEADS * DIM + 8], w[HEADS + 8];
} raw_score_t;

static void raw_init(raw_score_t *r, uint64_t ns, const st_hash_t *chain, size_t n)
{
    strata__v1__score_request__init(&r->req);
    query_make(r->q, r->w, 5);
    for (size_t i = 0; i < n; i++) {
        r->blocks[i] = i;
    }
    r->req.namespace_id = ns;
    r->req.layer = LAYER;
    r->req.heads = HEADS;
    r->req.dim = DIM;
    r->req.q = r->q;
    r->req.n_q = HEADS * DIM;
    r->req.w = r->w;
    r->req.n_w = HEADS;
    r->req.k = 16;
    r->req.block_hashes.data = (uint8_t *)chain;
    r->req.block_hashes.len = n * ST_HASH_BYTES;
    r->req.blocks = r->blocks;
    r->req.n_blocks = n;
}

/* Sends r; expects status and, when not ST_OK, words in the message. */
static Strata__V1__ScoreResponse *raw_call(gc_conn_t *g, raw_score_t *r, st_status_t expect,
                                           const char *words)
{
    Strata__V1__ScoreResponse *resp = NULL;
    srpc_error_t err = {0};
    st_status_t st = gc_call(g, SRPC_CACHE_SCORE, &r->req, (void **)&resp, &err);

    if (st != expect || (words != NULL && strstr(err.message, words) == NULL)) {
        fail_msg("Score: %s \"%s\", expected %s \"%s\"", st_status_name(st), err.message,
                 st_status_name(expect), words ? words : "");
    }
    return resp;
}

/* The client refuses a bad query, naming the field. */
static void bad_client_queries(st_client_t *c, const st_hash_t *chain)
{
    float q[HEADS * DIM], w[HEADS], sc[ST_SCORE_K_MAX];
    uint64_t pos[ST_SCORE_K_MAX];
    size_t n_out;
    st_score_query_t sq;

    query_make(q, w, 1);
    sq = (st_score_query_t){LAYER, HEADS, DIM, q, w, 0};
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "k=0"));
    sq.k = ST_SCORE_K_MAX + 1;
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    sq = (st_score_query_t){LAYER, 0, DIM, q, w, 8};
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "heads=0"));
    sq = (st_score_query_t){LAYER, HEADS, 2000, q, w, 8};
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "dim=2000"));
    sq = (st_score_query_t){LAYER, HEADS, DIM, NULL, w, 8};
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    q[5] = NAN;
    sq = (st_score_query_t){LAYER, HEADS, DIM, q, w, 8};
    assert_int_equal(st_client_score(c, chain, 0, 10, &sq, pos, sc, &n_out, NULL), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "q holds"));
    q[5] = 0.5f;
}

/* The daemon refuses what the client would not send, naming the field; a
 * good request answers min(k, rows) ranked candidates. */
static void bad_raw_requests(gc_conn_t *g, const st_hash_t *chain, const hist_t *h)
{
    raw_score_t r;
    Strata__V1__ScoreResponse *resp;

    raw_init(&r, g->ns, chain, 10);
    r.req.n_q = HEADS * DIM - 1;
    raw_call(g, &r, ST_ERR_INVALID, "q has 127 floats");
    raw_init(&r, g->ns, chain, 10);
    r.req.n_w = HEADS + 1;
    raw_call(g, &r, ST_ERR_INVALID, "w has 5 floats");
    raw_init(&r, g->ns, chain, 10);
    r.req.heads = 65;
    raw_call(g, &r, ST_ERR_INVALID, "heads=65");
    raw_init(&r, g->ns, chain, 10);
    r.req.dim = 1025;
    raw_call(g, &r, ST_ERR_INVALID, "dim=1025");
    raw_init(&r, g->ns, chain, 10);
    r.req.k = 0;
    raw_call(g, &r, ST_ERR_INVALID, "k=0");
    r.req.k = ST_SCORE_K_MAX + 1;
    raw_call(g, &r, ST_ERR_INVALID, "k=2049");
    raw_init(&r, g->ns, chain, 10);
    r.req.layer = 128;
    raw_call(g, &r, ST_ERR_INVALID, "layer=128");
    raw_init(&r, g->ns, chain, 10);
    r.req.n_blocks = 9;
    raw_call(g, &r, ST_ERR_INVALID, "10 block_hashes but 9 blocks");
    raw_init(&r, g->ns, chain, 10);
    r.blocks[4] = 2;
    raw_call(g, &r, ST_ERR_INVALID, "blocks[4]=2: blocks must rise");
    raw_init(&r, g->ns, chain, 10);
    r.req.block_hashes.len = 10 * ST_HASH_BYTES - 1;
    raw_call(g, &r, ST_ERR_INVALID, "block_hashes");
    raw_init(&r, g->ns, chain, 65);
    raw_call(g, &r, ST_ERR_INVALID, "65 blocks exceed max_hashes=64");
    raw_init(&r, g->ns, chain, 0);
    raw_call(g, &r, ST_ERR_INVALID, "no blocks");
    raw_init(&r, g->ns, chain, 10);
    r.w[2] = INFINITY;
    raw_call(g, &r, ST_ERR_INVALID, "w holds");
    raw_init(&r, g->ns + 1, chain, 10);
    raw_call(g, &r, ST_ERR_NOT_FOUND, "unknown namespace_id");

    raw_init(&r, g->ns, chain, 10);
    resp = raw_call(g, &r, ST_OK, NULL);
    assert_int_equal(resp->n_positions, 16);
    assert_int_equal(resp->n_missing, 0);
    assert_int_equal(resp->block_tokens, h->bt);
    /* Scored on the path this process scores on (the best the CPU has, for both). */
    assert_int_equal(resp->simd, st_kernels_simd());
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* IDX objects whose size is not the layout's: CORRUPT, named, through the
 * client and raw; the layout's size with another row-sum size: answered. */
static void corrupt_objects(st_client_t *c, gc_conn_t *g, const st_hash_t *chain, const hist_t *h)
{
    float q[HEADS * DIM], w[HEADS], sc[ST_SCORE_K_MAX];
    uint64_t pos[ST_SCORE_K_MAX];
    size_t n_out;
    st_score_query_t sq = {LAYER, HEADS, DIM, q, w, 8};
    st_put_op_t op;
    st_handle_t *hd;
    uint8_t small[100] = {0};
    raw_score_t r;

    query_make(q, w, 1);
    /* An IDX object whose size is not the layout's: CORRUPT, named, through
     * the client and raw; the daemon's log says so. */
    op = (st_put_op_t){0, ST_KIND_IDX, 5, small, sizeof(small), 0, 0};
    assert_int_equal(st_client_put(c, chain, 80, &op, 1, 0, &hd), ST_OK);
    assert_int_equal(st_handle_wait(hd, 30000), ST_OK);
    st_handle_release(hd);
    assert_int_equal(op.status, ST_OK);
    sq.layer = 5;
    assert_int_equal(st_client_score(c, chain, 0, 3, &sq, pos, sc, &n_out, NULL), ST_ERR_CORRUPT);
    assert_non_null(strstr(st_client_last_error(), "IDX object of block 0 layer 5 is 100 bytes"));
    raw_init(&r, g->ns, chain, 3);
    r.req.layer = 5;
    raw_call(g, &r, ST_ERR_CORRUPT, "is 100 bytes");
    /* One row longer than the layout, with row sums of DIM floats: its
     * summary rows read, its size still refused. */
    {
        size_t len = ((size_t)h->bt + 3) * DIM * sizeof(float);
        uint8_t *big = calloc(1, len);

        assert_non_null(big);
        op = (st_put_op_t){1, ST_KIND_IDX, 6, big, len, 0, DIM * sizeof(float)};
        assert_int_equal(st_client_put(c, chain, 80, &op, 1, 0, &hd), ST_OK);
        assert_int_equal(st_handle_wait(hd, 30000), ST_OK);
        st_handle_release(hd);
        assert_int_equal(op.status, ST_OK);
        free(big);
        sq.layer = 6;
        assert_int_equal(st_client_score(c, chain, 1, 1, &sq, pos, sc, &n_out, NULL),
                         ST_ERR_CORRUPT);
        assert_non_null(strstr(st_client_last_error(), "layer 6 is 8576 bytes"));
    }
    /* The layout's size with row sums of another row size (64 bytes): read
     * whole, answered. */
    {
        hist_t h3;
        size_t len;
        float *o;

        hist_make(&h3, 80, h->bt, 13, 0);
        o = hist_object(&h3, 2, &len);
        op = (st_put_op_t){2, ST_KIND_IDX, 7, o, len, 0, 64};
        assert_int_equal(st_client_put(c, chain, 80, &op, 1, 0, &hd), ST_OK);
        assert_int_equal(st_handle_wait(hd, 30000), ST_OK);
        st_handle_release(hd);
        assert_int_equal(op.status, ST_OK);
        free(o);
        sq.layer = 7;
        assert_int_equal(st_client_score(c, chain, 2, 1, &sq, pos, sc, &n_out, NULL), ST_OK);
        assert_int_equal(n_out, 8);
        hist_free(&h3);
    }
}

static void test_score_bad_input(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    hist_t h;
    gc_conn_t g;
    float q[HEADS * DIM], w[HEADS], sc[ST_SCORE_K_MAX];
    uint64_t pos[ST_SCORE_K_MAX];
    size_t n_out;
    st_score_query_t sq;

    (void)state;
    assert_int_equal(tc_start(&cl, stratad_path, 1, "--memory-limit 128M --max-hashes 64"), 0);
    c = connect_as(&cl, NULL);
    chain = cf_chain(c, 9, 80);
    hist_make(&h, 80, st_client_block_tokens(c), 9, 0);
    hist_put(c, chain, &h, LAYER, 0, 40);
    query_make(q, w, 1);
    bad_client_queries(c, chain);
    sq = (st_score_query_t){LAYER, HEADS, DIM, q, w, 8};

    /* Blocks nobody holds: NOT_FOUND, naming the first. A layer nobody wrote too. */
    assert_int_equal(st_client_score(c, chain, 30, 20, &sq, pos, sc, &n_out, NULL),
                     ST_ERR_NOT_FOUND);
    assert_non_null(strstr(st_client_last_error(), "block 40 layer 1"));
    sq.layer = 3;
    assert_int_equal(st_client_score(c, chain, 0, 5, &sq, pos, sc, &n_out, NULL), ST_ERR_NOT_FOUND);
    sq.layer = LAYER;
    /* More blocks than the node's max_hashes (64): the client splits them. */
    hist_put(c, chain, &h, LAYER, 40, 80);
    check_score(c, chain, &h, 0, 80, 100, 77);

    gc_open(&g, cl.node[0].addr, NULL);
    bad_raw_requests(&g, chain, &h);
    corrupt_objects(c, &g, chain, &h);
    gc_close(&g);
    hist_free(&h);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* Blocks a node does not hold are answered as missing; a node killed: the
 * call fails over to the ring's next node, which answers once it holds the
 * blocks (written again there). */
static void test_score_node_killed(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    hist_t h;
    gc_conn_t g;
    raw_score_t r;
    Strata__V1__ScoreResponse *resp;
    float q[HEADS * DIM], w[HEADS], sc[64];
    uint64_t pos[64];
    size_t n_out;
    st_score_query_t sq;
    st_status_t st;

    (void)state;
    assert_int_equal(tc_start(&cl, stratad_path, 3, "--memory-limit 128M"), 0);
    c = connect_as(&cl, NULL);
    chain = cf_chain(c, 31, 200);
    hist_make(&h, 200, st_client_block_tokens(c), 31, 1);
    hist_put(c, chain, &h, LAYER, 0, h.n);
    check_score(c, chain, &h, 0, h.n, 64, 1);

    /* One node asked about every block: those of the other nodes are missing,
     * its own answered. */
    gc_open(&g, cl.node[0].addr, NULL);
    raw_init(&r, g.ns, chain, 200);
    resp = raw_call(&g, &r, ST_OK, NULL);
    assert_true(resp->n_missing > 0 && resp->n_missing < 200);
    assert_int_equal(resp->n_positions, 16);
    for (size_t i = 0; i < resp->n_positions; i++) {
        for (size_t m = 0; m < resp->n_missing; m++) {
            assert_true(resp->positions[i] / h.bt != resp->missing[m]);
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    gc_close(&g);

    /* Node 1 killed: its blocks are nowhere else. */
    tc_kill(&cl, 1);
    query_make(q, w, 2);
    sq = (st_score_query_t){LAYER, HEADS, DIM, q, w, 64};
    st = st_client_score(c, chain, 0, h.n, &sq, pos, sc, &n_out, NULL);
    assert_true(st == ST_ERR_NOT_FOUND || st == ST_ERR_UNAVAILABLE);
    assert_int_equal(n_out, 0);
    /* Written again, node 1's blocks land on the next nodes, which answer. */
    hist_put(c, chain, &h, LAYER, 0, h.n);
    check_score(c, chain, &h, 0, h.n, 64, 3);
    check_score(c, chain, &h, 10, 150, 2048, 4);

    hist_free(&h);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* Another tenant's namespace: refused as an unknown one, nothing scored. */
static void test_score_other_tenant(void **state)
{
    static const char *const names[2] = {"acme", "evil"};
    static const char *const tokens[2] = {TOKEN_A, TOKEN_B};
    tc_cluster_t cl;
    tt_set_t tns;
    st_client_t *c;
    st_hash_t *chain;
    hist_t h;
    gc_conn_t a, e;
    raw_score_t r;
    char extra[400];
    Strata__V1__ScoreResponse *resp;

    (void)state;
    assert_int_equal(tt_prepare(&tns, stratad_path, names, tokens, 2, "k3"), 0);
    if (!tns.per_tenant) {
        tt_cleanup(&tns);
        skip();
    }
    snprintf(extra, sizeof(extra), "--memory-limit 128M %s %s", tns.flags, tns.shared);
    assert_int_equal(tc_start(&cl, stratad_path, 1, extra), 0);
    c = connect_as(&cl, TOKEN_A);
    chain = cf_chain(c, 41, 20);
    hist_make(&h, 20, st_client_block_tokens(c), 41, 0);
    hist_put(c, chain, &h, LAYER, 0, h.n);
    check_score(c, chain, &h, 0, h.n, 32, 5);

    protobuf_c_message_free_unpacked(&gc_hello(&a, cl.node[0].addr, "acme", "k3", TOKEN_A)->base,
                                     NULL);
    protobuf_c_message_free_unpacked(&gc_hello(&e, cl.node[0].addr, "evil", "k3", TOKEN_B)->base,
                                     NULL);
    /* evil names acme's namespace: refused, as if it did not exist. */
    raw_init(&r, a.ns, chain, 20);
    raw_call(&e, &r, ST_ERR_NOT_FOUND, "unknown namespace_id");
    /* In its own namespace acme's hashes name nothing. */
    raw_init(&r, e.ns, chain, 20);
    resp = raw_call(&e, &r, ST_OK, NULL);
    assert_int_equal(resp->n_positions, 0);
    assert_int_equal(resp->n_missing, 20);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    /* acme itself is answered. */
    raw_init(&r, a.ns, chain, 20);
    resp = raw_call(&a, &r, ST_OK, NULL);
    assert_int_equal(resp->n_positions, 16);
    protobuf_c_message_free_unpacked(&resp->base, NULL);

    gc_close(&a);
    gc_close(&e);
    hist_free(&h);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
    tt_cleanup(&tns);
}

/* Over UCX with transport calls on and off: the same answers; a raw Score
 * frame is answered as gRPC answers it, and refused without Hello's key;
 * /metrics counts the calls, blocks and rows. */
static void test_score_over_transport(void **state)
{
    tc_cluster_t cl;
    st_client_t *c[2];
    st_hash_t *chain;
    hist_t h;
    gc_conn_t g;
    tr_client_t t;
    raw_score_t r;
    Strata__V1__ScoreResponse *a, *b;
    tr_answer_t *ans;
    int mport = tc_free_port();
    char extra[160], series[160];

    (void)state;
    snprintf(extra, sizeof(extra), "--memory-limit 128M --metrics-listen 127.0.0.1:%d", mport);
    assert_int_equal(tc_start(&cl, stratad_path, 1, extra), 0);
    for (int i = 0; i < 2; i++) {
        st_client_params_t p;

        cf_params_session(&p, cl.peers, "k3", 30000);
        p.field_mask |= ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TRANSPORT_CALLS;
        p.transport = "ucx";
        p.transport_calls = i;
        c[i] = cf_connect(&p);
    }
    chain = cf_chain(c[0], 51, 64);
    hist_make(&h, 64, st_client_block_tokens(c[0]), 51, 1);
    hist_put(c[0], chain, &h, LAYER, 0, h.n);
    for (int i = 0; i < 2; i++) {
        check_score(c[i], chain, &h, 0, h.n, 128, 6);
        check_score(c[i], chain, &h, 3, 50, 2048, 7);
    }

    gc_open(&g, cl.node[0].addr, NULL);
    assert_int_equal(tr_open(&t, cl.node[0].addr, NULL, "acme", "k3"), ST_OK);
    assert_true(t.serves);
    raw_init(&r, g.ns, chain, 64);
    a = raw_call(&g, &r, ST_OK, NULL);
    assert_int_equal(tr_call_msg(&t, TCALL_SCORE, 11, t.key, t.key_len, &r.req.base), ST_OK);
    assert_int_equal(tr_call_msg(&t, TCALL_SCORE, 12, NULL, 0, &r.req.base), ST_OK);
    assert_int_equal(tr_wait(&t, 2, 10000), 2);
    ans = tr_find(&t, 11);
    assert_non_null(ans);
    assert_int_equal(ans->code, 0);
    b = strata__v1__score_response__unpack(NULL, ans->body_len, ans->body);
    assert_non_null(b);
    assert_int_equal(b->n_positions, a->n_positions);
    assert_memory_equal(b->positions, a->positions, sizeof(uint64_t) * a->n_positions);
    assert_memory_equal(b->scores, a->scores, sizeof(float) * a->n_scores);
    assert_int_equal(b->blocks_scored, a->blocks_scored);
    ans = tr_find(&t, 12);
    assert_non_null(ans);
    assert_int_equal(ans->code, 16); /* UNAUTHENTICATED */
    protobuf_c_message_free_unpacked(&a->base, NULL);
    protobuf_c_message_free_unpacked(&b->base, NULL);
    tr_close(&t);
    gc_close(&g);

    /* 4 calls through libstrata, 2 raw ones answered (the one without a key is not). */
    snprintf(series, sizeof(series), "strata_score_calls_total{namespace=\"acme/k3\"}");
    assert_true(tc_metric(mport, series) == 6);
    snprintf(series, sizeof(series), "strata_score_blocks_total{namespace=\"acme/k3\"}");
    assert_true(tc_metric(mport, series) == 2 * (64 + 50) + 2 * 64);
    snprintf(series, sizeof(series), "strata_score_rows_total{namespace=\"acme/k3\"}");
    assert_true(tc_metric(mport, series) > 0);
    snprintf(series, sizeof(series), "strata_request_duration_seconds_count{method=\"Score\"}");
    assert_true(tc_metric(mport, series) >= 6);

    hist_free(&h);
    free(chain);
    for (int i = 0; i < 2; i++) {
        st_client_close(c[i]);
    }
    tc_stop_all(&cl);
}

/* IDX objects evicted to the SSD tier are promoted and scored: the answer
 * is still local scoring's, and the node counts the promotions. */
static void test_score_from_ssd(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain, *filler;
    hist_t h;
    gc_conn_t g;
    char dir[] = "/tmp/strata-score-XXXXXX", args[256], cmd[300];
    size_t n_fill = 1600, flen = 64u << 10;
    uint8_t *fbuf = calloc(1, flen);
    st_put_op_t *ops = calloc(n_fill, sizeof(*ops));
    st_handle_t *hd;

    (void)state;
    assert_true(fbuf && ops);
    assert_non_null(mkdtemp(dir));
    snprintf(args, sizeof(args),
             "--memory-limit 64M --chunk-bytes 4M --max-object 1M --data-dir %s "
             "--ssd-map-size 1G --ssd-sync none",
             dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    c = connect_as(&cl, NULL);
    chain = cf_chain(c, 61, 300);
    hist_make(&h, 300, st_client_block_tokens(c), 61, 1);
    hist_put(c, chain, &h, LAYER, 0, h.n);
    check_score(c, chain, &h, 0, h.n, 256, 8);
    /* 100 MiB of KV objects of another chain: the history goes to SSD. */
    filler = cf_chain(c, 62, n_fill);
    for (size_t i = 0; i < n_fill; i++) {
        ops[i] = (st_put_op_t){i, ST_KIND_KV, 0, fbuf, flen, 0, 0};
    }
    for (size_t i = 0; i < n_fill; i += 100) { /* in batches: the spills keep up */
        assert_int_equal(st_client_put(c, filler, n_fill, ops + i, 100, 0, &hd), ST_OK);
        assert_int_equal(st_handle_wait(hd, 120000), ST_OK);
        st_handle_release(hd);
    }
    gc_open(&g, cl.node[0].addr, NULL);
    assert_true(gc_stat(g.ch, "evicted_blocks") > 300);
    assert_true(gc_stat(g.ch, "ssd_objects_idx") > 0);
    assert_int_equal(gc_stat(g.ch, "ssd_promotions"), 0);
    {
        float q[HEADS * DIM], w[HEADS], sc[256];
        uint64_t pos[256];
        size_t n_out;
        st_score_query_t sq = {LAYER, HEADS, DIM, q, w, 256};
        st_status_t st;

        query_make(q, w, 8);
        st = st_client_score(c, chain, 0, h.n, &sq, pos, sc, &n_out, NULL);
        /* A cache may drop a spill it cannot queue (ssd_spill_failed): then
         * those blocks are missing, and are written again. */
        if (st == ST_ERR_NOT_FOUND) {
            assert_true(gc_stat(g.ch, "ssd_spill_failed") > 0);
            hist_put(c, chain, &h, LAYER, 0, h.n);
        } else {
            assert_int_equal(st, ST_OK);
        }
    }
    assert_true(gc_stat(g.ch, "ssd_promotions") > 0);
    check_score(c, chain, &h, 0, h.n, 256, 8);
    check_score(c, chain, &h, 20, 100, 2048, 9);
    gc_close(&g);

    free(fbuf);
    free(ops);
    free(filler);
    hist_free(&h);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

TM_STRATAD_MAIN("test_score", "PATH-TO-STRATAD", &stratad_path,
                cmocka_unit_test(test_score_equals_local), cmocka_unit_test(test_score_bad_input),
                cmocka_unit_test(test_score_node_killed), cmocka_unit_test(test_score_other_tenant),
                cmocka_unit_test(test_score_over_transport), cmocka_unit_test(test_score_from_ssd))
