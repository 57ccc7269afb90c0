/*
 * score.c - st_client_score: near-data scoring of a chain range by the
 * nodes that hold its IDX objects (docs/protocol.md "Score").
 *
 * The blocks are grouped by owner with the lookup planner (proto/plan.h:
 * its groups' segments name the blocks each node is asked about), one Score
 * call per group goes out in parallel over sc_fanout (the transport where a
 * node serves calls there, gRPC otherwise), and the nodes' candidates are
 * merged into the global top-k: score descending, ties by the lower
 * position, the rule of st_cpu_indexer_topk. Every node answers its own
 * exact top-k of the rows it holds, so the k best of their union are the k
 * best of the range.
 *
 * A node that fails (down, or it forgot our namespace) is marked down and
 * the call is made once more: the ring then sends its blocks to the next
 * node, which answers from what it holds.
 */
#include "client_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "tcall.h"

#define SC_SCORE_HEADS_MAX 64 /* the daemon's (and the engine's) limits */
#define SC_SCORE_DIM_MAX   1024

/* A candidate of the merge. */
typedef struct sc_cand {
    float s;
    uint64_t pos;
} sc_cand_t;

/* One Score call to one node. */
typedef struct sc_score_call {
    Strata__V1__ScoreRequest req;
    st_hash_t *hashes;
    uint64_t *blocks;
} sc_score_call_t;

/* What one attempt gathered. */
typedef struct sc_score_run {
    st_client_t *c;
    const st_hash_t *chain;
    size_t first, n;
    const st_score_query_t *q;
    sc_cand_t *cands;
    size_t n_cands;
    st_score_stats_t st;
    int lost; /* a node failed: ask again */
    /* This round's ask: k, and the floor of a second round (STRATA_SCORE_ROUNDS=2). */
    uint32_t k_ask;
    int use_floor;
    float floor;
} sc_score_run_t;

static int sc_score_better(const sc_cand_t *a, const sc_cand_t *b)
{
    return a->s > b->s || (a->s == b->s && a->pos < b->pos);
}

static int sc_score_cmp(const void *a, const void *b)
{
    return sc_score_better(a, b) ? -1 : sc_score_better(b, a) ? 1 : 0;
}

static int sc_score_place(void *arg, const st_hash_t *first)
{
    return sc_owner(arg, first);
}

/* Checks the arguments: ST_OK or ST_ERR_INVALID naming what is wrong. */
static st_status_t sc_score_check(const st_client_t *c, const st_hash_t *chain, size_t first,
                                  size_t n, const st_score_query_t *q, const uint64_t *positions,
                                  const float *scores, const size_t *n_out)
{
    size_t nq;

    if (c == NULL || chain == NULL || q == NULL || positions == NULL || scores == NULL ||
        n_out == NULL || q->q == NULL || q->w == NULL) {
        return sc_error(ST_ERR_INVALID, "score: NULL client, chain, query, q, w or output");
    }
    if (q->heads == 0 || q->heads > SC_SCORE_HEADS_MAX) {
        return sc_error(ST_ERR_INVALID, "score: heads=%u must be 1..%d", q->heads,
                        SC_SCORE_HEADS_MAX);
    }
    if (q->dim == 0 || q->dim > SC_SCORE_DIM_MAX) {
        return sc_error(ST_ERR_INVALID, "score: dim=%u must be 1..%d", q->dim, SC_SCORE_DIM_MAX);
    }
    if (q->k == 0 || q->k > ST_SCORE_K_MAX) {
        return sc_error(ST_ERR_INVALID, "score: k=%u must be 1..%d", q->k, ST_SCORE_K_MAX);
    }
    if (first > SIZE_MAX - n || (uint64_t)(first + n) > UINT64_MAX / c->block_tokens) {
        return sc_error(ST_ERR_INVALID, "score: blocks [%zu, +%zu) overflow the positions", first,
                        n);
    }
    nq = (size_t)q->heads * q->dim;
    for (size_t i = 0; i < nq + q->heads; i++) {
        if (!isfinite(i < nq ? q->q[i] : q->w[i - nq])) {
            return sc_error(ST_ERR_INVALID, "score: %s holds a value that is not finite",
                            i < nq ? "q" : "w");
        }
    }
    return ST_OK;
}

