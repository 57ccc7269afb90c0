/*
 * ops.c - lookup, get, put, pin, unpin and delete over the inline control
 * plane, fanned out to the nodes in parallel.
 */
#include "client_internal.h"

#include <stdlib.h>
#include <string.h>

#include "st_xxh.h"

#include "compose.h"
#include "st_log.h"
#include "tcall.h"

#define SC_MAX_REPLICAS 16

Strata__V1__ObjectKind sc_kind(uint8_t kind)
{
    switch (kind) {
    case ST_KIND_KV: return STRATA__V1__OBJECT_KIND__KV;
    case ST_KIND_IDX: return STRATA__V1__OBJECT_KIND__IDX;
    case ST_KIND_KDA: return STRATA__V1__OBJECT_KIND__KDA;
    case ST_KIND_VIS: return STRATA__V1__OBJECT_KIND__VIS;
    default: return STRATA__V1__OBJECT_KIND__KIND_UNSPECIFIED;
    }
}

st_status_t sc_key_status(Strata__V1__KeyStatus ks)
{
    switch (ks) {
    case STRATA__V1__KEY_STATUS__KEY_OK: return ST_OK;
    case STRATA__V1__KEY_STATUS__KEY_NOT_FOUND: return ST_ERR_NOT_FOUND;
    case STRATA__V1__KEY_STATUS__KEY_EXISTS: return ST_ERR_EXISTS;
    case STRATA__V1__KEY_STATUS__KEY_EXHAUSTED: return ST_ERR_EXHAUSTED;
    case STRATA__V1__KEY_STATUS__KEY_CORRUPT: return ST_ERR_CORRUPT;
    case STRATA__V1__KEY_STATUS__KEY_BUSY: return ST_ERR_BUSY;
    case STRATA__V1__KEY_STATUS__KEY_EXPIRED: return ST_ERR_TIMEOUT;
    default: return ST_ERR_INVALID;
    }
}

/* The nodes that hold an object of block i: the owner, and for KDA the
 * replicas after it. Returns how many (0: all down). */
static size_t sc_targets(const st_client_t *c, const st_hash_t *chain, uint64_t i, uint8_t kind,
                         uint32_t *nodes)
{
    size_t want = kind == ST_KIND_KDA ? c->replicas : 1;

    if (want > SC_MAX_REPLICAS) {
        want = SC_MAX_REPLICAS;
    }
    return st_ring_place(&c->ring, sc_segment_first(c, chain, i), nodes, want);
}

/* ------------------------------------------------------------- lookup -- */

/*
 * Lookups send compact segments (docs/protocol.md "Compact segments"): per
 * request segment the hashes of every SC_PROBE_EVERY-th block and of the
 * last, instead of every hash; the owner proves the blocks between along its
 * index. STRATA_LOOKUP_COMPACT=0 in the environment sends every hash (the
 * full form, for comparisons).
 */
#define SC_PROBE_EVERY 64

typedef struct sc_lookup_item {
    Strata__V1__LookupRequest req;
    Strata__V1__Segment *store; /* the request segments */
    Strata__V1__Segment **segs;
    size_t *seg_k; /* first chain segment of each request segment */
    size_t *seg_n; /* chain segments it covers */
    size_t n_req;  /* request segments (full, or moved to the compact fields) */
    uint32_t node;
} sc_lookup_item_t;

/* A request segment whose answer left blocks undecided. */
typedef struct sc_pending {
    size_t item, seg;   /* li[item].segs[seg] */
    uint64_t run_first; /* chain index of the run's first block */
    uint32_t matched, unresolved;
    const uint64_t *kda; /* checkpoints of the matched part */
    size_t n_kda;
} sc_pending_t;

static int sc_lookup_compact_on(void)
{
    const char *v = getenv("STRATA_LOOKUP_COMPACT");

    return v == NULL || strcmp(v, "0") != 0;
}

/* Spreads a run's match (m blocks, then u undecided) over the chain
 * segments it covers; the segment in which its undecided blocks start is
 * marked with pend in undecided[], the others with SIZE_MAX. */
static void sc_spread(st_seg_answer_t *ans, size_t *undecided, size_t pend, const size_t *seg_k,
                      const size_t *seg_n, size_t j, uint64_t m, uint32_t u, const uint64_t *kda,
                      size_t n_kda)
{
    uint64_t off = 0, at = m;

    for (size_t q = 0; q < seg_n[j]; q++) {
        size_t k = seg_k[j] + q;
        uint64_t here = m > ans[k].n_blocks ? ans[k].n_blocks : m;

        ans[k].answered = 1;
        ans[k].matched = (uint32_t)here;
        ans[k].kda = kda;
        ans[k].n_kda = n_kda;
        undecided[k] = u > 0 && at >= off && at < off + ans[k].n_blocks ? pend : SIZE_MAX;
        off += ans[k].n_blocks;
        m -= here;
    }
}

/* The room sc_compact() takes from the pools of one lookup. */
typedef struct sc_pools {
    uint64_t *first;
    uint32_t *blocks, *probes, *offsets;
    st_hash_t *hashes;
} sc_pools_t;

/* Moves the request segments of item to the compact fields of its request
 * (in the same order), taking their room from *pl. */
