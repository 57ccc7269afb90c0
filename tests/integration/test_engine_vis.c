/*
 * test_engine_vis.c - images in the engine (engine/vision.c, engine/vis.c;
 * docs/engine.md "Images") against three real daemons on loopback
 * (segments of 4 blocks, KDA checkpoints every 4 blocks). Every cached run
 * is compared with an engine without the cache over the same tokens and
 * images (max |logit - ref| / max |ref| <= 1e-5, docs/engine.md).
 *
 * - An image across a block boundary changes exactly the blocks it
 *   overlaps: with the chain's extras, the blocks before it are the text
 *   chain's, each block it overlaps differs from the block hashed without
 *   its extra, and each block after it is plain st_hash_block of its
 *   predecessor; a lookup of the placeholders hashed without the image
 *   finds only the blocks before it.
 * - The same image at the same position resumes KV (past the image: no VIS
 *   read, no encoder); resumed inside the image, the rest of it is computed
 *   from its VIS object and the logits equal the full recompute (the image's
 *   attention goes both ways across the resume point).
 * - At another position it misses KV and hits VIS: the encoder is skipped.
 * - Two images that differ in one pixel share no key: not the image hash,
 *   not a block after the text before them, not the VIS object.
 * - A VIS object of another model, or bytes that are no VIS object, under
 *   the image's key are a miss (the encoder runs, the logits are right).
 * - A session with an image: later turns resume over it.
 * - With a bounded local pool: cold and resumed runs with an image, rows
 *   read from the cluster; an image wider than the pool is refused; a node
 *   killed after the resume makes the engine recompute the sequence, its
 *   image included, with every block local.
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
#include "image.h"
#include "ring.h"
#include "strata/engine.h"
#include "strata/hash.h"
#include "stratad_arg.h"

#define N_NODES 3
#define VOCAB   512
#define BT      64
#define TOL     1e-5
#define MAX_IMG 4

static const char *stratad_path;
static tc_cluster_t *g_kill_cl; /* the on_progress hook kills g_kill_node of it once */
static int g_kill_node = -1;

typedef struct fixture {
    tc_cluster_t cl;
    st_client_t *client;
    st_model_t *model;
    st_engine_t *ref;    /* no cache */
    st_engine_t *cached; /* with the cluster */
} fixture_t;

/* A prompt: its tokens, and images whose pixels it owns. */
typedef struct prompt {
    uint32_t *tok;
    size_t n;
    st_engine_image_t img[MAX_IMG];
    im_image_t own[MAX_IMG];
    size_t n_img;
} prompt_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    st_client_params_t p;
    st_engine_params_t ep;

    assert_non_null(f);
    if (tc_start(&f->cl, stratad_path, N_NODES, "--segment-blocks 4") != 0) {
        free(f); /* the test fails; nothing of it is left behind */
        fail_msg("the cluster did not start");
    }
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
    free(f);
    return 0;
}

/* n text tokens of stream salt (never the placeholder, vocab - 1). */
static void text(uint32_t *t, size_t from, size_t to, uint32_t salt)
{
    for (size_t i = from; i < to; i++) {
        t[i] = (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 2246822519u)) % (VOCAB - 1);
    }
}

static void prompt_init(prompt_t *p, size_t n, uint32_t salt)
{
    memset(p, 0, sizeof(*p));
    p->tok = malloc(sizeof(uint32_t) * n);
    assert_non_null(p->tok);
    p->n = n;
    text(p->tok, 0, n, salt);
}

/* Places a generated w x h image at pos (placeholders under it). */
static void prompt_image(prompt_t *p, size_t pos, uint64_t seed, uint32_t w, uint32_t h)
{
    size_t k = p->n_img++;
    uint64_t nt = st_engine_image_tokens(w, h);

    assert_true(k < MAX_IMG);
    assert_true(pos + nt <= p->n);
    assert_int_equal(im_generate(seed, w, h, 3, &p->own[k]), ST_OK);
    p->img[k] = (st_engine_image_t){pos, w, h, 3, p->own[k].pixels};
    for (size_t t = pos; t < pos + nt; t++) {
        p->tok[t] = VOCAB - 1;
    }
}

