/*
 * dp_put.c - a put batch over the data plane (dp_internal.h), in phases
 * over one batch record (sc_dpp_t):
 *
 *   classify  the owner of each op (a durable KDA object goes inline)
 *   plan      requests by node, and their Reserve requests
 *   reserve   the Reserve fan-out
 *   post      one put per reserved object, through the reservation's write
 *             key where the node enforces keys
 *   settle    every put waited for (endpoints closed on those that never
 *             complete), each node flushed, the write keys destroyed
 *   commit    the Commit fan-out with each object's XXH3-64 (a failed put
 *             gets one that cannot match, so the daemon frees its extent)
 *   close     what the batch holds freed
 */
#include "dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
/* Checksums of whole objects run at memory speed over every byte written:
 * libxxhash's runtime dispatch where it has one (xxh.h). */
#include "xxh.h"

/* A put batch: its ops, their requests, reservations and commits. */
typedef struct sc_dpp {
    st_handle_t *h;
    st_client_t *c;
    sc_dp_t *dp;
    uint8_t *todo;  /* per op: what the inline path must still do */
    uint8_t *acked; /* per op: stored at its owner */
    size_t n;
    _Atomic size_t pending; /* transfers in flight */
    sc_dp_op_t *ops;        /* per op: owner, reservation, transfer */
    size_t *perm;           /* the ops in request order */
    sc_dp_req_t *req;       /* per request: node, ops */
    size_t nb;
    struct sc_dpp_msg {
        Strata__V1__ReserveRequest reserve; /* request b's */
        Strata__V1__CommitRequest commit;   /* commit k's */
    } * msg;
    srpc_fanout_item_t *items;  /* per request: its Reserve call */
    srpc_fanout_item_t *citems; /* per commit: its Commit call */
    size_t *cwhich, nc;         /* commit k is request cwhich[k] */
    /* Per op, in request order: the fields of the requests. */
    struct sc_dpp_obj {
        Strata__V1__ObjectKey key;
        Strata__V1__BlockLink link;
    } * obj;
    Strata__V1__ObjectKey **kp;
    Strata__V1__BlockLink **lp;
    uint64_t *lengths, *sums;
    uint32_t *rowb;
} sc_dpp_t;

/* The per-op state of p; 0 when out of memory (everything stays todo). */
static int sc_dpp_open(sc_dpp_t *p, st_handle_t *h, uint8_t *todo, uint8_t *acked)
{
    memset(p, 0, sizeof(*p));
    p->h = h;
    p->c = h->client;
    p->dp = p->c->dp;
    p->todo = todo;
    p->acked = acked;
    p->n = h->n;
    p->ops = calloc(p->n + 1, sizeof(*p->ops));
    p->perm = calloc(p->n + 1, sizeof(*p->perm));
    p->req = calloc(p->n + 1, sizeof(*p->req));
    return p->ops != NULL && p->perm != NULL && p->req != NULL;
}

/* The owner of each op; ops with none are todo. */
static void sc_dpp_classify(sc_dpp_t *p)
{
    const st_handle_t *h = p->h;

    for (size_t i = 0; i < p->n; i++) {
        /* A durable KDA object goes inline (Put): a Reserve that finds the object already
         * there answers KEY_EXISTS, which says nothing of whether it is on disk, while a
         * durable Put of the same bytes writes it through before answering. */
        int inline_only = (h->flags & ST_PUT_DURABLE) && h->puts[i].kind == ST_KIND_KDA;

        p->ops[i].owner = inline_only ? -1 : sc_dp_owner(p->c, h->chain, h->puts[i].block);
        p->todo[i] = p->ops[i].owner < 0;
        p->ops[i].pending = &p->pending;
    }
}

/* Request b's Reserve: its ops' keys, lengths and row sizes, and the links
 * of their blocks (one per block). */
