/*
 * engine.c - one request through the model beside a strata cluster: look up
 * the resumable prefix, fetch its objects in one batch, fall back to
 * recomputing what did not load, compute the rest while the completed blocks
 * are written in the background, decode greedily (docs/engine.md).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "en_engine.h"
#include "log.h"

/*
 * Checks the near-data scoring mode's constraints (docs/engine.md, "Near-data
 * scoring"): a bounded pool, the CPU path, k within one Score call.
 */
static st_status_t en_remote_check(const st_engine_t *e, const st_engine_params_t *params)
{
    if (!e->ring) {
        lg_error("engine refused field=remote_scoring reason=\"needs local_blocks > 0\"");
        return ST_ERR_INVALID;
    }
    if (e->m->cfg.topk > ST_SCORE_K_MAX) {
        lg_error("engine refused field=remote_scoring topk=%u max=%d reason=\"topk above what one "
                 "Score call answers\"",
                 e->m->cfg.topk, ST_SCORE_K_MAX);
        return ST_ERR_INVALID;
    }
    if ((params->field_mask & ST_ENGINE_FIELD_DEVICE) && params->device == ST_ENGINE_DEVICE_CUDA) {
        lg_error("engine refused field=remote_scoring device=cuda reason=\"the CPU path only\"");
        return ST_ERR_UNSUPPORTED;
    }
    return ST_OK;
}

st_status_t st_engine_create(const st_model_t *model, const st_engine_params_t *params,
                             st_engine_t **engine_p)
{
    st_engine_t *e;
    st_status_t r;

    if (!model || !engine_p) {
        lg_error("st_engine_create: NULL argument");
        return ST_ERR_INVALID;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        return ST_ERR_NOMEM;
    }
    e->m = model;
    e->interval = 16;
    e->vis_cache = 1;
    if (params) {
        if (params->field_mask & ST_ENGINE_FIELD_CLIENT) {
            e->client = params->client;
        }
        if (params->field_mask & ST_ENGINE_FIELD_KDA_INTERVAL) {
            e->interval = params->kda_interval;
        }
        if (params->field_mask & ST_ENGINE_FIELD_ON_LOOKUP) {
            e->on_lookup = params->on_lookup;
            e->on_lookup_arg = params->on_lookup_arg;
        }
        if (params->field_mask & ST_ENGINE_FIELD_ON_PROGRESS) {
            e->on_progress = params->on_progress;
            e->on_progress_arg = params->on_progress_arg;
        }
        if (params->field_mask & ST_ENGINE_FIELD_DEVICE) {
            e->device = params->device;
        }
        if (params->field_mask & ST_ENGINE_FIELD_DURABLE) {
            e->durable = params->durable != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_VIS_CACHE) {
            e->vis_cache = params->vis_cache != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_SERIAL_ROWS) {
            e->serial = params->serial_rows != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_LOCAL_BLOCKS && params->local_blocks > 0) {
            e->ring = (size_t)params->local_blocks + 1;
        }
        if (params->field_mask & ST_ENGINE_FIELD_REMOTE_SCORING) {
            e->remote = params->remote_scoring != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_PREFILL_CHUNK) {
            e->chunk = params->prefill_chunk;
        }
    }
    if (e->chunk == 0) {
        uint32_t B = model->cfg.block_tokens;

        e->chunk = ST_ENGINE_PREFILL_DEFAULT >= B ? ST_ENGINE_PREFILL_DEFAULT / B * B : B;
    }
    if (e->chunk != 1 && (e->chunk % model->cfg.block_tokens || e->chunk > ST_ENGINE_PREFILL_MAX)) {
        lg_error("engine refused field=prefill_chunk value=%u reason=\"1, or a multiple of "
                 "block_tokens=%u up to %u\"",
                 e->chunk, model->cfg.block_tokens, ST_ENGINE_PREFILL_MAX);
        free(e);
        return ST_ERR_INVALID;
    }
    if (e->interval == 0) {
        lg_error("engine refused field=kda_interval value=0 min=1");
        free(e);
        return ST_ERR_INVALID;
    }
    if (e->client && st_client_block_tokens(e->client) != model->cfg.block_tokens) {
        lg_error("engine refused: block sizes differ model_block_tokens=%u cluster_block_tokens=%u",
                 model->cfg.block_tokens, st_client_block_tokens(e->client));
        free(e);
        return ST_ERR_INVALID;
    }
    if (e->ring && !e->client) {
        lg_error("engine refused field=local_blocks value=%zu reason=\"needs a client\"",
                 e->ring - 1);
        free(e);
        return ST_ERR_INVALID;
    }
    r = e->remote ? en_remote_check(e, params) : ST_OK;
    if (r != ST_OK) {
        free(e);
        return r;
    }
    if (e->remote && e->device == ST_ENGINE_DEVICE_AUTO) {
        e->device = ST_ENGINE_DEVICE_CPU; /* auto picks the path that has the mode */
    }
    {
        int cuda = 0;

        r = en_dev_resolve(model, e->device, &cuda); /* engine/device.c */
        if (r != ST_OK) {
            free(e);
            return r;
        }
        r = st_seq_create(model, &e->seq);
        if (r == ST_OK && cuda) {
            r = en_dev_attach(e->seq); /* the CUDA path (docs/engine.md) */
        }
    }
    if (r == ST_OK && params && (params->field_mask & ST_ENGINE_FIELD_ON_SELECT)) {
        e->seq->on_select = params->on_select;
        e->seq->on_select_arg = params->on_select_arg;
    }
    if (r == ST_OK && e->client) {
        r = en_reg_init(e); /* what resumes read into, registered once (resume.c) */
    }
    if (r == ST_OK && e->remote) {
        r = en_score_init(e); /* before the pool: it sets up the keys window */
    }
    if (r == ST_OK && e->ring) {
        size_t k = model->cfg.topk + 1;

        e->rops = calloc(k, sizeof(*e->rops));
        e->ridx = calloc(k, sizeof(*e->ridx));
        r = e->rops && e->ridx ? en_seq_set_ring(e->seq, e->ring) : ST_ERR_NOMEM;
        if (r == ST_OK) {
            e->seq->rowsrc = (en_rowsrc_t){e, en_rows_start, en_rows_finish, en_orphan, e->serial};
            /* Remote rows land in the sequence's stage: registered once. */
            st_client_register(e->client, e->seq->stage,
                               sizeof(float) * (size_t)model->cfg.topk * (size_t)model->row);
        }
    }
    if (r != ST_OK) {
        en_score_fini(e);
        en_reg_fini(e);
        st_seq_free(e->seq);
        free(e->rops);
        free(e->ridx);
        free(e);
        return r;
    }
    *engine_p = e;
    return ST_OK;
}