static void prompt_free(prompt_t *p)
{
    for (size_t k = 0; k < p->n_img; k++) {
        im_free(&p->own[k]);
    }
    free(p->tok);
}

/* Runs the prompt cached and without the cache; the logits must agree. */
static st_engine_stats_t run(fixture_t *f, st_engine_t *e, const prompt_t *p, const char *what)
{
    float lc[VOCAB], lr[VOCAB];
    st_engine_stats_t st, sr;
    double diff = 0.0, ref = 0.0;

    assert_int_equal(st_engine_run_images(e, p->tok, p->n, p->img, p->n_img, 0, lc, NULL, &st),
                     ST_OK);
    assert_int_equal(st_engine_run_images(f->ref, p->tok, p->n, p->img, p->n_img, 0, lr, NULL, &sr),
                     ST_OK);
    assert_int_equal(sr.computed_tokens, p->n);
    assert_int_equal(sr.vis_misses, p->n_img);
    if (st.pool_fallbacks == 0) { /* a fallback computes the prefix again */
        assert_int_equal(st.computed_tokens + st.resumed_blocks * BT, p->n);
    }
    for (int v = 0; v < VOCAB; v++) {
        diff = fmax(diff, fabs((double)lc[v] - lr[v]));
        ref = fmax(ref, fabs((double)lr[v]));
    }
    printf("# %-28s prompt=%zu resumed_blocks=%llu computed=%llu images=%llu vis_hits=%llu "
           "vis_misses=%llu vis_written=%llu encoder_ms=%.1f rel_diff=%.3g\n",
           what, p->n, (unsigned long long)st.resumed_blocks,
           (unsigned long long)st.computed_tokens, (unsigned long long)st.images,
           (unsigned long long)st.vis_hits, (unsigned long long)st.vis_misses,
           (unsigned long long)st.vis_written, st.encoder_us / 1000.0, diff / ref);
    assert_true(ref > 0.0);
    assert_true(diff / ref <= TOL);
    assert_int_equal(st.images, p->n_img);
    return st;
}

/* The chain of the prompt's full blocks, with its images as items or not. */
static size_t chain_of(fixture_t *f, const prompt_t *p, int with_items, st_hash_t *chain,
                       size_t max)
{
    st_hash_item_t it[MAX_IMG];
    size_t nb = 0;

    for (size_t k = 0; k < p->n_img; k++) {
        assert_int_equal(
            st_hash_image(p->img[k].pixels, p->img[k].width, p->img[k].height, 3, &it[k].content),
            ST_OK);
        it[k].start = p->img[k].position;
        it[k].n_tokens = st_engine_image_tokens(p->img[k].width, p->img[k].height);
    }
    assert_int_equal(st_client_hash(f->client, p->tok, p->n, with_items ? it : NULL,
                                    with_items ? p->n_img : 0, chain, max, &nb),
                     ST_OK);
    return nb;
}

static void test_vis_blocks_overlapped(void **state)
{
    fixture_t *f = *state;
    prompt_t p;
    st_hash_t plain[8], with[8], h;
    st_lookup_result_t lr;
    size_t nb;

    /* A 64 x 64 image (16 tokens) at 120: blocks 1 and 2 (64..191). */
    prompt_init(&p, 400, 1);
    prompt_image(&p, 120, 7, 64, 64);
    nb = chain_of(f, &p, 0, plain, 8);
    assert_int_equal(nb, 6);
    assert_int_equal(chain_of(f, &p, 1, with, 8), 6);
    assert_memory_equal(&with[0], &plain[0], sizeof(h));
    for (size_t b = 1; b < nb; b++) {
        /* The block hashed from its predecessor without extras. */
        assert_int_equal(st_hash_block(&with[b - 1], p.tok + b * BT, BT, NULL, NULL, 0, &h), ST_OK);
        if (b == 1 || b == 2) {
            assert_memory_not_equal(&h, &with[b], sizeof(h));
        } else {
            assert_memory_equal(&h, &with[b], sizeof(h));
        }
    }
    /* Written by the engine: the image's chain is cached, the placeholders
     * named without the image share only the block before it. */
    run(f, f->cached, &p, "image at 120, cold");
    assert_int_equal(st_client_lookup(f->client, with, nb, 2, &lr), ST_OK);
    assert_int_equal(lr.matched_blocks, 6);
    assert_int_equal(st_client_lookup(f->client, plain, nb, 2, &lr), ST_OK);
    assert_int_equal(lr.matched_blocks, 1);
    prompt_free(&p);
}