/* Builds group g's Score request: the blocks of its segments from r->first on. */
static st_status_t sc_score_build(const sc_score_run_t *r, const lp_group_t *g,
                                  sc_score_call_t *call)
{
    size_t n = 0;

    for (size_t s = 0; s < g->req.n_segments; s++) {
        n += g->req.segments[s]->block_hashes.len / ST_HASH_BYTES;
    }
    call->hashes = malloc(sizeof(st_hash_t) * (n + 1));
    call->blocks = malloc(sizeof(uint64_t) * (n + 1));
    if (call->hashes == NULL || call->blocks == NULL) {
        return ST_ERR_NOMEM;
    }
    n = 0;
    for (size_t s = 0; s < g->req.n_segments; s++) {
        const Strata__V1__Segment *seg = g->req.segments[s];

        for (size_t j = 0; j < seg->block_hashes.len / ST_HASH_BYTES; j++) {
            uint64_t b = seg->first_block + j;

            if (b >= r->first) {
                memcpy(&call->hashes[n], seg->block_hashes.data + j * ST_HASH_BYTES, ST_HASH_BYTES);
                call->blocks[n++] = b;
            }
        }
    }
    strata__v1__score_request__init(&call->req);
    call->req.namespace_id = r->c->ns;
    call->req.layer = r->q->layer;
    call->req.heads = r->q->heads;
    call->req.dim = r->q->dim;
    call->req.q = (float *)r->q->q;
    call->req.n_q = (size_t)r->q->heads * r->q->dim;
    call->req.w = (float *)r->q->w;
    call->req.n_w = r->q->heads;
    call->req.k = r->k_ask;
    call->req.use_floor = r->use_floor;
    call->req.floor = r->floor;
    call->req.block_hashes.data = (uint8_t *)call->hashes;
    call->req.block_hashes.len = n * ST_HASH_BYTES;
    call->req.blocks = call->blocks;
    call->req.n_blocks = n;
    return ST_OK;
}

/*
 * Takes one node's answer into r->cands. Returns ST_OK; ST_ERR_NOT_FOUND
 * when it lacks a block; ST_ERR_PROTOCOL for an answer that does not fit its
 * request; or the call's error. A node gone down sets r->lost.
 */
static st_status_t sc_score_take(sc_score_run_t *r, uint32_t node, const sc_score_call_t *call,
                                 srpc_fanout_item_t *it)
{
    st_client_t *c = r->c;
    const Strata__V1__ScoreResponse *a = (const void *)it->resp;
    uint64_t lo = call->blocks[0] * c->block_tokens;
    uint64_t hi = (call->blocks[call->req.n_blocks - 1] + 1) * c->block_tokens;

    if (it->status != ST_OK) {
        sc_node_failed(c, node, it->status, &it->err);
        if (!ring_is_up(&c->ring, node)) {
            r->lost = 1;
            return ST_OK;
        }
        return sc_error(it->status, "score: node %s: %s", c->nodes[node].addr, it->err.message);
    }
    r->st.bytes_received += protobuf_c_message_get_packed_size(it->resp);
    r->st.blocks_scored += a->blocks_scored;
    if (a->n_missing > 0) {
        return sc_error(ST_ERR_NOT_FOUND,
                        "score: node %s holds no IDX object of block %llu layer %u (%zu of %zu "
                        "blocks missing)",
                        c->nodes[node].addr, (unsigned long long)a->missing[0], r->q->layer,
                        a->n_missing, call->req.n_blocks);
    }
    if (a->n_positions != a->n_scores || a->n_positions > r->k_ask ||
        a->block_tokens != c->block_tokens) {
        return sc_error(ST_ERR_PROTOCOL,
                        "score: node %s answered %zu positions, %zu scores, block_tokens %u (k "
                        "%u, block_tokens %u)",
                        c->nodes[node].addr, a->n_positions, a->n_scores, a->block_tokens, r->k_ask,
                        c->block_tokens);
    }
    for (size_t i = 0; i < a->n_positions; i++) {
        if (a->positions[i] < lo || a->positions[i] >= hi ||
            (r->use_floor && !(a->scores[i] >= r->floor))) {
            return sc_error(ST_ERR_PROTOCOL,
                            "score: node %s answered position %llu outside [%llu, %llu) or "
                            "below the floor",
                            c->nodes[node].addr, (unsigned long long)a->positions[i],
                            (unsigned long long)lo, (unsigned long long)hi);
        }
        r->cands[r->n_cands++] = (sc_cand_t){a->scores[i], a->positions[i]};
    }
    return ST_OK;
}

