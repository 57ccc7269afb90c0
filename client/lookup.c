/*
 * lookup.c - st_client_lookup: the chain's owners asked in parallel through
 * the lookup planner (proto/plan.h), over sc_fanout (gRPC, or the transport
 * where a node serves calls there).
 *
 * Lookups send compact segments (docs/protocol.md "Compact segments"): per
 * request segment the hashes of every LP_PROBE_EVERY-th block and of the
 * last, instead of every hash; the owner proves the blocks between along its
 * index. STRATA_LOOKUP_COMPACT=0 in the environment sends every hash (the
 * full form, for comparisons).
 */
#include "client_internal.h"

#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "tcall.h"

static int sc_lookup_compact_on(void)
{
    const char *v = getenv("STRATA_LOOKUP_COMPACT");

    return v == NULL || strcmp(v, "0") != 0;
}

/* The planner's placer: the first healthy node on the ring. */
static int sc_lookup_place(void *arg, const st_hash_t *first)
{
    const st_client_t *c = arg;

    /* One node owns everything (when it is up): no ring search per segment. */
    if (c->n_nodes == 1) {
        return ring_is_up(&c->ring, 0) ? 0 : -1;
    }
    return sc_owner(c, first);
}

static void sc_lookup_misfit(void *arg, uint32_t m, uint32_t u, uint64_t run)
{
    (void)arg;
    sc_error(ST_ERR_PROTOCOL, "lookup: a node answered %u + %u blocks of a %llu-block run", m, u,
             (unsigned long long)run);
}

/* Sends n groups in parallel (items: room for n) and hands each its answer.
 * Returns sc_fanout()'s status. */
static st_status_t sc_lookup_send(st_client_t *c, lp_group_t *groups, srpc_fanout_item_t *items,
                                  size_t n)
{
    st_status_t status;

    for (size_t i = 0; i < n; i++) {
        items[i].ch = c->nodes[groups[i].node].ch;
        items[i].req = &groups[i].req.base;
    }
    status = sc_fanout(c, &srpc_cache_methods[SRPC_CACHE_LOOKUP], TCALL_LOOKUP, items, n,
                       (int)c->timeout_ms);
    for (size_t i = 0; i < n; i++) {
        groups[i].status = status != ST_OK ? status : items[i].status;
        groups[i].resp = groups[i].status == ST_OK ? (const void *)items[i].resp : NULL;
        groups[i].msg = items[i].err.message;
    }
    return status;
}

/*
 * Where the prefix would end on undecided blocks, asks their owner for them
 * with their hashes (a second, small call to one node); again if that
 * completes the run and the next undecided one ends it. An owner gone now
 * leaves its run unanswered (and is down in down[]). Returns ST_OK or
 * ST_ERR_NOMEM.
 */
static st_status_t sc_lookup_resolve(st_client_t *c, lp_plan_t *p, uint8_t *down)
{
    size_t run;

    while ((run = lp_plan_next_undecided(p)) != SIZE_MAX) {
        srpc_fanout_item_t item = {0};
        lp_round_t r;
        st_status_t status = lp_round_init(p, &r, &run, 1);

        if (status != ST_OK) {
            return status;
        }
        sc_lookup_send(c, r.groups, &item, 1);
        status = lp_round_take(p, &r, 0);
        if (status != ST_OK && status != ST_ERR_NOMEM) {
            sc_node_failed(c, r.groups[0].node, status, &item.err);
            down[r.groups[0].node] = 1;
        }
        srpc_fanout_free(&item, 1);
        lp_round_free(&r);
        if (status == ST_ERR_NOMEM) {
            return status;
        }
    }
    return ST_OK;
}

/* The planner's parameters of one lookup (req: the template of its requests). */
static void sc_lookup_params(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             uint32_t layers, uint32_t *layer_list, Strata__V1__LookupRequest *req,
                             lp_params_t *prm)
{
    for (uint32_t l = 0; l < layers; l++) {
        layer_list[l] = l;
    }
    strata__v1__lookup_request__init(req);
    req->namespace_id = c->ns;
    req->kinds_mask =
        layers ? (1u << STRATA__V1__OBJECT_KIND__KV) | (1u << STRATA__V1__OBJECT_KIND__IDX) : 0;
    req->layers = layer_list;
    req->n_layers = layers;
    *prm = (lp_params_t){.hashes = chain,
                         .n_blocks = n_blocks,
                         .first_block = 0,
                         .segment_blocks = c->segment_blocks,
                         .n_nodes = c->n_nodes,
                         .place = sc_lookup_place,
                         .place_arg = c,
                         .max_segments = c->max_batch,
                         .max_hashes = c->max_hashes,
                         .merge_runs = 1,
                         .tmpl = req,
                         .misfit = sc_lookup_misfit};
}