double st_engine_overlap(const st_engine_stats_t *s)
{
    uint64_t lo;

    if (!s || s->fetch_us == 0) {
        return 0.0;
    }
    lo = s->fetch_us > s->compute_us ? s->fetch_us : s->compute_us;
    return (double)(s->compute_us + s->stall_us) / (double)lo;
}

const st_model_t *en_engine_model(const st_engine_t *e)
{
    return e->m;
}

int en_engine_durable(const st_engine_t *e)
{
    return e->durable;
}

st_client_t *en_engine_client(const st_engine_t *e)
{
    return e->client;
}

/* ------------------------------------------------------------- run -- */

static uint32_t en_argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;

    for (uint32_t i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            best = i;
        }
    }
    return best;
}

/* chain[b] from chain[b - 1] and the sequence's tokens of block b. */
static st_status_t en_hash_block(st_engine_t *e, st_hash_t *chain, size_t b)
{
    size_t B = e->m->cfg.block_tokens, nb = 0;
    st_hash_t first;
    st_status_t r;

    if (b > 0) {
        /* The images overlapping the block are its extras (docs/hashing.md). */
        st_hash_t ih[ST_HASH_ITEMS_PER_BLOCK_MAX];
        int32_t off[ST_HASH_ITEMS_PER_BLOCK_MAX];
        size_t ni = 0;

        for (size_t k = 0; k < e->n_items && ni < ST_HASH_ITEMS_PER_BLOCK_MAX; k++) {
            const st_hash_item_t *it = &e->items[k];

            if (it->start < (b + 1) * B && it->start + it->n_tokens > b * B) {
                ih[ni] = it->content;
                off[ni++] = (int32_t)((int64_t)it->start - (int64_t)(b * B));
            }
        }
        r = st_hash_block(&chain[b - 1], e->seq->tokens + b * B, (uint32_t)B, ih, off, ni,
                          &chain[b]);
    } else {
        /* Block 0 hangs off the namespace seed, which only the client knows. */
        r = st_client_hash(e->client, e->seq->tokens, B, e->items, e->n_items, &first, 1, &nb);
        if (r == ST_OK) {
            chain[0] = first;
        }
    }
    if (r != ST_OK) {
        lg_warn("hashing a decoded block failed block=%zu status=%s", b, st_status_name(r));
    }
    return r;
}