static void sc_dpp_request(sc_dpp_t *p, size_t b)
{
    const sc_dp_req_t *q = &p->req[b];
    Strata__V1__ReserveRequest *m = &p->msg[b].reserve;
    const st_handle_t *h = p->h;

    strata__v1__reserve_request__init(m);
    m->namespace_id = p->c->ns;
    m->keys = &p->kp[q->first];
    m->n_keys = q->count;
    m->lengths = &p->lengths[q->first];
    m->n_lengths = q->count;
    m->links = &p->lp[q->first];
    m->row_bytes = &p->rowb[q->first];
    m->n_row_bytes = q->count;
    for (size_t j = q->first; j < q->first + q->count; j++) {
        const st_put_op_t *op = &h->puts[p->perm[j]];
        Strata__V1__BlockLink *link = &p->obj[j].link;
        int dup = 0;

        sc_dp_key(&p->obj[j].key, &h->chain[op->block], op->kind, op->layer);
        p->kp[j] = &p->obj[j].key;
        p->lengths[j] = op->len;
        p->rowb[j] = op->kind == ST_KIND_KV || op->kind == ST_KIND_IDX ? op->row_bytes : 0;
        for (size_t k = q->first; k < j && !dup; k++) {
            dup = h->puts[p->perm[k]].block == op->block;
        }
        if (dup) {
            continue;
        }
        strata__v1__block_link__init(link);
        link->hash = p->obj[j].key.block_hash;
        link->parent_hash.data =
            (uint8_t *)(op->block == 0 ? p->c->seed.b : h->chain[op->block - 1].b);
        link->parent_hash.len = ST_HASH_BYTES;
        link->block_index = op->block;
        p->lp[q->first + m->n_links++] = link;
    }
    p->items[b].ch = p->c->nodes[q->node].ch;
    p->items[b].req = &m->base;
}

/* Cuts the ops into requests by node and writes their Reserves. Returns 0
 * when there is nothing to put here (or no memory: then every op is todo). */
static int sc_dpp_plan(sc_dpp_t *p)
{
    size_t n = p->n, nb;

    nb = sc_dp_batches(p->c, p->ops, n, p->perm, p->req);
    if (nb == 0) {
        return 0;
    }
    p->msg = calloc(nb, sizeof(*p->msg));
    p->items = calloc(nb, sizeof(*p->items));
    p->citems = calloc(nb, sizeof(*p->citems));
    p->cwhich = calloc(nb, sizeof(*p->cwhich));
    p->obj = calloc(n, sizeof(*p->obj));
    p->kp = calloc(n, sizeof(*p->kp));
    p->lp = calloc(n, sizeof(*p->lp));
    p->lengths = calloc(n, sizeof(*p->lengths));
    p->sums = calloc(n, sizeof(*p->sums));
    p->rowb = calloc(n, sizeof(*p->rowb));
    if (!p->msg || !p->items || !p->citems || !p->cwhich || !p->obj || !p->kp || !p->lp ||
        !p->lengths || !p->sums || !p->rowb) {
        memset(p->todo, 1, n);
        return 0;
    }
    p->nb = nb;
    for (size_t b = 0; b < nb; b++) {
        sc_dpp_request(p, b);
    }
    return 1;
}

/* The Reserve fan-out; 0 when it failed as a whole (every op is todo). */
static int sc_dpp_reserve(sc_dpp_t *p)
{
    if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_RESERVE], p->items, p->nb, sc_left_ms(p->h)) !=
        ST_OK) {
        memset(p->todo, 1, p->n);
        return 0;
    }
    return 1;
}

/* Puts op i, entry j of request b's reservation (r, extents l). Node lock held. */
static void sc_dpp_post_one(sc_dpp_t *p, size_t b, size_t j, int *refreshed)
{
    const Strata__V1__ReserveResponse *r = (const void *)p->items[b].resp;
    const Strata__V1__Locations *l = r->extents;
    uint32_t node = p->req[b].node;
    sc_dp_t *dp = p->dp;
    sc_dp_node_t *nd = &dp->node[node];
    size_t i = p->perm[p->req[b].first + j];
    st_put_op_t *op = &p->h->puts[i];
    sc_dp_op_t *o = &p->ops[i];
    sc_dp_region_t *reg;
    tp_mem_t *mem;
    st_status_t st = pk_key_status_to_status(r->status[j]);

    if (st == ST_ERR_EXISTS) {
        op->status = ST_OK; /* the block's object is there already */
        p->acked[i] = 1;
        return;
    }
    if (st != ST_OK) {
        op->status = st;
        return;
    }
    o->posted = 1; /* has a reservation: commit or refuse it */
    reg = sc_dp_region(p->c, node, l->region_id[j], r->region_epoch, refreshed, sc_left_ms(p->h));
    if (reg == NULL || l->offset[j] + op->len > reg->len) {
        o->failed = 1;
        return;
    }
    pthread_mutex_lock(&dp->lock);
    mem = sc_dp_local(dp, o, (void *)op->src, op->len);
    /* Where the node enforces keys, the region's key is read-only: the
     * extent is written through its reservation's own key. */
    st = ST_OK;
    if (r->n_write_rkeys == p->req[b].count && r->write_rkeys[j].len > 0) {
        st = tp_rkey_unpack(nd->ep, r->write_rkeys[j].data, r->write_rkeys[j].len, &o->wkey);
        o->wkey_resets = nd->resets;
    } else if (nd->committed_ro) {
        st = ST_ERR_PROTOCOL; /* a read-only region and no write key */
    }
    atomic_fetch_add(&p->pending, 1);
    st = mem == NULL   ? ST_ERR_NOMEM
         : st != ST_OK ? st
                       : tp_put(nd->ep, op->src, op->len, mem, reg->base + l->offset[j],
                                o->wkey != NULL ? o->wkey : reg->rkey, sc_dp_done, o);
    if (st != ST_OK) {
        atomic_fetch_sub(&p->pending, 1);
        o->failed = 1;
    }
    pthread_mutex_unlock(&dp->lock);
    o->node = node;
}