static void sc_compact(sc_lookup_item_t *it, const st_hash_t *chain, sc_pools_t *pl)
{
    Strata__V1__LookupRequest *q = &it->req;
    size_t n = q->n_segments, at = 0;

    q->compact_first = pl->first;
    q->compact_blocks = pl->blocks;
    q->compact_probes = pl->probes;
    q->compact_offsets = pl->offsets;
    q->compact_hashes.data = (uint8_t *)pl->hashes->b;
    for (size_t j = 0; j < n; j++) {
        const Strata__V1__Segment *sg = it->segs[j];
        uint32_t len = (uint32_t)(sg->block_hashes.len / ST_HASH_BYTES), np = 0;
        const st_hash_t *h = &chain[sg->first_block];

        for (uint32_t o = 0; o < len; o += SC_PROBE_EVERY) {
            pl->offsets[at + np] = o;
            pl->hashes[at + np++] = h[o];
        }
        if (pl->offsets[at + np - 1] != len - 1) {
            pl->offsets[at + np] = len - 1;
            pl->hashes[at + np++] = h[len - 1];
        }
        pl->first[j] = sg->first_block;
        pl->blocks[j] = len;
        pl->probes[j] = np;
        at += np;
    }
    q->n_compact_first = q->n_compact_blocks = q->n_compact_probes = n;
    q->n_compact_offsets = at;
    q->compact_hashes.len = at * ST_HASH_BYTES;
    q->n_segments = 0;
    pl->first += n;
    pl->blocks += n;
    pl->probes += n;
    pl->offsets += at;
    pl->hashes += at;
}

/* The answer for request segment j of an item: matched, undecided and
 * checkpoints, from the compact fields when compact (kda_at: the running
 * position in compact_kda). */
static void sc_answer(const Strata__V1__LookupResponse *r, int compact, size_t j, size_t *kda_at,
                      uint32_t *m, uint32_t *u, const uint64_t **kda, size_t *n_kda)
{
    if (!compact) {
        *m = r->segments[j]->matched_blocks;
        *u = 0;
        *kda = r->segments[j]->kda_checkpoints;
        *n_kda = r->segments[j]->n_kda_checkpoints;
        return;
    }
    *m = r->compact_matched[j];
    *u = r->compact_unresolved[j];
    *kda = r->compact_kda != NULL ? r->compact_kda + *kda_at : NULL;
    *n_kda = r->compact_kda_counts[j];
    *kda_at += *n_kda;
}

/* Whether a node's answer has one entry per request segment of the item. */
static int sc_answer_ok(const Strata__V1__LookupResponse *r, int compact, size_t n_req)
{
    size_t n_kda = 0;

    if (!compact) {
        return r->n_segments == n_req;
    }
    if (r->n_compact_matched != n_req || r->n_compact_unresolved != n_req ||
        r->n_compact_kda_counts != n_req) {
        return 0;
    }
    for (size_t j = 0; j < n_req; j++) {
        n_kda += r->compact_kda_counts[j];
    }
    return n_kda == r->n_compact_kda;
}

/* Asks the owner of a run for its undecided blocks with their hashes.
 * Returns ST_OK with *m_p and a malloc'd merged checkpoint list, or the
 * call's status. */
static st_status_t sc_resolve(st_client_t *c, const st_hash_t *chain, const sc_lookup_item_t *it,
                              const sc_pending_t *pd, uint32_t *m_p, uint64_t **kda_p,
                              size_t *n_kda_p)
{
    Strata__V1__LookupRequest req = it->req;
    Strata__V1__Segment sg, *sgp = &sg;

    req.n_compact_first = req.n_compact_blocks = req.n_compact_probes = 0;
    req.n_compact_offsets = 0;
    req.compact_hashes.len = 0;
    srpc_fanout_item_t item = {0};
    const Strata__V1__LookupResponse *r;
    st_status_t status;
    uint64_t *kda;

    strata__v1__segment__init(&sg);
    sg.first_block = pd->run_first + pd->matched;
    sg.block_hashes.data = (uint8_t *)chain[sg.first_block].b;
    sg.block_hashes.len = (size_t)pd->unresolved * ST_HASH_BYTES;
    req.segments = &sgp;
    req.n_segments = 1;
    item.ch = c->nodes[it->node].ch;
    item.req = &req.base;
    status = sc_fanout(c, &srpc_cache_methods[SRPC_CACHE_LOOKUP], ST_TCALL_LOOKUP, &item, 1,
                       (int)c->timeout_ms);
    if (status == ST_OK) {
        status = item.status;
    }
    r = (const void *)item.resp;
    if (status == ST_OK &&
        (r->n_segments != 1 || r->segments[0]->matched_blocks > pd->unresolved)) {
        status = ST_ERR_PROTOCOL;
    }
    if (status != ST_OK) {
        sc_node_failed(c, it->node, status, &item.err);
        srpc_fanout_free(&item, 1);
        return status;
    }
    kda = malloc(sizeof(*kda) * (pd->n_kda + r->segments[0]->n_kda_checkpoints + 1));
    if (kda == NULL) {
        srpc_fanout_free(&item, 1);
        return ST_ERR_NOMEM;
    }
    if (pd->n_kda > 0) {
        memcpy(kda, pd->kda, sizeof(*kda) * pd->n_kda);
    }
    if (r->segments[0]->n_kda_checkpoints > 0) {
        memcpy(kda + pd->n_kda, r->segments[0]->kda_checkpoints,
               sizeof(*kda) * r->segments[0]->n_kda_checkpoints);
    }
    *n_kda_p = pd->n_kda + r->segments[0]->n_kda_checkpoints;
    *m_p = r->segments[0]->matched_blocks;
    *kda_p = kda;
    srpc_fanout_free(&item, 1);
    return ST_OK;
}

/* One lookup, in the compact form when compact is set. Returns 1 (and
 * nothing in result) when a node ignored the compact form: an older daemon,
 * asked again with every hash by the caller. */