/* Sends the groups' calls and takes their answers. */
static st_status_t sc_score_send(sc_score_run_t *r, lp_plan_t *p)
{
    st_client_t *c = r->c;
    sc_score_call_t *calls = calloc(p->n_groups, sizeof(*calls));
    srpc_fanout_item_t *items = calloc(p->n_groups, sizeof(*items));
    st_status_t status = ST_ERR_NOMEM, first_err = ST_OK;

    free(r->cands);
    r->n_cands = 0;
    r->cands = malloc(sizeof(*r->cands) * (p->n_groups * (size_t)r->k_ask + 1));
    for (size_t g = 0; calls != NULL && items != NULL && r->cands != NULL && g < p->n_groups; g++) {
        if ((status = sc_score_build(r, &p->groups[g], &calls[g])) != ST_OK) {
            break;
        }
        items[g].ch = c->nodes[p->groups[g].node].ch;
        items[g].req = &calls[g].req.base;
        r->st.bytes_sent += protobuf_c_message_get_packed_size(&calls[g].req.base);
    }
    if (status == ST_OK) {
        status = sc_fanout(c, &srpc_cache_methods[SRPC_CACHE_SCORE], TCALL_SCORE, items,
                           p->n_groups, (int)c->timeout_ms);
    }
    for (size_t g = 0; status == ST_OK && g < p->n_groups; g++) {
        st_status_t s = sc_score_take(r, p->groups[g].node, &calls[g], &items[g]);

        first_err = first_err == ST_OK ? s : first_err;
    }
    r->st.nodes += (uint32_t)p->n_groups;
    if (items != NULL) {
        srpc_fanout_free(items, p->n_groups);
    }
    for (size_t g = 0; calls != NULL && g < p->n_groups; g++) {
        free(calls[g].hashes);
        free(calls[g].blocks);
    }
    free(calls);
    free(items);
    if (status == ST_ERR_NOMEM) {
        return sc_error(status, "score: out of memory");
    }
    return status != ST_OK ? status : first_err;
}

static int sc_score_two_rounds(void)
{
    const char *v = getenv("STRATA_SCORE_ROUNDS");

    return v != NULL && strcmp(v, "2") == 0;
}

/*
 * The calls of one attempt. One round: every node its top-k. Two
 * (STRATA_SCORE_ROUNDS=2, several groups): first every group its top
 * ceil(k / groups), whose union's k-th best score is a floor the global
 * k-th best cannot be below; then every group its top-k of the rows at or
 * above that floor, its blocks whose bound is below it not scored. Each
 * node's rows of the global top-k are its best, all at or above the floor,
 * so the second round's union holds them: the same answer as one round.
 */