static void test_vis_resume(void **state)
{
    fixture_t *f = *state;
    prompt_t p, q, r;
    st_engine_stats_t st;

    /* A 128 x 128 image (64 tokens) at 200..263: blocks 3 and 4. */
    prompt_init(&p, 400, 2);
    prompt_image(&p, 200, 11, 128, 128);
    st = run(f, f->cached, &p, "cold");
    assert_int_equal(st.resumed_blocks, 0);
    assert_int_equal(st.vis_misses, 1);
    assert_int_equal(st.vis_written, 1);
    assert_true(st.encoder_us > 0);

    /* The same prompt and more: resumed past the image (checkpoint after
     * block 5), the image needs neither VIS nor the encoder. */
    prompt_init(&q, 520, 2);
    prompt_image(&q, 200, 11, 128, 128);
    st = run(f, f->cached, &q, "same image, same place");
    assert_int_equal(st.resumed_blocks, 6);
    assert_int_equal(st.vis_hits + st.vis_misses, 0);
    assert_int_equal(st.encoder_us, 0);

    /* Diverging at 300 (block 4): blocks 0-3 are cached, but block 3 ends
     * inside the image and has no KDA checkpoint (docs/engine.md), so
     * nothing resumes; the image comes from its VIS object. */
    prompt_init(&r, 420, 2);
    prompt_image(&r, 200, 11, 128, 128);
    text(r.tok, 300, 420, 99);
    st = run(f, f->cached, &r, "diverging after the image");
    assert_int_equal(st.lookup_resumable, 0);
    assert_int_equal(st.resumed_blocks, 0);
    assert_int_equal(st.vis_hits, 1);
    assert_int_equal(st.vis_misses, 0);
    assert_int_equal(st.encoder_us, 0);
    prompt_free(&p);
    prompt_free(&q);
    prompt_free(&r);
}

static void test_vis_other_position(void **state)
{
    fixture_t *f = *state;
    prompt_t p, q;
    st_engine_stats_t st;

    prompt_init(&p, 300, 3);
    prompt_image(&p, 70, 21, 96, 80); /* 6 x 5 = 30 tokens */
    st = run(f, f->cached, &p, "image at 70");
    assert_int_equal(st.vis_misses, 1);
    /* The same text, the image 10 tokens later: no block after 0 resumes
     * (block 1 holds the image at another offset), the VIS object is hit. */
    prompt_init(&q, 300, 3);
    prompt_image(&q, 80, 21, 96, 80);
    st = run(f, f->cached, &q, "same image at 80");
    assert_int_equal(st.resumed_blocks, 0); /* checkpoints are at 3: block 0 alone is not */
    assert_int_equal(st.vis_hits, 1);
    assert_int_equal(st.vis_misses, 0);
    assert_int_equal(st.encoder_us, 0);
    prompt_free(&p);
    prompt_free(&q);
}