/* Whether the Reserve of request q answered with an extent for each op. */
static int sc_dpp_reserved(const sc_dp_req_t *q, const srpc_fanout_item_t *it)
{
    const Strata__V1__ReserveResponse *r = (const void *)it->resp;
    const Strata__V1__Locations *l = r != NULL ? r->extents : NULL;

    return it->status == ST_OK && l != NULL && r->n_status == q->count &&
           l->n_region_id == q->count && l->n_offset == q->count;
}

/* Posts the puts of every request whose Reserve answered; the ops of the
 * others fail with its status. */
static void sc_dpp_post(sc_dpp_t *p)
{
    for (size_t b = 0; b < p->nb; b++) {
        const sc_dp_req_t *q = &p->req[b];
        sc_dp_node_t *nd = &p->dp->node[q->node];
        int refreshed = 0;

        if (!sc_dpp_reserved(q, &p->items[b])) {
            st_status_t st = p->items[b].status;

            sc_node_failed(p->c, q->node, st, &p->items[b].err);
            for (size_t j = 0; j < q->count; j++) {
                p->h->puts[p->perm[q->first + j]].status = st != ST_OK ? st : ST_ERR_PROTOCOL;
            }
            continue;
        }
        pthread_mutex_lock(&nd->lock);
        for (size_t j = 0; j < q->count; j++) {
            sc_dpp_post_one(p, b, j, &refreshed);
        }
        pthread_mutex_unlock(&nd->lock);
    }
}

/*
 * Puts that never complete: a provider that drops a write it refused
 * (libfabric shm, through a write key the daemon revoked because the
 * reservation expired) never reports them. Closing the endpoints of the
 * batch's nodes cancels them (their callbacks run: failed); a node connects
 * again at its next Hello.
 */
static void sc_dpp_cancel(sc_dpp_t *p)
{
    lg_warn_ratelimited("dataplane: puts still in flight at the call's deadline (timeout %u "
                        "ms): closing the endpoints of the batch's nodes",
                        p->c->timeout_ms);
    for (size_t b = 0; b < p->nb; b++) {
        sc_dp_node_t *nd = &p->dp->node[p->req[b].node];

        pthread_mutex_lock(&nd->lock);
        pthread_mutex_lock(&p->dp->lock);
        if (nd->ep != NULL) {
            sc_dp_node_abort(nd);
            nd->tcalls = 0;
        }
        pthread_mutex_unlock(&p->dp->lock);
        pthread_mutex_unlock(&nd->lock);
    }
    sc_dp_wait(p->dp, &p->pending);
    sc_dp_settle(p->dp);
}

/* Flushes request b's node (the bytes are in the daemon's memory only
 * after a flush) and destroys the write keys of its ops. */
static void sc_dpp_flush(sc_dpp_t *p, size_t b)
{
    const sc_dp_req_t *q = &p->req[b];
    sc_dp_node_t *nd = &p->dp->node[q->node];
    st_status_t st;

    pthread_mutex_lock(&nd->lock);
    pthread_mutex_lock(&p->dp->lock);
    /* No endpoint: it was closed under this batch's puts (sc_dpp_cancel). */
    st = nd->ep != NULL ? tp_ep_flush(nd->ep, sc_left_ms(p->h)) : ST_ERR_UNAVAILABLE;
    /* Flushed (or given up): the write keys go; the daemon revokes them at
     * Commit anyway. */
    for (size_t j = 0; j < q->count; j++) {
        sc_dp_op_t *o = &p->ops[p->perm[q->first + j]];

        if (o->wkey != NULL && o->wkey_resets == nd->resets) {
            tp_rkey_destroy(o->wkey); /* else its endpoint's close did */
        }
        o->wkey = NULL;
    }
    pthread_mutex_unlock(&p->dp->lock);
    pthread_mutex_unlock(&nd->lock);
    for (size_t j = 0; st != ST_OK && j < q->count; j++) {
        p->ops[p->perm[q->first + j]].failed = 1;
    }
}