/*
 * Recomputes the sequence from its first token with every block local,
 * after rows or keys outside the pool were lost (what: which, logged). The
 * tokens are the sequence's own.
 */
static st_status_t en_pool_fallback(st_engine_t *e, st_engine_stats_t *stats, const char *what)
{
    size_t n = e->seq->len;
    uint32_t *toks = malloc(sizeof(uint32_t) * (n + 1));
    st_status_t r;

    if (!toks) {
        return ST_ERR_NOMEM;
    }
    memcpy(toks, e->seq->tokens, sizeof(uint32_t) * n);
    stats->rows_local += e->seq->rows_local;
    stats->rows_remote += e->seq->rows_remote;
    stats->pool_fallbacks++;
    lg_warn("%s were lost: recomputing the sequence with every block local tokens=%zu", what, n);
    en_pool_clear(e);
    e->keys_lost = 0;
    r = en_seq_set_ring(e->seq, 0);
    for (size_t t = 0, k = 0, next; r == ST_OK && t < n; t = next) {
        next = t + 1;
        if (k < e->n_items && e->items[k].start == t) {
            /* An image again, whole (its VIS object is read, or it is encoded, again). */
            next = t + e->items[k].n_tokens;
            r = en_image_run(e, &e->images[k], &e->items[k], t, NULL, stats);
            k++;
        } else {
            r = st_seq_forward(e->seq, toks[t], NULL);
        }
        stats->computed_tokens += next - t;
    }
    free(toks);
    return r;
}

/*
 * One token through the model: frees the pool slot it needs, times it, and
 * falls back to a full local recompute when remote rows are lost.
 */
static st_status_t en_step(st_engine_t *e, uint32_t token, float *logits, st_engine_stats_t *stats)
{
    size_t pos = e->seq->len, B = e->m->cfg.block_tokens;
    uint64_t t0 = cm_mono_us(), stall0 = stats->stall_us;
    st_status_t r;

    if (e->seq->ring && pos % B == 0 && pos / B >= e->seq->ring) {
        en_pool_release(e, pos / B - e->seq->ring);
    }
    if (e->keys_lost) {
        /* the history's keys are gone with their node */
        r = en_pool_fallback(e, stats, "indexer keys outside the local pool");
        if (r != ST_OK) {
            return r;
        }
    }
    if (e->seq->ring && e->chain) {
        en_warm(e, pos / B, stats);
    }
    r = st_seq_forward(e->seq, token, logits);
    if (r == ST_ERR_UNAVAILABLE && e->seq->ring) {
        r = en_pool_fallback(e, stats, "rows or keys outside the local pool");
        if (r == ST_OK) {
            r = st_seq_forward(e->seq, token, logits);
        }
    }
    stats->compute_us += cm_mono_us() - t0 - (stats->stall_us - stall0);
    return r;
}

/*
 * The image's tokens from t on, as en_step does for one token: the pool
 * slots of the blocks it opens are freed first (the image's rows are all in
 * the pool while it computes), and lost remote rows fall back to a full
 * local recompute.
 */
static st_status_t en_image_span(st_engine_t *e, const st_engine_image_t *img,
                                 const st_hash_item_t *it, size_t t, float *logits,
                                 st_engine_stats_t *stats)
{
    size_t B = e->m->cfg.block_tokens, end = it->start + it->n_tokens;
    st_status_t r;

    for (size_t p = (t + B - 1) / B * B; e->seq->ring && p < end; p += B) {
        if (p / B >= e->seq->ring) {
            en_pool_release(e, p / B - e->seq->ring);
        }
    }
    if (e->seq->ring && e->chain) {
        en_warm(e, (end - 1) / B, stats);
    }
    r = en_image_run(e, img, it, t, logits, stats);
    if (r == ST_ERR_UNAVAILABLE && e->seq->ring) {
        r = en_pool_fallback(e, stats, "rows outside the local pool (an image's turn)");
        if (r == ST_OK) {
            r = en_image_run(e, img, it, t, logits, stats);
        }
    }
    return r;
}