static st_status_t sc_lookup(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             uint32_t layers, int compact, st_lookup_result_t *result)
{
    uint32_t S = c->segment_blocks;
    size_t n_seg = (n_blocks + S - 1) / S, n_items = 0, cap_items = 0, n_pend = 0, n_merged = 0;
    size_t n_reqseg = 0;
    uint32_t *layer_list = NULL, *pool_u32 = NULL;
    uint64_t *pool_first = NULL;
    int *owner = NULL;
    size_t *per_node = NULL;
    st_seg_answer_t *ans = NULL;
    sc_lookup_item_t *li = NULL;
    srpc_fanout_item_t *items = NULL;
    uint8_t *down = NULL;
    st_hash_t *probe_h = NULL;
    size_t *undecided = NULL;
    sc_pending_t *pend = NULL;
    uint64_t **merged = NULL;
    st_prefix_t prefix;
    st_status_t status = ST_ERR_NOMEM;

    /* Sized to what this lookup needs: large zeroed blocks come from mmap,
     * and every lookup would pay their page faults. */
    owner = malloc(n_seg * sizeof(*owner));
    ans = malloc(n_seg * sizeof(*ans));
    per_node = calloc(c->n_nodes, sizeof(*per_node));
    down = calloc(c->n_nodes, 1);
    layer_list = malloc((layers + 1) * sizeof(*layer_list));
    undecided = malloc(n_seg * sizeof(*undecided));
    if (!owner || !ans || !per_node || !down || !layer_list || !undecided) {
        goto out;
    }
    for (uint32_t l = 0; l < layers; l++) {
        layer_list[l] = l;
    }
    for (size_t k = 0; k < n_seg; k++) {
        /* One node owns everything (when it is up): no ring search per segment. */
        owner[k] =
            c->n_nodes == 1 ? (st_ring_is_up(&c->ring, 0) ? 0 : -1) : sc_owner(c, &chain[k * S]);
        ans[k] = (st_seg_answer_t){
            k * S, (uint32_t)(n_blocks - k * S < S ? n_blocks - k * S : S), 0, 0, NULL, 0};
        undecided[k] = SIZE_MAX;
        if (owner[k] >= 0) {
            per_node[owner[k]]++;
        }
    }
    /*
     * One request per node, split where it would pass the node's limits.
     * Consecutive segments with the same owner travel as one request segment
     * (the owner's answer for the run is the same prefix), which keeps the
     * messages small when few nodes hold a long chain.
     */
    for (uint32_t node = 0; node < c->n_nodes; node++) {
        sc_lookup_item_t *cur = NULL;
        size_t hashes = 0, left = per_node[node];

        for (size_t k = 0; k < n_seg && left > 0; k++) {
            if (owner[k] != (int)node) {
                continue;
            }
            if (cur == NULL || cur->req.n_segments == c->max_batch ||
                hashes + ans[k].n_blocks > c->max_hashes) {
                if (n_items == cap_items) {
                    size_t cap = cap_items ? 2 * cap_items : c->n_nodes + 4;
                    sc_lookup_item_t *grown = realloc(li, cap * sizeof(*li));

                    if (grown == NULL) {
                        goto out;
                    }
                    li = grown;
                    cap_items = cap;
                }
                cur = &li[n_items++];
                memset(cur, 0, sizeof(*cur));
                strata__v1__lookup_request__init(&cur->req);
                cur->store = malloc(left * sizeof(*cur->store));
                cur->segs = malloc(left * sizeof(*cur->segs));
                cur->seg_k = malloc(left * sizeof(*cur->seg_k));
                cur->seg_n = malloc(left * sizeof(*cur->seg_n));
                if (!cur->store || !cur->segs || !cur->seg_k || !cur->seg_n) {
                    goto out;
                }
                cur->node = node;
                cur->req.namespace_id = c->ns;
                cur->req.kinds_mask = layers ? (1u << STRATA__V1__OBJECT_KIND__KV) |
                                                   (1u << STRATA__V1__OBJECT_KIND__IDX)
                                             : 0;
                cur->req.layers = layer_list;
                cur->req.n_layers = layers;
                cur->req.segments = cur->segs;
                hashes = 0;
            }
            left--;
            if (cur->req.n_segments > 0) {
                size_t last = cur->req.n_segments - 1;

                if (cur->seg_k[last] + cur->seg_n[last] == k) {
                    /* Extend the run: the chain's hashes are contiguous. */
                    cur->segs[last]->block_hashes.len += ans[k].n_blocks * ST_HASH_BYTES;
                    cur->seg_n[last]++;
                    hashes += ans[k].n_blocks;
                    continue;
                }
            }
            {
                Strata__V1__Segment *sg = &cur->store[cur->req.n_segments];

                strata__v1__segment__init(sg);
                sg->first_block = k * S;
                sg->block_hashes.data = (uint8_t *)chain[k * S].b;
                sg->block_hashes.len = ans[k].n_blocks * ST_HASH_BYTES;
                cur->seg_k[cur->req.n_segments] = k;
                cur->seg_n[cur->req.n_segments] = 1;
                cur->segs[cur->req.n_segments++] = sg;
                n_reqseg++;
            }
            hashes += ans[k].n_blocks;
        }
    }
    if (n_items == 0) {
        status = sc_error(ST_ERR_UNAVAILABLE, "lookup: every node is down");
        goto out;
    }
    items = calloc(n_items, sizeof(*items));
    pend = malloc(n_reqseg * sizeof(*pend));
    merged = malloc(n_reqseg * sizeof(*merged));
    if (items == NULL || pend == NULL || merged == NULL) {
        goto out;
    }
    for (size_t i = 0; i < n_items; i++) {
        li[i].n_req = li[i].req.n_segments;
    }
    if (compact) {
        /* At most one probe per SC_PROBE_EVERY blocks plus two per segment. */
        size_t room = n_blocks / SC_PROBE_EVERY + 2 * n_reqseg + 1;
        sc_pools_t pl;

        pool_first = malloc(n_reqseg * sizeof(*pool_first));
        pool_u32 = malloc((3 * n_reqseg + room) * sizeof(*pool_u32));
        probe_h = malloc(room * sizeof(*probe_h));
        if (pool_first == NULL || pool_u32 == NULL || probe_h == NULL) {
            goto out;
        }
        pl = (sc_pools_t){pool_first, pool_u32, pool_u32 + n_reqseg, pool_u32 + 2 * n_reqseg,
                          probe_h};
        for (size_t i = 0; i < n_items; i++) {
            sc_compact(&li[i], chain, &pl);
        }
    }
    for (size_t i = 0; i < n_items; i++) {
        items[i].ch = c->nodes[li[i].node].ch;
        items[i].req = &li[i].req.base;
    }
    status = sc_fanout(c, &srpc_cache_methods[SRPC_CACHE_LOOKUP], ST_TCALL_LOOKUP, items, n_items,
                       (int)c->timeout_ms);
    if (status != ST_OK) {
        goto out;
    }
    for (size_t i = 0; i < n_items; i++) {
        const Strata__V1__LookupResponse *r = (const void *)items[i].resp;
        size_t kda_at = 0;

        if (compact &&
            ((items[i].status == ST_OK && !r->compact) || items[i].status == ST_ERR_INVALID)) {
            /* A daemon older than compact segments ignores them (or finds no
             * segments): ask again with every hash. */
            status = 1;
            goto out;
        }
        if (items[i].status != ST_OK || !sc_answer_ok(r, compact, li[i].n_req)) {
            sc_node_failed(c, li[i].node, items[i].status, &items[i].err);
            down[li[i].node] = 1;
            continue;
        }
        for (size_t j = 0; j < li[i].n_req; j++) {
            uint32_t m, u;
            const uint64_t *kda;
            size_t n_kda;
            uint64_t run = 0;

            sc_answer(r, compact, j, &kda_at, &m, &u, &kda, &n_kda);
            for (size_t q = 0; q < li[i].seg_n[j]; q++) {
                run += ans[li[i].seg_k[j] + q].n_blocks;
            }
            if ((uint64_t)m + u > run) {
                sc_error(ST_ERR_PROTOCOL,
                         "lookup: a node answered %u + %u blocks of a %llu-block run", m, u,
                         (unsigned long long)run);
                for (size_t q = 0; q < li[i].seg_n[j]; q++) {
                    ans[li[i].seg_k[j] + q].answered = 0;
                }
                continue;
            }
            if (u > 0) {
                pend[n_pend] =
                    (sc_pending_t){i, j, ans[li[i].seg_k[j]].first_block, m, u, kda, n_kda};
            }
            sc_spread(ans, undecided, n_pend, li[i].seg_k, li[i].seg_n, j, m, u, kda, n_kda);
            n_pend += u > 0;
        }
    }
    /* Where the prefix would end on undecided blocks, ask their owner for
     * them with their hashes (a second, small call to one node); again if
     * that completes the run and the next undecided one ends it. */
    for (;;) {
        size_t k = 0, p;
        sc_pending_t *pd;
        uint32_t m2;
        uint64_t *kda;
        size_t n_kda;

        while (k < n_seg && ans[k].answered && ans[k].matched == ans[k].n_blocks) {
            k++;
        }
        if (k == n_seg || undecided[k] == SIZE_MAX) {
            break;
        }
        p = undecided[k];
        pd = &pend[p];
        status = sc_resolve(c, chain, &li[pd->item], pd, &m2, &kda, &n_kda);
        if (status == ST_ERR_NOMEM) {
            goto out;
        }
        if (status != ST_OK) {
            /* The owner is gone now: its run counts as unanswered. */
            down[li[pd->item].node] = 1;
            for (size_t q = 0; q < li[pd->item].seg_n[pd->seg]; q++) {
                size_t kk = li[pd->item].seg_k[pd->seg] + q;

                ans[kk].answered = 0;
                undecided[kk] = SIZE_MAX;
            }
            continue;
        }
        merged[n_merged++] = kda;
        sc_spread(ans, undecided, p, li[pd->item].seg_k, li[pd->item].seg_n, pd->seg,
                  (uint64_t)pd->matched + m2, 0, kda, n_kda);
    }
    st_compose_prefix(ans, n_seg, &prefix);
    result->matched_blocks = prefix.matched_blocks;
    result->resumable_blocks = prefix.resumable_blocks;
    for (uint32_t node = 0; node < c->n_nodes; node++) {
        result->nodes_down += down[node] || !st_ring_is_up(&c->ring, node);
    }
    result->nodes_asked = (uint32_t)n_items;
    status = ST_OK;
out:
    if (items != NULL) {
        srpc_fanout_free(items, n_items);
    }
    for (size_t i = 0; li != NULL && i < n_items; i++) {
        free(li[i].store);
        free(li[i].segs);
        free(li[i].seg_k);
        free(li[i].seg_n);
    }
    for (size_t i = 0; i < n_merged; i++) {
        free(merged[i]);
    }
    free(owner), free(per_node), free(ans), free(li), free(items), free(down), free(layer_list);
    free(undecided), free(pend), free(merged), free(probe_h), free(pool_first), free(pool_u32);
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
        int lost = 0;

        for (uint32_t i = 0; i < c->n_nodes; i++) {
            up[i] = (uint8_t)st_ring_is_up(&c->ring, i);
        }
        status = sc_lookup(c, chain, n_blocks, layers, sc_lookup_compact_on(), result);
        if (status == 1) {
            memset(result, 0, sizeof(*result));
            status = sc_lookup(c, chain, n_blocks, layers, 0, result);
        }
        for (uint32_t i = 0; i < c->n_nodes; i++) {
            lost |= up[i] && !st_ring_is_up(&c->ring, i);
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

/* ------------------------------------------------------------ get/put -- */

static st_status_t sc_check_ops(const st_hash_t *chain, size_t n_chain, uint64_t block,
                                uint8_t kind, const void *buf)
{
    if (chain == NULL || block >= n_chain || buf == NULL ||
        (kind != ST_KIND_KV && kind != ST_KIND_IDX && kind != ST_KIND_KDA)) {
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

static st_status_t sc_submit(st_client_t *c, const st_hash_t *chain, size_t n_chain,
                             st_get_op_t *gets, st_put_op_t *puts, size_t n, unsigned flags,
                             st_handle_t **handle_p)
{
    st_handle_t *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        return sc_error(ST_ERR_NOMEM, "out of memory for a handle");
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->client = c;
    h->chain = chain;
    h->n_chain = n_chain;
    h->gets = gets;
    h->puts = puts;
    h->n = n;
    h->flags = flags;
    if (puts != NULL && (h->written = calloc(n + 1, sizeof(*h->written))) == NULL) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        free(h);
        *handle_p = NULL;
        return sc_error(ST_ERR_NOMEM, "out of memory for a handle");
    }
    h->job.run = gets != NULL ? sc_run_get : sc_run_put;
    h->job.handle = h;
    *handle_p = h;
    if (gets != NULL && c->dp != NULL && sc_dp_get_now(h)) {
        sc_handle_complete(h); /* cached row reads: done here, no worker (dataplane.c) */
        return ST_OK;
    }
    sc_pool_submit(c, &h->job);
    return ST_OK;
}

st_status_t st_client_get(st_client_t *c, const st_hash_t *chain, size_t n_chain, st_get_op_t *ops,
                          size_t n, st_handle_t **handle_p)
{
    for (size_t i = 0; i < n; i++) {
        if (sc_check_ops(chain, n_chain, ops[i].block, ops[i].kind, ops[i].dst) != ST_OK ||
            (ops[i].n_rows != 0 && (ops[i].rows == NULL || ops[i].row_bytes == 0))) {
            return sc_error(ST_ERR_INVALID,
                            "get: op %zu names block %llu of a %zu-block chain, "
                            "kind %u, or has no buffer or rows",
                            i, (unsigned long long)ops[i].block, n_chain, ops[i].kind);
        }
        ops[i].status = ST_ERR_UNAVAILABLE;
        ops[i].length = 0;
    }
    return sc_submit(c, chain, n_chain, ops, NULL, n, 0, handle_p);
}

st_status_t st_client_put(st_client_t *c, const st_hash_t *chain, size_t n_chain, st_put_op_t *ops,
                          size_t n, unsigned flags, st_handle_t **handle_p)
{
    for (size_t i = 0; i < n; i++) {
        if (sc_check_ops(chain, n_chain, ops[i].block, ops[i].kind, ops[i].src) != ST_OK ||
            ops[i].len == 0) {
            return sc_error(ST_ERR_INVALID,
                            "put: op %zu names block %llu of a %zu-block chain, "
                            "kind %u, or has no bytes",
                            i, (unsigned long long)ops[i].block, n_chain, ops[i].kind);
        }
        ops[i].status = ST_ERR_UNAVAILABLE;
    }
    return sc_submit(c, chain, n_chain, NULL, ops, n, flags, handle_p);
}

/*
 * One call's worth of ops for one node. ops[] holds op indices; the request
 * is built from them when the call is issued.
 */
typedef struct sc_batch {
    uint32_t node;
    size_t *ops;
    size_t n;
    size_t bytes;
} sc_batch_t;

/* Groups the ops that still need a node (todo[i] != 0) by the rank-th
 * target of each; with split_kda, KDA ops go in batches of their own (a
 * durable put: the node may refuse durability, which must not cost the
 * other kinds their write). Returns the batches, or NULL (no memory). */
static sc_batch_t *sc_group(st_client_t *c, const st_hash_t *chain, size_t n, const uint64_t *block,
                            const uint8_t *kind, const size_t *bytes, const uint8_t *todo,
                            size_t rank, int split_kda, size_t *n_batches_p)
{
    sc_batch_t *b = calloc(n + 1, sizeof(*b));
    sc_batch_t **cur = calloc(2 * (size_t)c->n_nodes, sizeof(*cur));
    size_t nb = 0;
    size_t max_bytes = c->max_message / 2;

    if (b == NULL || cur == NULL) {
        free(b);
        free(cur);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t targets[SC_MAX_REPLICAS];
        size_t nt, slot;
        sc_batch_t *x;

        if (!todo[i]) {
            continue;
        }
        nt = sc_targets(c, chain, block[i], kind[i], targets);
        if (rank >= nt) {
            continue; /* no such replica: the op keeps its status */
        }
        slot = 2 * (size_t)targets[rank] + (split_kda && kind[i] == ST_KIND_KDA);
        x = cur[slot];
        if (x == NULL || x->n == c->max_batch || x->bytes + bytes[i] > max_bytes) {
            x = &b[nb++];
            x->node = targets[rank];
            x->ops = calloc(n, sizeof(*x->ops));
            if (x->ops == NULL) {
                for (size_t k = 0; k < nb; k++) {
                    free(b[k].ops);
                }
                free(b);
                free(cur);
                return NULL;
            }
            cur[slot] = x;
        }
        x->ops[x->n++] = i;
        x->bytes += bytes[i];
    }
    free(cur);
    *n_batches_p = nb;
    return b;
}

static void sc_free_batches(sc_batch_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(b[i].ops);
    }
    free(b);
}

/* Fills one op from a Get answer, checking the bytes against their checksum. */
static void sc_get_fill(st_get_op_t *op, const Strata__V1__InlineObject *o,
                        Strata__V1__KeyStatus ks)
{
    size_t len;

    op->status = sc_key_status(ks);
    if (op->status != ST_OK) {
        return;
    }
    len = o->data.len;
    if (XXH3_64bits(o->data.data, len) != o->checksum) {
        op->status = ST_ERR_NOT_FOUND; /* never wrong bytes: a miss */
        st_warn_ratelimited("get: checksum mismatch, treated as a miss bytes=%zu", len);
        return;
    }
    if (op->n_rows == 0) {
        if (len > op->dst_len) {
            op->status = ST_ERR_INVALID;
            op->length = len;
            return;
        }
        memcpy(op->dst, o->data.data, len);
        op->length = len;
        return;
    }
    if ((size_t)op->n_rows * op->row_bytes > op->dst_len) {
        op->status = ST_ERR_INVALID;
        return;
    }
    for (uint32_t r = 0; r < op->n_rows; r++) {
        size_t off = (size_t)op->rows[r] * op->row_bytes;

        if (off + op->row_bytes > len) {
            op->status = ST_ERR_INVALID;
            return;
        }
        memcpy((uint8_t *)op->dst + (size_t)r * op->row_bytes, o->data.data + off, op->row_bytes);
    }
    op->length = (size_t)op->n_rows * op->row_bytes;
}

void sc_run_get(sc_job_t *job)
{
    st_handle_t *h = job->handle;
    st_client_t *c = h->client;
    size_t n = h->n;
    uint64_t *block = calloc(n + 1, sizeof(*block));
    uint8_t *kind = calloc(n + 1, 1), *todo = calloc(n + 1, 1);
    size_t *bytes = calloc(n + 1, sizeof(*bytes));
    size_t ranks = c->replicas > SC_MAX_REPLICAS ? SC_MAX_REPLICAS : c->replicas;

    if (!block || !kind || !todo || !bytes) {
        for (size_t i = 0; i < n; i++) {
            h->gets[i].status = ST_ERR_NOMEM;
        }
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        block[i] = h->gets[i].block;
        kind[i] = h->gets[i].kind;
        bytes[i] = h->gets[i].dst_len + 64;
        todo[i] = 1;
    }
    if (c->dp != NULL) {
        sc_dp_get(h, todo); /* one-sided; leaves todo what the inline path must do */
    }
    /* Owners first; KDA ops that missed or failed try the next replica. */
    for (size_t rank = 0; rank < ranks; rank++) {
        size_t nb = 0;
        sc_batch_t *b = sc_group(c, h->chain, n, block, kind, bytes, todo, rank, 0, &nb);
        srpc_fanout_item_t *items;
        Strata__V1__GetRequest *reqs;
        Strata__V1__ObjectKey *keys;
        Strata__V1__ObjectKey **kp;

        if (b == NULL) {
            break;
        }
        if (nb == 0) {
            sc_free_batches(b, nb);
            break;
        }
        items = calloc(nb, sizeof(*items));
        reqs = calloc(nb, sizeof(*reqs));
        keys = calloc(n, sizeof(*keys));
        kp = calloc(n, sizeof(*kp));
        if (!items || !reqs || !keys || !kp) {
            free(items), free(reqs), free(keys), free(kp);
            sc_free_batches(b, nb);
            break;
        }
        for (size_t x = 0, k = 0; x < nb; x++) {
            strata__v1__get_request__init(&reqs[x]);
            reqs[x].namespace_id = c->ns;
            reqs[x].keys = &kp[k];
            for (size_t j = 0; j < b[x].n; j++, k++) {
                st_get_op_t *op = &h->gets[b[x].ops[j]];

                strata__v1__object_key__init(&keys[k]);
                keys[k].block_hash.data = (uint8_t *)h->chain[op->block].b;
                keys[k].block_hash.len = ST_HASH_BYTES;
                keys[k].kind = sc_kind(op->kind);
                keys[k].layer = op->kind == ST_KIND_KDA ? 0 : op->layer;
                kp[k] = &keys[k];
            }
            reqs[x].n_keys = b[x].n;
            items[x].ch = c->nodes[b[x].node].ch;
            items[x].req = &reqs[x].base;
        }
        if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_GET], items, nb, (int)c->timeout_ms) ==
            ST_OK) {
            for (size_t x = 0; x < nb; x++) {
                const Strata__V1__GetResponse *r = (const void *)items[x].resp;

                if (items[x].status != ST_OK || r->n_objects != b[x].n || r->n_status != b[x].n) {
                    sc_node_failed(c, b[x].node, items[x].status, &items[x].err);
                    continue; /* those ops stay todo, with ST_ERR_UNAVAILABLE */
                }
                for (size_t j = 0; j < b[x].n; j++) {
                    size_t i = b[x].ops[j];

                    sc_get_fill(&h->gets[i], r->objects[j], r->status[j]);
                    /* Only a KDA miss is worth asking the next replica. */
                    todo[i] =
                        h->gets[i].kind == ST_KIND_KDA && h->gets[i].status == ST_ERR_NOT_FOUND;
                }
            }
        }
        srpc_fanout_free(items, nb);
        free(items), free(reqs), free(keys), free(kp);
        sc_free_batches(b, nb);
    }