/* Waits for every put, then flushes each node that took some. */
static void sc_dpp_settle(sc_dpp_t *p)
{
    if (sc_dp_wait_until(p->dp, &p->pending, p->h->deadline_ns) != ST_OK) {
        sc_dpp_cancel(p);
    }
    for (size_t b = 0; b < p->nb; b++) {
        if (p->items[b].status == ST_OK) {
            sc_dpp_flush(p, b);
        }
    }
}

/* The Commit of request b's reservation, as commit p->nc. */
static void sc_dpp_commit_request(sc_dpp_t *p, size_t b, uint64_t reservation)
{
    const sc_dp_req_t *q = &p->req[b];
    Strata__V1__CommitRequest *m = &p->msg[p->nc].commit;

    strata__v1__commit_request__init(m);
    m->namespace_id = p->c->ns;
    m->reservation_id = reservation;
    m->checksums = &p->sums[q->first];
    m->n_checksums = q->count;
    m->durable = 0; /* durable KDA objects went inline (classify); none here */
    for (size_t j = q->first; j < q->first + q->count; j++) {
        const st_put_op_t *op = &p->h->puts[p->perm[j]];

        p->sums[j] = p->ops[p->perm[j]].posted ? XXH3_64bits(op->src, op->len) : 0;
        if (p->ops[p->perm[j]].failed) {
            p->sums[j] = ~p->sums[j];
        }
    }
    p->citems[p->nc].ch = p->c->nodes[q->node].ch;
    p->citems[p->nc].req = &m->base;
    p->cwhich[p->nc++] = b;
}

/* Commit: a failed put gets a checksum that cannot match its bytes, so the
 * daemon refuses it and frees the extent. Sets each reserved op's status. */
static void sc_dpp_commit(sc_dpp_t *p)
{
    for (size_t b = 0; b < p->nb; b++) {
        const Strata__V1__ReserveResponse *r = (const void *)p->items[b].resp;

        if (p->items[b].status == ST_OK && r->reservation_id != 0) {
            sc_dpp_commit_request(p, b, r->reservation_id);
        }
    }
    if (p->nc == 0 || srpc_fanout(&srpc_cache_methods[SRPC_CACHE_COMMIT], p->citems, p->nc,
                                  sc_left_ms(p->h)) != ST_OK) {
        return;
    }
    for (size_t k = 0; k < p->nc; k++) {
        const Strata__V1__CommitResponse *cr = (const void *)p->citems[k].resp;
        const sc_dp_req_t *q = &p->req[p->cwhich[k]];

        if (p->citems[k].status != ST_OK || cr->n_status != q->count) {
            sc_node_failed(p->c, q->node, p->citems[k].status, &p->citems[k].err);
            continue;
        }
        for (size_t j = 0; j < q->count; j++) {
            size_t i = p->perm[q->first + j];

            if (!p->ops[i].posted) {
                continue;
            }
            p->h->puts[i].status =
                p->ops[i].failed ? ST_ERR_UNAVAILABLE : pk_key_status_to_status(cr->status[j]);
            p->acked[i] = p->h->puts[i].status == ST_OK;
        }
    }
}

/* Frees what p holds. */
static void sc_dpp_close(sc_dpp_t *p)
{
    if (p->citems != NULL) {
        srpc_fanout_free(p->citems, p->nc);
    }
    if (p->items != NULL) {
        srpc_fanout_free(p->items, p->nb);
    }
    if (p->ops != NULL) {
        sc_dp_free_tmp(p->dp, p->ops, p->n);
    }
    free(p->ops), free(p->perm), free(p->req), free(p->msg), free(p->items), free(p->citems);
    free(p->cwhich), free(p->obj), free(p->kp), free(p->lp), free(p->lengths), free(p->sums);
    free(p->rowb);
}

void sc_dp_put(st_handle_t *h, uint8_t *todo, uint8_t *acked)
{
    sc_dpp_t p;

    if (sc_dpp_open(&p, h, todo, acked)) {
        sc_dpp_classify(&p);
        if (sc_dpp_plan(&p) && sc_dpp_reserve(&p)) {
            sc_dpp_post(&p);
            sc_dpp_settle(&p);
            sc_dpp_commit(&p);
        }
    }
    sc_dpp_close(&p);
}