/* Grows the run's chain bookkeeping to n blocks (stored flags). */
static st_status_t en_run_blocks(st_engine_t *e, size_t n)
{
    if (n > e->n_stored) {
        uint8_t *p = realloc(e->stored, n);

        if (!p) {
            return ST_ERR_NOMEM;
        }
        memset(p + e->n_stored, 0, n - e->n_stored);
        e->stored = p;
        e->n_stored = n;
    }
    return ST_OK;
}

/* Block b of the prompt completed: write it, with a KDA checkpoint every
 * interval, at the prompt's last full block and at the turn's; never for a
 * block that ends inside a span (mid_span: an image, or a chunk of the
 * prefill): the KDA states after its last token exist only half-way through
 * the span's layer-by-layer pass, so a resume never starts inside an image
 * (docs/engine.md, "Images"), and a chunk is cut at every block that needs a
 * checkpoint (en_chunk_end). */
static void en_prompt_block(st_engine_t *e, const st_hash_t *chain, size_t n_full, size_t n_turn,
                            size_t b, int mid_span, st_engine_stats_t *stats)
{
    en_put_block(e, chain, n_full, b,
                 !mid_span && ((b + 1) % e->interval == 0 || b + 1 == n_full || b + 1 == n_turn),
                 stats);
    en_put_reap(e, 0, stats);
}

/*
 * Where the prefill chunk from token t ends (chunked prefill, docs/engine.md):
 * at most e->chunk tokens on, at a block boundary, and never past the next
 * item (limit), the prompt's end, a KDA checkpoint's block end or the
 * prompt's last full block (so each checkpoint block ends a chunk). t + 1
 * when the prompt goes token by token.
 */
static size_t en_chunk_end(const st_engine_t *e, size_t t, size_t limit, size_t n_full)
{
    size_t B = e->m->cfg.block_tokens, ck = (size_t)e->interval * B, end;

    if (e->chunk <= 1 || !en_seq_chunkable(e->seq)) {
        return t + 1;
    }
    end = (t + e->chunk) / B * B;
    if (end <= t) {
        end = t + e->chunk;
    }
    end = end < limit ? end : limit;
    if ((t / ck + 1) * ck < end) {
        end = (t / ck + 1) * ck;
    }
    if (n_full * B > t && n_full * B < end) {
        end = n_full * B;
    }
    return end;
}

/* The prompt's tokens [t, end) as one chunk of the prefill, timed as en_step times one. */
static st_status_t en_chunk(st_engine_t *e, const uint32_t *tokens, size_t t, size_t end,
                            float *logits, st_engine_stats_t *stats)
{
    uint64_t t0 = cm_mono_us();
    st_status_t r = st_seq_prefill(e->seq, tokens + t, end - t, logits);

    stats->compute_us += cm_mono_us() - t0;
    return r;
}

/*
 * The prompt from token start on: text in prefill chunks (en_chunk_end; one
 * token at a time where the sequence takes no chunks), an image as one span
 * (from start when the resume ended inside it). lg gets the last
 * token's logits.
 */
