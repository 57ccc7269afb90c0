/*
 * handlers_score.c - Score: near-data scoring (docs/protocol.md "Score").
 *
 * The DSA indexer runs over the IDX objects this node holds for the blocks
 * a caller names, and only the best candidates go back. The one call for
 * which the daemon computes (docs/architecture.md, "Layers"): it links the
 * kernels' C and AVX2 indexer, and scores every row with
 * st_cpu_indexer_scores, the function behind the engine's
 * st_cpu_indexer_topk, so a score is bit-identical to the engine's.
 *
 * The selection is the kernels' two stages: an upper bound per block from
 * its summary (st_cpu_block_bounds), then the blocks in decreasing bound,
 * scored row by row, until the next bound is below the k-th best so far
 * (a tie could still enter, so ties are scored).
 *
 * An IDX object is read as a checked copy, one at a time: for its bound
 * only its two summary rows when it keeps row sums of dim floats a row
 * (cd_store_get_rows, each row checked by its sum; the writer's row_bytes
 * = dim x 4), else the whole object (cd_store_get, its checksum checked);
 * and whole again when it is scored. One on the SSD tier is promoted first and read from DRAM
 * (cd_h_ask_promoting, as Get does). Blocks are answered from what the node
 * holds, owner or not; those it lacks are listed as missing.
 */
#include "handlers.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "strata/kernels.h"
#include "strata/strata.h"
#include "tier.h"

#define CD_SCORE_HEADS_MAX 64   /* the engine's idx_heads limit */
#define CD_SCORE_DIM_MAX   1024 /* the engine's idx_dim limit */

/* One block of a call: its bound, and how reading it went. */
typedef struct cd_sc_block {
    float bound;
    uint32_t index; /* into the request's blocks */
} cd_sc_block_t;

/* A candidate row. */
typedef struct cd_sc_cand {
    float s;
    uint64_t pos;
} cd_sc_cand_t;

/* The state of one Score call. */
typedef struct cd_sc {
    cd_daemon_t *d;
    cd_ns_entry_t *e;
    const Strata__V1__ScoreRequest *req;
    const st_hash_t *hashes;
    size_t n;
    uint64_t obj_len; /* (block_tokens + 2) x dim x 4 */
    float *obj;       /* one object's copy */
    float *sum;       /* one object's summary rows (min, max) */
    float *rows;      /* block_tokens scores */
    cd_sc_cand_t *heap;
    size_t n_heap;
    /* One read, for cd_h_ask_promoting. */
    cd_key_t key;
    uint64_t len;
    cd_location_t where;
    cd_err_t err;
} cd_sc_t;

/* a ranks before b: higher score, then lower position. */
static int cd_sc_better(const cd_sc_cand_t *a, const cd_sc_cand_t *b)
{
    return a->s > b->s || (a->s == b->s && a->pos < b->pos);
}

static int cd_sc_rank_cmp(const void *a, const void *b)
{
    return cd_sc_better(a, b) ? -1 : cd_sc_better(b, a) ? 1 : 0;
}