/*
 * Takes the first answers of every group: a node that failed, or whose
 * answer does not fit, is down for this lookup. Sets *older_p and stops
 * when a node ignored the compact form (an older daemon), so that the
 * caller asks again with every hash.
 */
static void sc_lookup_take(st_client_t *c, lp_plan_t *p, srpc_fanout_item_t *items, uint8_t *down,
                           int *older_p)
{
    for (size_t i = 0; i < p->n_groups; i++) {
        const Strata__V1__LookupResponse *r = (const void *)items[i].resp;
        uint32_t node = p->groups[i].node;

        if (p->compact &&
            ((items[i].status == ST_OK && !r->compact) || items[i].status == ST_ERR_INVALID)) {
            /* A daemon older than compact segments ignores them (or finds no
             * segments): ask again with every hash. */
            *older_p = 1;
            return;
        }
        if (lp_plan_take(p, i) != ST_OK) {
            sc_node_failed(c, node, items[i].status, &items[i].err);
            down[node] = 1;
        }
    }
}

/* One lookup, in the compact form when compact is set. Sets *older_p (and
 * nothing in result) when a node ignored the compact form. */
static st_status_t sc_lookup(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             uint32_t layers, int compact, st_lookup_result_t *result, int *older_p)
{
    uint32_t layer_list[129];
    Strata__V1__LookupRequest tmpl;
    lp_params_t prm;
    lp_plan_t p;
    srpc_fanout_item_t *items = NULL;
    uint8_t *down = calloc(c->n_nodes, 1);
    compose_prefix_t prefix;
    st_status_t status = ST_ERR_NOMEM;

    *older_p = 0;
    sc_lookup_params(c, chain, n_blocks, layers, layer_list, &tmpl, &prm);
    if (down == NULL || (status = lp_plan_init(&p, &prm)) != ST_OK) {
        free(down);
        return sc_error(down == NULL ? ST_ERR_NOMEM : status, "lookup: %s",
                        down == NULL || status == ST_ERR_NOMEM ? "out of memory"
                                                               : "no segments to plan");
    }
    if (p.n_groups == 0) {
        status = sc_error(ST_ERR_UNAVAILABLE, "lookup: every node is down");
        goto out;
    }
    items = calloc(p.n_groups, sizeof(*items));
    if (items == NULL || (compact && lp_plan_compact(&p) != ST_OK)) {
        status = ST_ERR_NOMEM;
        goto out;
    }
    status = sc_lookup_send(c, p.groups, items, p.n_groups);
    if (status != ST_OK) {
        goto out;
    }
    sc_lookup_take(c, &p, items, down, older_p);
    if (*older_p || (status = sc_lookup_resolve(c, &p, down)) != ST_OK) {
        goto out;
    }
    lp_plan_compose(&p, &prefix);
    result->matched_blocks = prefix.matched_blocks;
    result->resumable_blocks = prefix.resumable_blocks;
    for (uint32_t node = 0; node < c->n_nodes; node++) {
        result->nodes_down += down[node] || !ring_is_up(&c->ring, node);
    }
    result->nodes_asked = (uint32_t)p.n_groups;
out:
    if (items != NULL) {
        srpc_fanout_free(items, p.n_groups);
    }
    free(items);
    free(down);
    lp_plan_free(&p);
    if (status == ST_ERR_NOMEM) {
        sc_error(status, "lookup: out of memory");
    }
    return status;
}

st_status_t st_client_lookup(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             uint32_t layers, st_lookup_result_t *result)
{
    st_status_t status;

    memset(result, 0, sizeof(*result));
    if (n_blocks == 0) {
        return ST_OK;
    }
    if (chain == NULL || layers > 128) {
        return sc_error(ST_ERR_INVALID, "lookup: NULL chain or layers > 128");
    }
    for (int attempt = 0;; attempt++) {
        uint8_t up[SC_MAX_NODES];
        int lost = 0, older;

        for (uint32_t i = 0; i < c->n_nodes; i++) {
            up[i] = (uint8_t)ring_is_up(&c->ring, i);
        }
        status = sc_lookup(c, chain, n_blocks, layers, sc_lookup_compact_on(), result, &older);
        if (status == ST_OK && older) {
            memset(result, 0, sizeof(*result));
            status = sc_lookup(c, chain, n_blocks, layers, 0, result, &older);
        }
        for (uint32_t i = 0; i < c->n_nodes; i++) {
            lost |= up[i] && !ring_is_up(&c->ring, i);
        }
        /* A node found down by this call ended the prefix at its first
         * segment; asked again, the ring routes its segments to the next
         * nodes (which hold the replicas of KDA and SESSION objects): the
         * same answer the next call would give. Once per call. */
        if (status != ST_OK || !lost || attempt == 1) {
            return status;
        }
        memset(result, 0, sizeof(*result));
    }
}