static st_status_t en_prompt(st_engine_t *e, const uint32_t *tokens, size_t n_tokens,
                             const st_engine_image_t *images, const st_hash_t *chain, size_t n_full,
                             size_t n_turn, size_t start, float *lg, st_engine_stats_t *stats)
{
    size_t B = e->m->cfg.block_tokens, k = 0;
    st_status_t r = ST_OK;

    for (size_t t = start; t < n_tokens;) {
        size_t next = t + 1;

        while (k < e->n_items && e->items[k].start + e->items[k].n_tokens <= t) {
            k++;
        }
        if (k < e->n_items && e->items[k].start <= t) {
            next = e->items[k].start + e->items[k].n_tokens;
            r = en_image_span(e, &images[k], &e->items[k], t, next == n_tokens ? lg : NULL, stats);
        } else {
            next = en_chunk_end(e, t, k < e->n_items ? e->items[k].start : n_tokens, n_full);
            r = next == t + 1 ? en_step(e, tokens[t], next == n_tokens ? lg : NULL, stats)
                              : en_chunk(e, tokens, t, next, next == n_tokens ? lg : NULL, stats);
        }
        if (r != ST_OK) {
            return r;
        }
        stats->computed_tokens += next - t;
        /* The blocks that ended in [t, next). */
        for (size_t b = t / B; (b + 1) * B <= next; b++) {
            if (chain && (b + 1) * B > t) {
                en_prompt_block(e, chain, n_full, n_turn, b, (b + 1) * B < next, stats);
            }
        }
        if (e->on_progress && (next / B != t / B || next == n_tokens)) {
            e->on_progress(e->on_progress_arg, next, n_tokens);
        }
        t = next;
    }
    return ST_OK;
}

st_status_t st_engine_run(st_engine_t *e, const uint32_t *tokens, size_t n_tokens,
                          uint32_t n_decode, float *logits, uint32_t *out_ids,
                          st_engine_stats_t *stats_p)
{
    return st_engine_run_images(e, tokens, n_tokens, NULL, 0, n_decode, logits, out_ids, stats_p);
}

