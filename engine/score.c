/*
 * score.c - near-data scoring (docs/engine.md, "Near-data scoring"): the
 * sequence's score source (en_scoresrc_t). Each DSA step's Score call runs
 * on the engine's scoring thread while the engine's thread scores the keys
 * window and projects the attention query; when a call fails, the IDX
 * objects of the history are fetched and the run scores locally from then on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

/* The job posted: one st_client_score call, its answer and its time. */
static void en_score_run(st_engine_t *e)
{
    en_score_t *c = &e->score;

    memset(&c->ss, 0, sizeof(c->ss));
    c->n_out = 0;
    c->st = st_client_score(e->client, e->chain, 0, c->n_blocks, &c->q, c->pos, c->sc, &c->n_out,
                            &c->ss);
    if (c->st != ST_OK) {
        snprintf(c->why, sizeof(c->why), "%s", st_client_last_error());
    }
}

static void *en_score_thread(void *arg)
{
    st_engine_t *e = arg;
    en_score_t *c = &e->score;

    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && !c->job) {
            pthread_cond_wait(&c->cv, &c->mu);
        }
        if (c->quit) {
            break;
        }
        pthread_mutex_unlock(&c->mu);
        en_score_run(e);
        pthread_mutex_lock(&c->mu);
        c->job = 0;
        c->done = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static st_status_t en_score_start(void *arg, int l, const float *q, const float *w, uint32_t k,
                                  size_t n_blocks)
{
    st_engine_t *e = arg;
    en_score_t *c = &e->score;
    const st_model_config_t *mc = &e->m->cfg;
    size_t hd = (size_t)mc->idx_heads * mc->idx_dim;

    if (n_blocks > e->n_chain) {
        lg_warn("blocks to score outside the named chain blocks=%zu chain=%zu", n_blocks,
                e->n_chain);
        return ST_ERR_INTERNAL;
    }
    memcpy(c->qw, q, hd * sizeof(float));
    memcpy(c->qw + hd, w, mc->idx_heads * sizeof(float));
    c->q = (st_score_query_t){.layer = (uint32_t)l,
                              .heads = mc->idx_heads,
                              .dim = mc->idx_dim,
                              .q = c->qw,
                              .w = c->qw + hd,
                              .k = k};
    c->n_blocks = n_blocks;
    c->t0 = cm_mono_us();
    e->stats->score_calls++;
    if (c->serial) {
        en_score_run(e);
        c->done = 1;
        return ST_OK;
    }
    pthread_mutex_lock(&c->mu);
    c->done = 0;
    c->job = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return ST_OK;
}

static st_status_t en_score_finish(void *arg, const uint64_t **pos_p, const float **sc_p,
                                   size_t *n_p)
{
    st_engine_t *e = arg;
    en_score_t *c = &e->score;
    uint64_t t0 = cm_mono_us(), t1;

    pthread_mutex_lock(&c->mu);
    while (!c->done) {
        pthread_cond_wait(&c->cv, &c->mu);
    }
    c->done = 0;
    pthread_mutex_unlock(&c->mu);
    t1 = cm_mono_us();
    /* Serial: the whole call was a wait of the computation. */
    e->stats->stall_us += c->serial ? t1 - c->t0 : t1 - t0;
    e->stats->fetch_us += t1 - c->t0;
    e->stats->score_us += t1 - c->t0;
    e->stats->score_bytes += c->ss.bytes_sent + c->ss.bytes_received;
    if (c->st != ST_OK) {
        lg_warn("Score call failed, scoring locally blocks=%zu layer=%u status=%s error=\"%s\"",
                c->n_blocks, c->q.layer, st_status_name(c->st), c->why);
        return c->st;
    }
    *pos_p = c->pos;
    *sc_p = c->sc;
    *n_p = c->n_out;
    return ST_OK;
}