static void test_vis_one_pixel(void **state)
{
    fixture_t *f = *state;
    prompt_t p, q;
    st_hash_t a[8], b[8], ha, hb;
    st_engine_stats_t st;
    float la[VOCAB], lb[VOCAB];

    prompt_init(&p, 330, 4);
    prompt_image(&p, 250, 31, 64, 64); /* 250..265: blocks 3 and 4 */
    prompt_init(&q, 330, 4);
    prompt_image(&q, 250, 31, 64, 64);
    q.own[0].pixels[64 * 3 * 40 + 3 * 17 + 1] ^= 1; /* one sample of one pixel */
    assert_int_equal(st_hash_image(p.own[0].pixels, 64, 64, 3, &ha), ST_OK);
    assert_int_equal(st_hash_image(q.own[0].pixels, 64, 64, 3, &hb), ST_OK);
    assert_memory_not_equal(&ha, &hb, sizeof(ha));
    assert_int_equal(chain_of(f, &p, 1, a, 8), 5);
    assert_int_equal(chain_of(f, &q, 1, b, 8), 5);
    assert_memory_equal(a, b, 3 * sizeof(ha)); /* the text before the image */
    for (int k = 3; k < 5; k++) {
        assert_memory_not_equal(&a[k], &b[k], sizeof(ha));
    }
    st = run(f, f->cached, &p, "image");
    assert_int_equal(st.vis_misses, 1);
    st = run(f, f->cached, &q, "image, one pixel changed");
    assert_int_equal(st.resumed_blocks, 0); /* blocks 0-2 hold no checkpoint */
    assert_int_equal(st.vis_hits, 0);
    assert_int_equal(st.vis_misses, 1);
    assert_true(st.encoder_us > 0);
    /* And the model saw two images. */
    assert_int_equal(st_engine_run_images(f->ref, p.tok, p.n, p.img, 1, 0, la, NULL, NULL), ST_OK);
    assert_int_equal(st_engine_run_images(f->ref, q.tok, q.n, q.img, 1, 0, lb, NULL, NULL), ST_OK);
    assert_memory_not_equal(la, lb, sizeof(la));
    prompt_free(&p);
    prompt_free(&q);
}

/* Puts raw bytes as the VIS object of an image. */
static void put_vis(fixture_t *f, const st_hash_t *image, const void *bytes, size_t len)
{
    st_put_op_t op = {0, ST_KIND_VIS, 0, bytes, len, 0, 0};
    st_handle_t *h;

    assert_int_equal(st_client_put(f->client, image, 1, &op, 1, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 10000), ST_OK);
    assert_int_equal(op.status, ST_OK);
    st_handle_release(h);
}

static void test_vis_refused_object(void **state)
{
    fixture_t *f = *state;
    st_model_config_t mc;
    st_model_t *other;
    st_engine_t *oe;
    st_engine_params_t ep;
    prompt_t p, q;
    st_engine_stats_t st;
    st_hash_t hq;
    size_t len = 48 + 16 * 128 * sizeof(float);
    uint8_t *junk = malloc(len);

    /* Another model (seed 2) in the same namespace writes its VIS object
     * of the image first: its fingerprint is not ours. */
    st_model_config_default(&mc);
    mc.seed = 2;
    assert_int_equal(st_model_create(&mc, &other), ST_OK);
    ef_cached_params(&ep, f->client);
    ef_cached_open(other, &ep, &oe);
    prompt_init(&p, 130, 5);
    prompt_image(&p, 20, 41, 64, 64);
    assert_int_equal(st_engine_run_images(oe, p.tok, p.n, p.img, 1, 0, NULL, NULL, &st), ST_OK);
    assert_int_equal(st.vis_written, 1);
    text(p.tok, 0, 20, 6); /* other text: no KV block of it resumes */
    st = run(f, f->cached, &p, "VIS of another model");
    assert_int_equal(st.vis_hits, 0);
    assert_int_equal(st.vis_misses, 1);
    assert_true(st.encoder_us > 0);

    /* Bytes of the right length that are no VIS object. */
    assert_non_null(junk);
    for (size_t i = 0; i < len; i++) {
        junk[i] = (uint8_t)(i * 131 + 7);
    }
    prompt_init(&q, 130, 7);
    prompt_image(&q, 30, 43, 64, 64);
    assert_int_equal(st_hash_image(q.own[0].pixels, 64, 64, 3, &hq), ST_OK);
    put_vis(f, &hq, junk, len);
    st = run(f, f->cached, &q, "junk under the image's key");
    assert_int_equal(st.vis_hits, 0);
    assert_int_equal(st.vis_misses, 1);
    free(junk);
    prompt_free(&p);
    prompt_free(&q);
    st_engine_free(oe);
    st_model_free(other);
}