out:
    free(block), free(kind), free(todo), free(bytes);
    sc_handle_complete(h);
}

/*
 * A durable KDA object is durable only when write_quorum of its replicas
 * committed it to disk: a node that is down, failed, or has no SSD tier (it
 * refuses durable writes with UNSUPPORTED) does not count. Fewer, but some,
 * is ST_ERR_PARTIAL (logged once per batch); none keeps the last error.
 */
static void sc_put_quorum(st_handle_t *h)
{
    st_client_t *c = h->client;
    size_t partial = 0, first = 0;

    for (size_t i = 0; i < h->n; i++) {
        st_put_op_t *op = &h->puts[i];

        if (op->kind != ST_KIND_KDA || h->written[i] == 0 || h->written[i] >= c->write_quorum) {
            continue;
        }
        if (partial++ == 0) {
            first = i;
        }
        op->status = ST_ERR_PARTIAL;
    }
    if (partial > 0) {
        st_warn_ratelimited("durable KDA put on fewer replicas than write_quorum objects=%zu "
                            "first_block=%llu written=%u write_quorum=%u replicas=%u",
                            partial, (unsigned long long)h->puts[first].block, h->written[first],
                            c->write_quorum, c->replicas);
    }
}

void sc_run_put(sc_job_t *job)
{
    st_handle_t *h = job->handle;
    st_client_t *c = h->client;
    size_t n = h->n;
    uint64_t *block = calloc(n + 1, sizeof(*block));
    uint8_t *kind = calloc(n + 1, 1), *todo = calloc(n + 1, 1);
    size_t *bytes = calloc(n + 1, sizeof(*bytes));
    uint8_t *acked = calloc(n + 1, 1);
    size_t ranks = c->replicas > SC_MAX_REPLICAS ? SC_MAX_REPLICAS : c->replicas;
    int durable = (h->flags & ST_PUT_DURABLE) != 0;

    if (!block || !kind || !todo || !bytes || !acked) {
        for (size_t i = 0; i < n; i++) {
            h->puts[i].status = ST_ERR_NOMEM;
        }
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        block[i] = h->puts[i].block;
        kind[i] = h->puts[i].kind;
        bytes[i] = h->puts[i].len + 96;
        todo[i] = 1;
    }
    if (c->dp != NULL) {
        sc_dp_put(h, todo, acked); /* one-sided at the owners; the rest below */
        for (size_t i = 0; i < n; i++) {
            h->written[i] = acked[i];
        }
    }
    /* Rank 0 is every op's owner; ranks above it are KDA replicas. */
    for (size_t rank = 0; rank < ranks; rank++) {
        size_t nb = 0;
        sc_batch_t *b = sc_group(c, h->chain, n, block, kind, bytes, todo, rank, durable, &nb);
        srpc_fanout_item_t *items;
        Strata__V1__PutRequest *reqs;
        Strata__V1__InlineObject *objs, **op_p;
        Strata__V1__ObjectKey *keys;
        Strata__V1__BlockLink *links, **lp;

        if (b == NULL) {
            break;
        }
        if (nb == 0) {
            sc_free_batches(b, nb);
            if (rank == 0 && c->dp != NULL) {
                for (size_t k = 0; k < n; k++) {
                    todo[k] = kind[k] == ST_KIND_KDA;
                }
                continue; /* the owners were written one-sided */
            }
            break;
        }
        items = calloc(nb, sizeof(*items));
        reqs = calloc(nb, sizeof(*reqs));
        objs = calloc(n, sizeof(*objs));
        op_p = calloc(n, sizeof(*op_p));
        keys = calloc(n, sizeof(*keys));
        links = calloc(n, sizeof(*links));
        lp = calloc(n, sizeof(*lp));
        if (!items || !reqs || !objs || !op_p || !keys || !links || !lp) {
            free(items), free(reqs), free(objs), free(op_p), free(keys), free(links), free(lp);
            sc_free_batches(b, nb);
            break;
        }
        for (size_t x = 0, k = 0, nl = 0; x < nb; x++) {
            strata__v1__put_request__init(&reqs[x]);
            reqs[x].namespace_id = c->ns;
            reqs[x].objects = &op_p[k];
            reqs[x].links = &lp[nl];
            reqs[x].n_links = 0;
            reqs[x].durable = 0;
            for (size_t j = 0; j < b[x].n; j++, k++) {
                st_put_op_t *op = &h->puts[b[x].ops[j]];

                /* Durable is asked for where it means something: the requests of KDA
                 * objects (the one kind written through; sc_group keeps them apart), so
                 * that KV and IDX objects of a durable batch still go to a node without
                 * an SSD tier. */
                reqs[x].durable |= durable && op->kind == ST_KIND_KDA;
                const st_hash_t *hash = &h->chain[op->block];

                strata__v1__object_key__init(&keys[k]);
                keys[k].block_hash.data = (uint8_t *)hash->b;
                keys[k].block_hash.len = ST_HASH_BYTES;
                keys[k].kind = sc_kind(op->kind);
                keys[k].layer = op->kind == ST_KIND_KDA ? 0 : op->layer;
                strata__v1__inline_object__init(&objs[k]);
                objs[k].key = &keys[k];
                objs[k].data.data = (uint8_t *)op->src;
                objs[k].data.len = op->len;
                objs[k].checksum = XXH3_64bits(op->src, op->len);
                objs[k].row_bytes =
                    op->kind == ST_KIND_KV || op->kind == ST_KIND_IDX ? op->row_bytes : 0;
                op_p[k] = &objs[k];
                /* One link per block: the ops of a block are usually adjacent. */
                if (j > 0 && h->puts[b[x].ops[j - 1]].block == op->block) {
                    continue;
                }
                strata__v1__block_link__init(&links[nl]);
                links[nl].hash = keys[k].block_hash;
                links[nl].parent_hash.data =
                    (uint8_t *)(op->block == 0 ? c->seed.b : h->chain[op->block - 1].b);
                links[nl].parent_hash.len = ST_HASH_BYTES;
                links[nl].block_index = op->block;
                lp[nl] = &links[nl];
                nl++;
                reqs[x].n_links++;
            }
            reqs[x].n_objects = b[x].n;
            items[x].ch = c->nodes[b[x].node].ch;
            items[x].req = &reqs[x].base;
        }
        if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_PUT], items, nb, (int)c->timeout_ms) ==
            ST_OK) {
            for (size_t x = 0; x < nb; x++) {
                const Strata__V1__PutResponse *r = (const void *)items[x].resp;

                if (items[x].status != ST_OK || r->n_status != b[x].n) {
                    sc_node_failed(c, b[x].node, items[x].status, &items[x].err);
                    for (size_t j = 0; j < b[x].n && items[x].status != ST_OK; j++) {
                        size_t i = b[x].ops[j];

                        if (!acked[i]) {
                            h->puts[i].status = items[x].status;
                        }
                    }
                    continue;
                }
                for (size_t j = 0; j < b[x].n; j++) {
                    size_t i = b[x].ops[j];
                    st_status_t st = sc_key_status(r->status[j]);

                    if (st == ST_OK) {
                        acked[i] = 1;
                        h->puts[i].status = ST_OK;
                        h->written[i]++;
                    } else if (!acked[i]) {
                        h->puts[i].status = st;
                    }
                }
            }
        }
        srpc_fanout_free(items, nb);
        free(items), free(reqs), free(objs), free(op_p), free(keys), free(links), free(lp);
        sc_free_batches(b, nb);
        /* Only KDA objects go on to the next replica. */
        for (size_t i = 0; i < n; i++) {
            todo[i] = kind[i] == ST_KIND_KDA;
        }
    }
    if (durable) {
        sc_put_quorum(h);
    }