/* The arguments of a run that its images' check does not cover. */
static st_status_t en_run_check(const st_engine_t *e, const uint32_t *tokens, size_t n_tokens,
                                const st_engine_image_t *images, size_t n_images, uint32_t n_decode,
                                const uint32_t *out_ids)
{
    if (!e || !tokens || n_tokens == 0 || (n_decode > 0 && !out_ids)) {
        lg_error("st_engine_run refused: %s", !e              ? "NULL engine"
                                              : !tokens       ? "NULL tokens"
                                              : n_tokens == 0 ? "no tokens"
                                                              : "out_ids NULL with n_decode > 0");
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] >= e->m->cfg.vocab) {
            lg_error("st_engine_run refused: token out of range index=%zu token=%u vocab=%u", i,
                     tokens[i], e->m->cfg.vocab);
            return ST_ERR_INVALID;
        }
    }
    if (n_images > 0 && !images) {
        lg_error("st_engine_run_images refused: images NULL with n_images=%zu", n_images);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* One run in flight: what its phases (en_run_open, en_run_token, en_run_close) share. */
typedef struct en_run {
    st_engine_stats_t stats;
    st_hash_t *chain;
    st_hash_item_t *items;
    float *lg; /* the logits of the last token computed */
    size_t n_turn;
    uint64_t t_start;
    int opened; /* past the checks: the sequence is this run's */
} en_run_t;

/*
 * A run up to its first decoded token: the checks, the resume, the prompt (logits copied to
 * logits when not NULL). On failure en_run_close still has to be called.
 */
static st_status_t en_run_open(st_engine_t *e, en_run_t *rn, const uint32_t *tokens,
                               size_t n_tokens, const st_engine_image_t *images, size_t n_images,
                               uint32_t n_decode, float *logits, const uint32_t *out_ids)
{
    const st_model_t *m;
    size_t B, n_full = 0, start = 0, n_look;
    st_status_t r;

    memset(rn, 0, sizeof(*rn));
    rn->t_start = cm_mono_us();
    r = en_run_check(e, tokens, n_tokens, images, n_images, n_decode, out_ids);
    if (r != ST_OK) {
        return r;
    }
    m = e->m;
    B = m->cfg.block_tokens;
    rn->items = n_images ? calloc(n_images, sizeof(*rn->items)) : NULL;
    if (n_images && !rn->items) {
        return ST_ERR_NOMEM;
    }
    r = en_images_check(e, tokens, n_tokens, images, n_images, rn->items);
    if (r != ST_OK) {
        return r;
    }
    rn->stats.images = n_images;
    rn->lg = malloc(sizeof(float) * m->cfg.vocab);
    if (!rn->lg) {
        return ST_ERR_NOMEM;
    }
    /* A pool that fell back to unbounded in the last run is bounded again,
     * and keys brought local by a scoring fallback leave again. */
    r = e->seq->ring != e->ring || e->seq->kwin != (e->remote && e->ring)
            ? en_seq_set_ring(e->seq, e->ring)
            : ST_OK;
    if (r != ST_OK) {
        return r;
    }
    rn->opened = 1;
    st_seq_reset(e->seq);
    e->images = images;
    e->items = rn->items;
    e->n_items = n_images;
    en_pool_clear(e);
    e->stats = &rn->stats;
    e->keys_lost = 0;
    e->n_chain = 0;
    e->wt0 = 0;
    if (e->n_stored) {
        memset(e->stored, 0, e->n_stored);
    }
    if (e->client && (n_tokens + n_decode) / B > 0) {
        size_t nb = 0;

        n_full = n_tokens / B;
        rn->n_turn = (n_tokens + n_decode) / B;
        rn->chain = malloc(sizeof(*rn->chain) * rn->n_turn);
        if (!rn->chain || en_run_blocks(e, rn->n_turn) != ST_OK) {
            return ST_ERR_NOMEM;
        }
        r = n_full ? st_client_hash(e->client, tokens, n_full * B, rn->items, n_images, rn->chain,
                                    n_full, &nb)
                   : ST_OK;
        if (r != ST_OK || nb != n_full) {
            lg_error("hashing the prompt failed status=%s", st_status_name(r));
            return r != ST_OK ? r : ST_ERR_INTERNAL;
        }
        e->chain = rn->chain;
        e->n_chain = n_full;
        /* At least the last prompt token is computed: its logits are the answer. */
        n_look = n_full * B == n_tokens ? n_full - 1 : n_full;
        start = en_resume(e, tokens, rn->chain, n_full, n_look, &rn->stats) * B;
        rn->stats.resumed_blocks = start / B;
        memset(e->stored, 1, rn->stats.resumed_blocks); /* found in the cluster */
    }
    if (e->on_progress && start > 0) {
        e->on_progress(e->on_progress_arg, start, n_tokens);
    }
    r = en_prompt(e, tokens, n_tokens, images, rn->chain, n_full, rn->n_turn, start, rn->lg,
                  &rn->stats);
    if (r != ST_OK) {
        return r;
    }
    rn->stats.ttft_us = cm_mono_us() - rn->t_start;
    if (logits) {
        memcpy(logits, rn->lg, sizeof(float) * m->cfg.vocab);
    }
    return ST_OK;
}

/* After a decoded token went through the model: a block of the reply that it completed is
 * named and written, with the end-of-turn checkpoint when it is the turn's last full block. */
static void en_run_token(st_engine_t *e, en_run_t *rn)
{
    size_t B = e->m->cfg.block_tokens, len = st_seq_length(e->seq), b;

    if (!rn->chain || len % B != 0) {
        return;
    }
    b = len / B - 1;
    if (en_hash_block(e, rn->chain, b) == ST_OK) {
        e->n_chain = b + 1;
        en_put_block(e, rn->chain, b + 1, b, (b + 1) % e->interval == 0 || b + 1 == rn->n_turn,
                     &rn->stats);
        en_put_reap(e, 0, &rn->stats);
    }
}

/* The end of a run (whatever r, the run's status, is): its writes waited for, what it held let
 * go, its stats to stats_p (when it got past the checks). Returns r. */
static st_status_t en_run_close(st_engine_t *e, en_run_t *rn, st_status_t r,
                                st_engine_stats_t *stats_p)
{
    if (rn->opened) {
        en_put_reap(e, 1, &rn->stats);
        en_warm_reap(e, 1, &rn->stats);
        rn->stats.rows_local += e->seq->rows_local;
        rn->stats.rows_remote += e->seq->rows_remote;
        rn->stats.keys_bytes = en_seq_keys_bytes(e->seq);
        e->seq->rows_local = e->seq->rows_remote = 0;
        en_pool_clear(e);
        e->stats = NULL;
        e->chain = NULL;
        e->n_chain = 0;
        e->images = NULL;
        e->items = NULL;
        e->n_items = 0;
        if (stats_p) {
            *stats_p = rn->stats;
        }
    }
    free(rn->chain);
    free(rn->items);
    free(rn->lg);
    rn->chain = NULL;
    rn->items = NULL;
    rn->lg = NULL;
    return r;
}

st_status_t st_engine_run_images(st_engine_t *e, const uint32_t *tokens, size_t n_tokens,
                                 const st_engine_image_t *images, size_t n_images,
                                 uint32_t n_decode, float *logits, uint32_t *out_ids,
                                 st_engine_stats_t *stats_p)
{
    en_run_t rn;
    st_status_t r =
        en_run_open(e, &rn, tokens, n_tokens, images, n_images, n_decode, logits, out_ids);
    uint64_t t0 = cm_mono_us();

    for (uint32_t i = 0; r == ST_OK && i < n_decode; i++) {
        out_ids[i] = en_argmax(rn.lg, e->m->cfg.vocab);
        r = en_step(e, out_ids[i], rn.lg, &rn.stats);
        if (r == ST_OK) {
            en_run_token(e, &rn);
        }
    }
    if (r == ST_OK) {
        rn.stats.decode_us = cm_mono_us() - t0;
    }
    return en_run_close(e, &rn, r, stats_p);
}

/* Host threads of a batched step, at most (each runs the lockstep of a share of the batch). */
#define EN_BATCH_THREADS 16

typedef struct en_share {
    st_seq_t *const *seqs;
    const uint32_t *ids;
    float *const *lgs;
    size_t n;
    st_status_t r;
    pthread_t th;
    int started; /* th runs it */
} en_share_t;

static void *en_share_main(void *arg)
{
    en_share_t *sh = arg;

    sh->r = st_seq_forward_batch(sh->seqs, sh->n, sh->ids, sh->lgs);
    return NULL;
}

/*
 * One batched step: the sequences cut into as many shares as there are host threads to run
 * them (the online CPUs, at most EN_BATCH_THREADS), each share's lockstep forward on a thread
 * of its own (the host work of a layer, small projections and feed-forward, is per sequence);
 * one share runs on this thread. Returns the first share's failure.
 */
static st_status_t en_forward_shares(st_seq_t *const *seqs, size_t n, const uint32_t *ids,
                                     float *const *lgs)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t t = cpus > 1 ? (size_t)cpus : 1, at = 0;
    en_share_t sh[EN_BATCH_THREADS];
    st_status_t r = ST_OK;

    t = t < n ? t : n;
    t = t < EN_BATCH_THREADS ? t : EN_BATCH_THREADS;
    if (t <= 1) {
        return st_seq_forward_batch(seqs, n, ids, lgs);
    }
    for (size_t i = 0; i < t; i++) {
        size_t k = n / t + (i < n % t);

        sh[i] = (en_share_t){.seqs = seqs + at, .ids = ids + at, .lgs = lgs + at, .n = k};
        at += k;
    }
    for (size_t i = 1; i < t; i++) {
        sh[i].started = pthread_create(&sh[i].th, NULL, en_share_main, &sh[i]) == 0;
        if (!sh[i].started) {
            en_share_main(&sh[i]); /* no thread: this one runs it */
        }
    }
    en_share_main(&sh[0]);
    for (size_t i = 1; i < t; i++) {
        if (sh[i].started) {
            pthread_join(sh[i].th, NULL);
        }
    }
    for (size_t i = 0; i < t; i++) {
        r = r != ST_OK ? r : sh[i].r;
    }
    return r;
}