static void test_vis_session(void **state)
{
    fixture_t *f = *state;
    st_engine_session_t *s;
    im_image_t img;
    uint32_t t1[100], t2[150], ids[8], ids_ref[8];
    st_engine_stats_t st;
    float lc[VOCAB], lr[VOCAB];
    st_engine_image_t ei;

    text(t1, 0, 100, 8);
    text(t2, 0, 150, 9);
    assert_int_equal(im_generate(51, 80, 48, 3, &img), ST_OK); /* 5 x 3 = 15 tokens */
    ei = (st_engine_image_t){0, 80, 48, 3, img.pixels};
    assert_int_equal(st_engine_session_open(f->cached, "vis-chat", 0, &s), ST_OK);
    assert_int_equal(st_engine_session_append(s, t1, 100), ST_OK);
    assert_int_equal(st_engine_session_append_image(s, &ei), ST_OK);
    assert_int_equal(st_engine_session_length(s), 115);
    assert_int_equal(st_engine_session_append(s, t1, 100), ST_OK);
    assert_int_equal(st_engine_session_generate(s, 8, ids, NULL, &st), ST_OK);
    assert_int_equal(st.vis_misses, 1);
    assert_int_equal(st_engine_session_append(s, t2, 150), ST_OK);
    assert_int_equal(st_engine_session_generate(s, 8, ids, lc, &st), ST_OK);
    printf("# session turn 2: resumed_blocks=%llu computed=%llu vis_hits=%llu\n",
           (unsigned long long)st.resumed_blocks, (unsigned long long)st.computed_tokens,
           (unsigned long long)st.vis_hits);
    assert_int_equal(st.resumed_blocks, 3); /* turn 1's checkpoint after block 2 */
    assert_int_equal(st.vis_hits + st.vis_misses, 0);
    {
        size_t n = st_engine_session_length(s) - 8;
        st_engine_image_t at = ei;

        at.position = 100;
        assert_int_equal(st_engine_run_images(f->ref, st_engine_session_tokens(s), n, &at, 1, 8, lr,
                                              ids_ref, NULL),
                         ST_OK);
        double diff = 0.0, ref = 0.0;

        for (int v = 0; v < VOCAB; v++) {
            diff = fmax(diff, fabs((double)lc[v] - lr[v]));
            ref = fmax(ref, fabs((double)lr[v]));
        }
        assert_true(ref > 0.0 && diff / ref <= TOL);
        assert_memory_equal(ids, ids_ref, sizeof(ids));
    }
    /* Refused: a bad image leaves the conversation as it was. */
    ei.channels = 2;
    assert_int_equal(st_engine_session_append_image(s, &ei), ST_ERR_INVALID);
    assert_int_equal(st_engine_session_close(s), ST_OK);
    im_free(&img);
}

/* With a bounded local pool (local_blocks 2): an image's rows are all in the
 * pool while it computes, older rows are read from the cluster; cold and
 * resumed runs equal the full recompute; an image over more blocks than the
 * pool holds is refused. */
static void test_vis_pool(void **state)
{
    fixture_t *f = *state;
    st_engine_params_t ep;
    st_engine_t *pooled;
    prompt_t p, q, big;
    st_engine_stats_t st;

    ef_cached_params(&ep, f->client);
    ep.field_mask |= ST_ENGINE_FIELD_LOCAL_BLOCKS;
    ep.local_blocks = 2;
    ef_cached_open(f->model, &ep, &pooled);
    prompt_init(&p, 700, 12);
    prompt_image(&p, 300, 61, 128, 128); /* 300..363: blocks 4 and 5 */
    st = run(f, pooled, &p, "pool 2, cold");
    assert_true(st.rows_remote > 0);
    assert_int_equal(st.pool_fallbacks, 0);
    assert_int_equal(st.vis_misses, 1);
    prompt_init(&q, 900, 12);
    prompt_image(&q, 300, 61, 128, 128);
    st = run(f, pooled, &q, "pool 2, resumed");
    assert_int_equal(st.resumed_blocks, 10);
    assert_true(st.rows_remote > 0);
    /* 80 tokens at 120..199: blocks 1, 2 and 3, more than the pool's 2. */
    prompt_init(&big, 300, 13);
    prompt_image(&big, 120, 62, 128, 160);
    assert_int_equal(st_engine_run_images(pooled, big.tok, big.n, big.img, 1, 0, NULL, NULL, NULL),
                     ST_ERR_UNSUPPORTED);
    prompt_free(&p);
    prompt_free(&q);
    prompt_free(&big);
    st_engine_free(pooled);
}