out:
    free(block), free(kind), free(todo), free(bytes), free(acked);
    sc_handle_complete(h);
}

/* ---------------------------------------------------- pin/unpin/delete -- */

static st_status_t sc_pin_common(st_client_t *c, const st_hash_t *chain, size_t n_blocks, int pin)
{
    uint32_t S = c->segment_blocks;
    st_status_t first = ST_OK;

    for (size_t k = 0; k * S < n_blocks; k++) {
        int node = sc_owner(c, &chain[k * S]);
        size_t nb = n_blocks - k * S < S ? n_blocks - k * S : S;
        srpc_error_t err;
        void *resp = NULL;
        st_status_t st;

        if (node < 0) {
            return sc_error(ST_ERR_UNAVAILABLE, "every node is down");
        }
        if (pin) {
            Strata__V1__PinRequest req = STRATA__V1__PIN_REQUEST__INIT;

            req.namespace_id = c->ns;
            req.block_hashes.data = (uint8_t *)chain[k * S].b;
            req.block_hashes.len = nb * ST_HASH_BYTES;
            st = srpc_call(c->nodes[node].ch, &srpc_cache_methods[SRPC_CACHE_PIN], &req.base,
                           (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err);
        } else {
            Strata__V1__UnpinRequest req = STRATA__V1__UNPIN_REQUEST__INIT;

            req.namespace_id = c->ns;
            req.block_hashes.data = (uint8_t *)chain[k * S].b;
            req.block_hashes.len = nb * ST_HASH_BYTES;
            st = srpc_call(c->nodes[node].ch, &srpc_cache_methods[SRPC_CACHE_UNPIN], &req.base,
                           (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err);
        }
        if (st != ST_OK) {
            sc_node_failed(c, (uint32_t)node, st, &err);
            if (first == ST_OK) {
                first = sc_error(st, "%s on %s: %s", pin ? "pin" : "unpin", c->nodes[node].addr,
                                 err.message);
            }
            continue;
        }
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return first;
}

st_status_t st_client_pin(st_client_t *c, const st_hash_t *chain, size_t n_blocks)
{
    return sc_pin_common(c, chain, n_blocks, 1);
}

st_status_t st_client_unpin(st_client_t *c, const st_hash_t *chain, size_t n_blocks)
{
    return sc_pin_common(c, chain, n_blocks, 0);
}

st_status_t st_client_delete(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             unsigned kinds, uint32_t n_layers)
{
    uint32_t S = c->segment_blocks;
    st_status_t first = ST_OK;
    Strata__V1__ObjectKind kl[3];
    uint32_t layers[128], zero = 0;
    size_t nk = 0;

    if (n_layers > 128) {
        return sc_error(ST_ERR_INVALID, "delete: n_layers > 128");
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        layers[l] = l;
    }
    for (uint8_t k = ST_KIND_KV; k <= ST_KIND_KDA; k++) {
        if (kinds & (1u << k)) {
            kl[nk++] = sc_kind(k);
        }
    }
    for (size_t k = 0; k * S < n_blocks; k++) {
        uint32_t nodes[SC_MAX_REPLICAS];
        size_t nt = st_ring_place(&c->ring, &chain[k * S], nodes,
                                  c->replicas < SC_MAX_REPLICAS ? c->replicas : SC_MAX_REPLICAS);
        size_t nb = n_blocks - k * S < S ? n_blocks - k * S : S;

        for (size_t t = 0; t < nt; t++) {
            for (size_t kk = 0; kk < nk; kk++) {
                Strata__V1__DeleteRequest req = STRATA__V1__DELETE_REQUEST__INIT;
                Strata__V1__KeyGrid grid = STRATA__V1__KEY_GRID__INIT;
                int kda = kl[kk] == STRATA__V1__OBJECT_KIND__KDA;
                srpc_error_t err;
                void *resp = NULL;
                st_status_t st;

                if (t > 0 && !kda) {
                    continue; /* only KDA objects have replicas */
                }
                grid.block_hashes.data = (uint8_t *)chain[k * S].b;
                grid.block_hashes.len = nb * ST_HASH_BYTES;
                grid.kinds = &kl[kk];
                grid.n_kinds = 1;
                grid.layers = kda ? &zero : layers;
                grid.n_layers = kda ? 1 : n_layers;
                if (grid.n_layers == 0) {
                    continue;
                }
                req.namespace_id = c->ns;
                req.grid = &grid;
                st = srpc_call(c->nodes[nodes[t]].ch, &srpc_cache_methods[SRPC_CACHE_DELETE],
                               &req.base, (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err);
                if (st != ST_OK) {
                    sc_node_failed(c, nodes[t], st, &err);
                    if (first == ST_OK) {
                        first =
                            sc_error(st, "delete on %s: %s", c->nodes[nodes[t]].addr, err.message);
                    }
                    continue;
                }
                protobuf_c_message_free_unpacked(resp, NULL);
            }
        }
    }
    return first;
}