st_status_t en_score_localize(st_engine_t *e, const char *why)
{
    const st_model_t *m = e->m;
    st_seq_t *s = e->seq;
    size_t base, ixb = en_idx_bytes(m), n, k = 0;
    st_get_op_t *ops;
    uint8_t *stage;
    st_handle_t *h = NULL;
    st_status_t r = en_seq_keys_full(s, &base);
    uint64_t t0 = cm_mono_us();

    if (r != ST_OK) {
        return r;
    }
    e->stats->score_fallbacks++;
    lg_warn("near-data scoring off for the rest of the run, fetching the history's indexer keys "
            "reason=\"%s\" blocks=%zu",
            why, base);
    n = base * (size_t)m->n_dsa;
    ops = calloc(n + 1, sizeof(*ops));
    stage = malloc(n * ixb + 1);
    if (!ops || !stage) {
        free(ops);
        free(stage);
        lg_error("no memory to fetch the history's indexer keys blocks=%zu", base);
        e->keys_lost = 1;
        return ST_ERR_UNAVAILABLE;
    }
    for (size_t b = 0; b < base; b++) {
        for (int l = 0; l < m->n_dsa; l++, k++) {
            ops[k] = (st_get_op_t){.block = b,
                                   .kind = ST_KIND_IDX,
                                   .layer = (uint16_t)l,
                                   .dst = stage + k * ixb,
                                   .dst_len = ixb};
        }
    }
    r = k ? st_client_get(e->client, e->chain, e->n_chain, ops, k, &h) : ST_OK;
    if (r == ST_OK && h) {
        r = st_handle_wait(h, EN_WAIT_MS);
        st_handle_release(h);
    }
    for (size_t i = 0; i < k; i++) {
        e->stats->bytes_fetched += ops[i].status == ST_OK ? ops[i].length : 0;
        if (r == ST_OK && (ops[i].status != ST_OK || ops[i].length != ixb)) {
            lg_warn("indexer keys lost block=%llu layer=%u status=%s",
                    (unsigned long long)ops[i].block, ops[i].layer, st_status_name(ops[i].status));
            r = ST_ERR_UNAVAILABLE;
        }
    }
    for (size_t i = 0; r == ST_OK && i < k; i++) {
        r = en_import_idx(s, ops[i].layer, ops[i].block, ops[i].dst, ixb);
    }
    t0 = cm_mono_us() - t0;
    e->stats->fetch_us += t0;
    e->stats->stall_us += t0;
    free(ops);
    free(stage);
    if (r != ST_OK) {
        lg_warn("the history's indexer keys did not load blocks=%zu status=%s", base,
                st_status_name(r));
        e->keys_lost = 1; /* the sequence must be recomputed (en_step) */
        return ST_ERR_UNAVAILABLE;
    }
    return ST_OK;
}

static st_status_t en_score_localize_cb(void *arg)
{
    return en_score_localize(arg, "Score call failed");
}

st_status_t en_score_init(st_engine_t *e)
{
    en_score_t *c = &e->score;
    const st_model_config_t *mc = &e->m->cfg;

    c->qw = malloc(sizeof(float) * ((size_t)mc->idx_heads * (mc->idx_dim + 1)));
    c->pos = malloc(sizeof(uint64_t) * (mc->topk + 1));
    c->sc = malloc(sizeof(float) * (mc->topk + 1));
    if (!c->qw || !c->pos || !c->sc) {
        return ST_ERR_NOMEM;
    }
    c->serial = e->serial;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        return ST_ERR_NOMEM;
    }
    if (pthread_cond_init(&c->cv, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        return ST_ERR_NOMEM;
    }
    if (!c->serial && pthread_create(&c->th, NULL, en_score_thread, e) != 0) {
        lg_error("the engine's scoring thread did not start");
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        return ST_ERR_NOMEM;
    }
    c->running = 1;
    e->seq->score = (en_scoresrc_t){e, en_score_start, en_score_finish, en_score_localize_cb};
    return ST_OK;
}

void en_score_fini(st_engine_t *e)
{
    en_score_t *c = &e->score;

    if (c->running) {
        if (!c->serial) {
            pthread_mutex_lock(&c->mu);
            c->quit = 1;
            pthread_cond_broadcast(&c->cv);
            pthread_mutex_unlock(&c->mu);
            pthread_join(c->th, NULL);
        }
        pthread_cond_destroy(&c->cv);
        pthread_mutex_destroy(&c->mu);
        c->running = 0;
    }
    free(c->qw);
    free(c->pos);
    free(c->sc);
    c->qw = NULL;
    c->pos = NULL;
    c->sc = NULL;
}