static void kill_on_progress(void *arg, size_t done, size_t total)
{
    (void)arg, (void)done, (void)total;
    if (g_kill_node >= 0) {
        tc_kill(g_kill_cl, g_kill_node);
        g_kill_node = -1;
    }
}

/*
 * Rows lost with a bounded pool: a node dies after the resume (on_progress),
 * its blocks' rows cannot be read, and the engine recomputes the sequence
 * with every block local, the image in it included: the logits still equal
 * the full recompute.
 */
static void test_vis_pool_fallback(void **state)
{
    fixture_t *f = *state;
    const char *names[N_NODES];
    st_hash_t chain[32];
    st_engine_params_t ep;
    st_engine_t *pooled;
    prompt_t w, p;
    st_engine_stats_t st;
    size_t nb;
    ring_t ring;

    /* The image at 100..115 (block 1), inside the prefix that resumes. */
    prompt_init(&w, 1000, 14);
    prompt_image(&w, 100, 71, 64, 64);
    prompt_init(&p, 1100, 14);
    prompt_image(&p, 100, 71, 64, 64);
    nb = chain_of(f, &w, 1, chain, 32);
    for (int i = 0; i < N_NODES; i++) {
        names[i] = f->cl.node[i].addr;
    }
    assert_int_equal(ring_init(&ring, names, N_NODES, 128), ST_OK);
    g_kill_node = -1;
    for (size_t k = 1; k * 4 < nb && g_kill_node < 0; k++) {
        if (ring_home(&ring, &chain[k * 4]) != ring_home(&ring, &chain[0])) {
            g_kill_node = (int)ring_home(&ring, &chain[k * 4]);
        }
    }
    if (g_kill_node < 0) {
        /* The ports of this run put every segment on block 0's node: kill
         * that one (the resume has read from it before the kill). */
        g_kill_node = (int)ring_home(&ring, &chain[4]);
    }
    ring_destroy(&ring);
    run(f, f->cached, &w, "1000 tokens written");
    g_kill_cl = &f->cl;
    ef_cached_params(&ep, f->client);
    ep.field_mask |= ST_ENGINE_FIELD_LOCAL_BLOCKS | ST_ENGINE_FIELD_ON_PROGRESS;
    ep.local_blocks = 1;
    ep.on_progress = kill_on_progress;
    ef_cached_open(f->model, &ep, &pooled);
    st = run(f, pooled, &p, "pool 1, node killed");
    assert_int_equal(g_kill_node, -1);
    assert_true(st.resumed_blocks > 0);
    assert_int_equal(st.pool_fallbacks, 1);
    assert_true(st.computed_tokens >= 1100); /* the prefix again, then the tail */
    st_engine_free(pooled);
    prompt_free(&w);
    prompt_free(&p);
}

static void test_vis_refused_arguments(void **state)
{
    fixture_t *f = *state;
    prompt_t p;
    st_engine_image_t two[2];

    prompt_init(&p, 100, 10);
    prompt_image(&p, 10, 1, 32, 32); /* 4 tokens at 10..13 */
    two[0] = p.img[0];
    two[1] = p.img[0];
    /* Overlapping, past the end, a text token under it, bad sizes. */
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, two, 2, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    two[0].position = 98;
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, two, 1, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    two[0].position = 11;
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, two, 1, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    two[0] = p.img[0];
    two[0].channels = 4;
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, two, 1, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    two[0] = p.img[0];
    two[0].width = 4096; /* 256 x 2 = 512 tokens: past the prompt */
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, two, 1, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_engine_run_images(f->cached, p.tok, p.n, NULL, 1, 0, NULL, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_engine_image_tokens(17, 16), 2);
    assert_int_equal(st_engine_image_tokens(0, 16), 0);
    assert_int_equal(st_model_image_token(f->model), VOCAB - 1);
    prompt_free(&p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_vis_blocks_overlapped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_other_position, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_one_pixel, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_refused_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_session, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_pool_fallback, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vis_refused_arguments, setup, teardown),
    };

    if (TM_STRATAD_FILTER_ARG(argc, argv, "test_engine_vis", "PATH-TO-STRATAD [TEST-NAME-PATTERN]",
                              &stratad_path) != 0) {
        return 2;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