/* Whether engine e's next token can go through st_seq_forward_batch (no pool slot to free, no
 * keys to bring back, no rows read from the cluster: what en_step does besides the forward). */
static int en_batchable(const st_engine_t *e)
{
    return e->seq->ring == 0 && !e->keys_lost;
}

st_status_t st_engine_run_batch(st_engine_t *const *engines, size_t n,
                                const uint32_t *const *tokens, const size_t *n_tokens,
                                uint32_t n_decode, float *const *logits, uint32_t *const *out_ids,
                                st_engine_stats_t *stats)
{
    en_run_t *rn;
    st_seq_t **seqs;
    uint32_t *ids;
    float **lgs;
    st_status_t r = ST_OK;
    size_t opened = 0;
    uint64_t t0;

    if (!engines || !tokens || !n_tokens || n == 0 || n > ST_ENGINE_BATCH_MAX ||
        (n_decode > 0 && !out_ids)) {
        lg_error("st_engine_run_batch refused: %s",
                 !engines || !tokens || !n_tokens ? "NULL engines, tokens or n_tokens"
                 : n == 0                         ? "no engines"
                 : n > ST_ENGINE_BATCH_MAX        ? "more engines than ST_ENGINE_BATCH_MAX"
                                                  : "out_ids NULL with n_decode > 0");
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        int twice = 0;

        for (size_t j = 0; engines[i] && j < i; j++) {
            twice |= engines[j] == engines[i];
        }
        if (!engines[i] || twice || engines[i]->m != engines[0]->m ||
            (n_decode > 0 && !out_ids[i])) {
            lg_error("st_engine_run_batch refused: engine %zu is %s", i,
                     !engines[i]                      ? "NULL"
                     : twice                          ? "in the batch twice"
                     : engines[i]->m != engines[0]->m ? "of another model"
                                                      : "without out_ids");
            return ST_ERR_INVALID;
        }
    }
    rn = calloc(n, sizeof(*rn));
    seqs = calloc(n, sizeof(*seqs));
    ids = calloc(n, sizeof(*ids));
    lgs = calloc(n, sizeof(*lgs));
    if (!rn || !seqs || !ids || !lgs) {
        free(rn), free(seqs), free(ids), free(lgs);
        return ST_ERR_NOMEM;
    }
    /* The prompts one after another, each as st_engine_run's. */
    for (; r == ST_OK && opened < n; opened++) {
        st_engine_t *e = engines[opened];

        r = en_run_open(e, &rn[opened], tokens[opened], n_tokens[opened], NULL, 0, n_decode,
                        logits ? logits[opened] : NULL, out_ids ? out_ids[opened] : NULL);
        seqs[opened] = e->seq;
        lgs[opened] = rn[opened].lg;
    }
    /* The decode in lockstep: each step one token of every engine, through one batched forward
     * where every engine allows it. */
    t0 = cm_mono_us();
    for (uint32_t t = 0; r == ST_OK && t < n_decode; t++) {
        uint64_t ts = cm_mono_us();
        int all = 1;

        for (size_t i = 0; i < n; i++) {
            ids[i] = out_ids[i][t] = en_argmax(rn[i].lg, engines[i]->m->cfg.vocab);
            all = all && en_batchable(engines[i]);
        }
        if (all) {
            r = en_forward_shares(seqs, n, ids, lgs);
            for (size_t i = 0; r == ST_OK && i < n; i++) {
                rn[i].stats.compute_us += cm_mono_us() - ts;
            }
        } else {
            for (size_t i = 0; r == ST_OK && i < n; i++) {
                r = en_step(engines[i], ids[i], rn[i].lg, &rn[i].stats);
            }
        }
        for (size_t i = 0; r == ST_OK && i < n; i++) {
            en_run_token(engines[i], &rn[i]);
        }
    }
    for (size_t i = 0; r == ST_OK && i < n; i++) {
        rn[i].stats.decode_us = cm_mono_us() - t0;
    }
    for (size_t i = 0; i < opened; i++) {
        st_status_t rc = en_run_close(engines[i], &rn[i], r, stats ? &stats[i] : NULL);

        r = r != ST_OK ? r : rc;
    }
    free(rn), free(seqs), free(ids), free(lgs);
    return r;
}

st_engine_device_t st_engine_device_used(const st_engine_t *engine)
{
    return engine && engine->seq->dev ? ST_ENGINE_DEVICE_CUDA : ST_ENGINE_DEVICE_CPU;
}

void st_engine_free(st_engine_t *engine)
{
    if (engine) {
        st_engine_stats_t stats = {0};

        en_put_reap(engine, 1, &stats);
        en_pool_clear(engine);
        free(engine->orphan);
        free(engine->orphan_b);
        free(engine->stored);
        free(engine->rops);
        free(engine->ridx);
        free(engine->wops);
        free(engine->wbuf);
        if (engine->ring && engine->client) {
            st_client_deregister(engine->client, engine->seq->stage);
        }
        free(engine->puts);
        en_score_fini(engine);
        en_reg_fini(engine);
        st_seq_free(engine->seq);
        free(engine);
    }
}