static st_status_t sc_score_rounds(sc_score_run_t *r, lp_plan_t *p)
{
    size_t g = p->n_groups;
    st_status_t status;

    r->k_ask = r->q->k;
    r->use_floor = 0;
    if (sc_score_two_rounds() && g > 1 && r->q->k >= g) {
        r->k_ask = (uint32_t)((r->q->k + g - 1) / g);
        status = sc_score_send(r, p);
        if (status != ST_OK || r->lost) {
            return status;
        }
        r->k_ask = r->q->k;
        if (r->n_cands >= r->q->k) { /* else: too few rows for a floor */
            qsort(r->cands, r->n_cands, sizeof(*r->cands), sc_score_cmp);
            r->floor = r->cands[r->q->k - 1].s;
            r->use_floor = isfinite(r->floor);
        }
    }
    return sc_score_send(r, p);
}

/* One attempt over the ring as it is now. */
static st_status_t sc_score_once(sc_score_run_t *r)
{
    st_client_t *c = r->c;
    size_t seg0 = r->first - r->first % c->segment_blocks;
    Strata__V1__LookupRequest tmpl;
    lp_params_t prm;
    lp_plan_t p;
    st_status_t status;

    strata__v1__lookup_request__init(&tmpl);
    tmpl.namespace_id = c->ns;
    prm = (lp_params_t){.hashes = r->chain + seg0,
                        .n_blocks = r->first + r->n - seg0,
                        .first_block = seg0,
                        .segment_blocks = c->segment_blocks,
                        .n_nodes = c->n_nodes,
                        .place = sc_score_place,
                        .place_arg = c,
                        .max_segments = LP_UNLIMITED,
                        .max_hashes = c->max_hashes,
                        .merge_runs = 1,
                        .tmpl = &tmpl};
    status = lp_plan_init(&p, &prm);
    if (status != ST_OK) {
        return sc_error(status, "score: %s",
                        status == ST_ERR_NOMEM ? "out of memory" : "no blocks to plan");
    }
    if (p.n_groups == 0) {
        status = sc_error(ST_ERR_UNAVAILABLE, "score: every node is down");
    } else {
        status = sc_score_rounds(r, &p);
    }
    lp_plan_free(&p);
    return status;
}

st_status_t st_client_score(st_client_t *c, const st_hash_t *chain, size_t first, size_t n,
                            const st_score_query_t *query, uint64_t *positions, float *scores,
                            size_t *n_out, st_score_stats_t *stats)
{
    sc_score_run_t r = {.c = c, .chain = chain, .first = first, .n = n, .q = query};
    st_status_t status;

    if (n_out != NULL) {
        *n_out = 0;
    }
    if (stats != NULL) {
        *stats = (st_score_stats_t){0};
    }
    status = sc_score_check(c, chain, first, n, query, positions, scores, n_out);
    if (status != ST_OK || n == 0) {
        return status;
    }
    r.st.blocks = n;
    for (int attempt = 0;; attempt++) {
        r.lost = 0;
        r.n_cands = 0;
        r.st.blocks_scored = 0; /* this attempt's; bytes and nodes add up over both */
        status = sc_score_once(&r);
        if (status == ST_OK && r.lost) {
            status = sc_error(ST_ERR_UNAVAILABLE, "score: a node went down during the call");
        }
        /* A node found down: the ring sends its blocks to the next node; once. */
        if (!r.lost || attempt == 1) {
            break;
        }
        free(r.cands);
        r.cands = NULL;
    }
    if (status == ST_OK) {
        size_t rows = n * (size_t)c->block_tokens;
        size_t want = rows < query->k ? rows : query->k;

        qsort(r.cands, r.n_cands, sizeof(*r.cands), sc_score_cmp);
        if (r.n_cands < want) {
            status = sc_error(ST_ERR_PROTOCOL, "score: %zu candidates answered for %zu wanted",
                              r.n_cands, want);
            want = 0;
        }
        *n_out = want;
        for (size_t i = 0; i < want; i++) {
            positions[i] = r.cands[i].pos;
            scores[i] = r.cands[i].s;
        }
    }
    free(r.cands);
    if (stats != NULL) {
        *stats = r.st;
    }
    return status;
}