static int cd_sc_bound_cmp(const void *a, const void *b)
{
    const cd_sc_block_t *x = a, *y = b;

    if (x->bound != y->bound) {
        return x->bound > y->bound ? -1 : 1;
    }
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Offers a row to the heap of the k best (its root the worst of them). */
static void cd_sc_offer(cd_sc_t *c, uint32_t k, cd_sc_cand_t x)
{
    cd_sc_cand_t *h = c->heap;
    size_t i;

    if (c->n_heap < k) {
        for (i = c->n_heap++; i > 0 && cd_sc_better(&h[(i - 1) / 2], &x); i = (i - 1) / 2) {
            h[i] = h[(i - 1) / 2];
        }
        h[i] = x;
        return;
    }
    if (!cd_sc_better(&x, &h[0])) {
        return;
    }
    for (i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, w = i;
        const cd_sc_cand_t *worst = &x;

        if (l < c->n_heap && cd_sc_better(worst, &h[l])) {
            w = l;
            worst = &h[l];
        }
        if (r < c->n_heap && cd_sc_better(worst, &h[r])) {
            w = r;
        }
        if (w == i) {
            break;
        }
        h[i] = h[w];
        i = w;
    }
    h[i] = x;
}

/* cd_h_ask_t.ask: the object of c->key copied into c->obj. */
static st_status_t cd_sc_ask(void *arg)
{
    cd_sc_t *c = arg;

    c->len = 0;
    return cd_store_get(c->d->store, c->e->local_id, &c->key, c->obj, c->obj_len, &c->len, NULL,
                        &c->err);
}

/* cd_h_ask_t.ask: rows block_tokens and block_tokens + 1 (min, max) of
 * c->key into c->sum, each checked by its row sum. */
static st_status_t cd_sc_ask_rows(void *arg)
{
    cd_sc_t *c = arg;
    uint32_t rows[2] = {c->e->block_tokens, c->e->block_tokens + 1};

    c->len = 0;
    return cd_store_get_rows(c->d->store, c->e->local_id, &c->key, rows, 2, c->sum,
                             2 * c->req->dim * sizeof(float), &c->len, &c->where, &c->err);
}

static int cd_sc_promote(void *arg, st_status_t asked)
{
    cd_sc_t *c = arg;

    return asked == ST_ERR_NOT_FOUND ? cd_tier_promote(c->d->tier, c->e->local_id, &c->key.hash)
                                     : 0;
}

/*
 * Reads block i's IDX object into c->obj. Returns ST_OK, ST_ERR_NOT_FOUND
 * (not here), or ST_ERR_CORRUPT (its checksum, or a length that is not the
 * layout's: logged, message set).
 */
static st_status_t cd_sc_read(srpc_ctx_t *ctx, cd_sc_t *c, size_t i)
{
    cd_h_ask_t ask = {cd_sc_ask, cd_sc_promote, c};
    st_status_t status;

    c->key = (cd_key_t){.hash = c->hashes[i], .kind = CD_KIND_IDX, .layer = c->req->layer};
    c->err.msg[0] = '\0';
    status = cd_h_ask_promoting(c->d, &ask);
    if (status == ST_OK && c->len == c->obj_len) {
        return ST_OK;
    }
    if (status == ST_ERR_NOT_FOUND) {
        return status;
    }
    if (status == ST_OK || status == ST_ERR_INVALID) {
        lg_error("score: IDX object of the wrong size ns=%u block=%llu layer=%u bytes=%llu "
                 "expected=%llu block_tokens=%u dim=%u",
                 c->e->local_id, (unsigned long long)c->req->blocks[i], c->req->layer,
                 (unsigned long long)c->len, (unsigned long long)c->obj_len, c->e->block_tokens,
                 c->req->dim);
        srpc_ctx_set_error(ctx,
                           "IDX object of block %llu layer %u is %llu bytes; block_tokens %u x "
                           "dim %u needs (%u + 2) x %u x 4 = %llu",
                           (unsigned long long)c->req->blocks[i], c->req->layer,
                           (unsigned long long)c->len, c->e->block_tokens, c->req->dim,
                           c->e->block_tokens, c->req->dim, (unsigned long long)c->obj_len);
        return ST_ERR_CORRUPT;
    }
    lg_error("score: IDX object unreadable ns=%u block=%llu layer=%u status=%s error=\"%s\"",
             c->e->local_id, (unsigned long long)c->req->blocks[i], c->req->layer,
             st_status_name(status), c->err.msg);
    srpc_ctx_set_error(ctx, "IDX object of block %llu layer %u: %s",
                       (unsigned long long)c->req->blocks[i], c->req->layer,
                       c->err.msg[0] ? c->err.msg : st_strerror(status));
    return status == ST_ERR_NOMEM ? status : ST_ERR_CORRUPT;
}

/*
 * Block i's summary into *sum_p: its two summary rows alone when the object
 * keeps row sums of dim floats a row (st_put_op_t.row_bytes = dim x 4),
 * each checked by its sum; otherwise from the whole object, checked by its
 * checksum (cd_sc_read). Returns as cd_sc_read.
 */
static st_status_t cd_sc_summary(srpc_ctx_t *ctx, cd_sc_t *c, size_t i, const float **sum_p)
{
    cd_h_ask_t ask = {cd_sc_ask_rows, cd_sc_promote, c};
    st_status_t status;

    c->key = (cd_key_t){.hash = c->hashes[i], .kind = CD_KIND_IDX, .layer = c->req->layer};
    c->err.msg[0] = '\0';
    c->where = (cd_location_t){0};
    status = cd_h_ask_promoting(c->d, &ask);
    if (status == ST_OK && c->where.row_bytes == c->req->dim * sizeof(float) &&
        c->where.length == c->obj_len) {
        *sum_p = c->sum;
        return ST_OK;
    }
    if (status == ST_ERR_NOT_FOUND || status == ST_ERR_CORRUPT || status == ST_ERR_NOMEM) {
        if (status == ST_ERR_CORRUPT) {
            srpc_ctx_set_error(ctx, "IDX object of block %llu layer %u: %s",
                               (unsigned long long)c->req->blocks[i], c->req->layer, c->err.msg);
        }
        return status;
    }
    /* No row sums (ST_ERR_UNSUPPORTED), rows of another size: the whole object. */
    status = cd_sc_read(ctx, c, i);
    *sum_p = c->obj + (size_t)c->e->block_tokens * c->req->dim;
    return status;
}

/* Checks the query and the blocks of a request. ST_OK or ST_ERR_INVALID
 * naming the field. */
static st_status_t cd_sc_check(srpc_ctx_t *ctx, const cd_daemon_t *d, const cd_ns_entry_t *e,
                               const Strata__V1__ScoreRequest *r, size_t n_hashes)
{
    const char *bad = NULL;

    if (r->heads == 0 || r->heads > CD_SCORE_HEADS_MAX) {
        srpc_ctx_set_error(ctx, "heads=%u: must be 1..%d", r->heads, CD_SCORE_HEADS_MAX);
    } else if (r->dim == 0 || r->dim > CD_SCORE_DIM_MAX) {
        srpc_ctx_set_error(ctx, "dim=%u: must be 1..%d", r->dim, CD_SCORE_DIM_MAX);
    } else if (r->n_q != (size_t)r->heads * r->dim) {
        srpc_ctx_set_error(ctx, "q has %zu floats: heads x dim = %u x %u needs %u", r->n_q,
                           r->heads, r->dim, r->heads * r->dim);
    } else if (r->n_w != r->heads) {
        srpc_ctx_set_error(ctx, "w has %zu floats: heads = %u needs as many", r->n_w, r->heads);
    } else if (r->k == 0 || r->k > ST_SCORE_K_MAX) {
        srpc_ctx_set_error(ctx, "k=%u: must be 1..%d", r->k, ST_SCORE_K_MAX);
    } else if (r->layer >= CD_LAYERS_MAX) {
        srpc_ctx_set_error(ctx, "layer=%u: must be below %d", r->layer, CD_LAYERS_MAX);
    } else if (n_hashes != r->n_blocks) {
        srpc_ctx_set_error(ctx, "%zu block_hashes but %zu blocks: one chain index a hash", n_hashes,
                           r->n_blocks);
    } else if (r->n_blocks == 0) {
        srpc_ctx_set_error(ctx, "no blocks to score");
    } else if (r->n_blocks > (size_t)d->cfg.max_hashes) {
        srpc_ctx_set_error(ctx, "%zu blocks exceed max_hashes=%lld", r->n_blocks,
                           (long long)d->cfg.max_hashes);
    } else {
        for (size_t i = 0; bad == NULL && i < r->n_q + r->n_w; i++) {
            bad = isfinite(i < r->n_q ? r->q[i] : r->w[i - r->n_q]) ? NULL : i < r->n_q ? "q" : "w";
        }
        for (size_t i = 0; bad == NULL && i < r->n_blocks; i++) {
            if ((i > 0 && r->blocks[i] <= r->blocks[i - 1]) ||
                r->blocks[i] >= UINT64_MAX / e->block_tokens) {
                srpc_ctx_set_error(ctx, "blocks[%zu]=%llu: blocks must rise, each below %llu", i,
                                   (unsigned long long)r->blocks[i],
                                   (unsigned long long)(UINT64_MAX / e->block_tokens));
                return ST_ERR_INVALID;
            }
        }
        if (bad == NULL && r->use_floor && !isfinite(r->floor)) {
            bad = "floor";
        }
        if (bad == NULL) {
            return ST_OK;
        }
        srpc_ctx_set_error(ctx, "%s holds a value that is not finite", bad);
    }
    return ST_ERR_INVALID;
}

/* Stage 1: every block's bound (order[0..*n_order), highest first); the
 * blocks not held go to resp->missing. */
static st_status_t cd_sc_bounds(srpc_ctx_t *ctx, cd_sc_t *c, cd_sc_block_t *order, size_t *n_order,
                                Strata__V1__ScoreResponse *resp)
{
    const Strata__V1__ScoreRequest *r = c->req;
    size_t no = 0;

    for (size_t i = 0; i < c->n; i++) {
        const float *sum = NULL;
        st_status_t status = cd_sc_summary(ctx, c, i, &sum);
        float b;

        if (status == ST_ERR_NOT_FOUND) {
            resp->missing[resp->n_missing++] = r->blocks[i];
            continue;
        }
        if (status != ST_OK) {
            return status;
        }
        (void)st_cpu_block_bounds(r->q, r->w, (int)r->heads, (int)r->dim, sum, 1, &b);
        order[no++] = (cd_sc_block_t){isnan(b) ? INFINITY : b, (uint32_t)i};
    }
    qsort(order, no, sizeof(*order), cd_sc_bound_cmp);
    *n_order = no;
    return ST_OK;
}

/* Stage 2: the blocks in decreasing bound, row by row, into the heap. */
static st_status_t cd_sc_rows(srpc_ctx_t *ctx, cd_sc_t *c, const cd_sc_block_t *order,
                              size_t n_order, Strata__V1__ScoreResponse *resp)
{
    const Strata__V1__ScoreRequest *r = c->req;
    uint32_t bt = c->e->block_tokens;

    for (size_t o = 0; o < n_order; o++) {
        size_t i = order[o].index;
        st_status_t status;

        if ((c->n_heap == r->k && order[o].bound < c->heap[0].s) ||
            (r->use_floor && order[o].bound < r->floor)) {
            break; /* no row of this block or a later one can enter */
        }
        status = cd_sc_read(ctx, c, i);
        if (status == ST_ERR_NOT_FOUND) { /* evicted since its bound was taken */
            resp->missing[resp->n_missing++] = r->blocks[i];
            continue;
        }
        if (status != ST_OK) {
            return status;
        }
        (void)st_cpu_indexer_scores(r->q, r->w, 1, (int)r->heads, (int)r->dim, c->obj, (int)bt,
                                    c->rows);
        for (uint32_t row = 0; row < bt; row++) {
            if (!r->use_floor || c->rows[row] >= r->floor) {
                cd_sc_offer(c, r->k, (cd_sc_cand_t){c->rows[row], r->blocks[i] * bt + row});
            }
        }
        resp->blocks_scored++;
    }
    return ST_OK;
}

/* The heap, ranked, into the answer. */
static st_status_t cd_sc_answer(srpc_ctx_t *ctx, cd_sc_t *c, Strata__V1__ScoreResponse *resp)
{
    qsort(c->heap, c->n_heap, sizeof(*c->heap), cd_sc_rank_cmp);
    resp->positions = srpc_ctx_alloc(ctx, sizeof(uint64_t) * (c->n_heap + 1));
    resp->scores = srpc_ctx_alloc(ctx, sizeof(float) * (c->n_heap + 1));
    if (resp->positions == NULL || resp->scores == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < c->n_heap; i++) {
        resp->positions[i] = c->heap[i].pos;
        resp->scores[i] = c->heap[i].s;
    }
    resp->n_positions = resp->n_scores = c->n_heap;
    resp->block_tokens = c->e->block_tokens;
    resp->simd = (uint32_t)st_kernels_simd();
    return ST_OK;
}

st_status_t cd_h_score(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__ScoreRequest *req = (const void *)reqm;
    Strata__V1__ScoreResponse *resp = (void *)respm;
    cd_sc_t c = {.d = cd_h_daemon(ctx), .req = req};
    cd_sc_block_t *order = NULL;
    size_t n_order = 0, n_hashes = 0;
    st_status_t status;

    (void)arg;
    status = cd_h_ns(ctx, c.d, req->namespace_id, &c.e);
    if (status != ST_OK) {
        return status;
    }
    c.hashes = cd_h_hashes(ctx, &req->block_hashes, &n_hashes, "block_hashes");
    if (c.hashes == NULL) {
        return ST_ERR_INVALID;
    }
    if ((status = cd_sc_check(ctx, c.d, c.e, req, n_hashes)) != ST_OK) {
        return status;
    }
    c.n = req->n_blocks;
    c.obj_len = (uint64_t)(c.e->block_tokens + 2) * req->dim * sizeof(float);
    c.obj = malloc(c.obj_len);
    c.sum = malloc(2 * sizeof(float) * req->dim);
    c.rows = malloc(sizeof(float) * c.e->block_tokens);
    c.heap = malloc(sizeof(*c.heap) * req->k);
    order = malloc(sizeof(*order) * c.n);
    resp->missing = srpc_ctx_alloc(ctx, sizeof(uint64_t) * c.n);
    status = ST_ERR_NOMEM;
    if (c.obj != NULL && c.sum != NULL && c.rows != NULL && c.heap != NULL && order != NULL &&
        resp->missing != NULL) {
        status = cd_sc_bounds(ctx, &c, order, &n_order, resp);
    }
    if (status == ST_OK) {
        status = cd_sc_rows(ctx, &c, order, n_order, resp);
    }
    if (status == ST_OK) {
        status = cd_sc_answer(ctx, &c, resp);
    }
    if (status == ST_OK) {
        mx_counter_inc(c.e->mx->score_calls);
        mx_counter_add(c.e->mx->score_blocks, c.n);
        mx_counter_add(c.e->mx->score_blocks_scored, resp->blocks_scored);
        mx_counter_add(c.e->mx->score_rows, (uint64_t)resp->blocks_scored * c.e->block_tokens);
    } else if (status == ST_ERR_NOMEM) {
        srpc_ctx_set_error(ctx, "score: out of memory for %zu blocks", c.n);
    }
    free(c.obj);
    free(c.sum);
    free(c.rows);
    free(c.heap);
    free(order);
    return status;
}
