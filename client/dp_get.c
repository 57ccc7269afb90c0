/*
 * dp_get.c - a get batch over the data plane (dp_internal.h), in phases
 * over one batch record (sc_dpg_t):
 *
 *   classify  the owner of each op; ops whose location is in the lease
 *             cache skip the Locate
 *   plan      the other ops cut into requests by node and wave, and their
 *             Locate requests
 *   locate    the first waves' Locates on this thread, the rest queued for
 *             the locator threads
 *   post      each request's answer taken as its wave comes in and its gets
 *             posted; then the gets of the cached ops
 *   settle    every transfer waited for, the leases released in the
 *             background, whole objects verified, each op decided
 *   close     what the batch holds freed
 *
 * sc_dp_get_now() reads a batch of cached rows on the calling thread.
 */
#include "dp_internal.h"

#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "log.h"
#include "tcall.h"

/* A get batch: its ops, their requests and waves, and their answers. */
typedef struct sc_dpg {
    st_handle_t *h;
    st_client_t *c;
    sc_dp_t *dp;
    uint8_t *todo; /* per op: what the inline path must still do */
    size_t n;
    _Atomic size_t pending; /* transfers in flight */
    sc_dp_op_t *ops;        /* per op: owner, lease-cache entry, transfers, verdict */
    uint64_t *rsum;         /* the rows' sums (ops[i].rsum point into it); NULL: none */
    size_t n_cached;        /* ops posted from the lease cache */
    size_t *perm;           /* the ops in request order */
    sc_dp_req_t *req;       /* per request: node, wave, ops, lease */
    size_t nb;
    Strata__V1__LocateRequest *msg;    /* per request */
    srpc_fanout_item_t *items;         /* per request: its call and answer */
    Strata__V1__ObjectKey *keys, **kp; /* per op, in request order */
    sc_dp_loc_t *loc;                  /* per wave: its Locate fan-out */
    size_t nw;
    sc_dp_post_t *plist; /* a request's whole objects waiting to be posted */
    size_t np;
    sc_fan_t fan; /* the first waves' fan-out over the transport (fan_on) */
    int fan_on, fan_ok;
    int late; /* the call's deadline passed with transfers in flight (sc_dpg_abort) */
} sc_dpg_t;

/* One buffer with room for a sum per row of every op of the batch (NULL
 * when there is no memory: no row can be verified, the rows are read
 * inline); ops[i].rsum point into it. The caller frees it. */
static uint64_t *sc_dp_rsum_room(const st_get_op_t *gets, sc_dp_op_t *ops, size_t n)
{
    size_t total = 0;
    uint64_t *buf;

    for (size_t i = 0; i < n; i++) {
        total += gets[i].n_rows;
    }
    buf = total > 0 ? malloc(sizeof(*buf) * total) : NULL;
    for (size_t i = 0, at = 0; buf != NULL && i < n; at += gets[i++].n_rows) {
        ops[i].rsum = buf + at;
    }
    return buf;
}

/* The lease-cache entry of op (read at owner) into o->ce: 1 on a hit. Rows
 * are a hit only with the sums they are verified by (o->has_rsum). */
static int sc_dp_cache_find(sc_dp_t *dp, const st_handle_t *h, uint32_t owner,
                            const st_get_op_t *op, sc_dp_op_t *o, uint64_t now)
{
    const st_get_op_t *rows = op->n_rows > 0 && !dp->rows_unverified ? op : NULL;
    int hit = sc_lc_find(&dp->lc, owner, &h->chain[op->block], op->kind, op->layer,
                         now - (uint64_t)dp->row_slow_ns, rows, o->rsum, &o->ce);

    if (rows != NULL) {
        o->has_rsum = (uint8_t)hit;
    }
    return hit;
}

/* Forgets op's lease-cache entry. */
static void sc_dp_cache_drop(sc_dp_t *dp, const st_handle_t *h, const st_get_op_t *op)
{
    sc_lc_drop(&dp->lc, &h->chain[op->block], op->kind, op->layer);
}

/* Entry j of a Locate answer of n entries carries the row sums of a row
 * read op of an object of len bytes: their sums into rsum (as
 * sc_rows_sums). */
static int sc_dp_located_sums(const Strata__V1__Locations *l, size_t j, size_t n,
                              const st_get_op_t *op, uint64_t len, uint64_t *rsum)
{
    uint64_t groups = pr_rowsum_groups(len, op->row_bytes, PR_ROW_GROUP);

    if (l->n_row_group != n || l->n_row_sums != n || l->n_row_bytes != n ||
        l->row_group[j] != PR_ROW_GROUP || l->row_bytes[j] != op->row_bytes ||
        l->row_sums[j].len != groups * 8) {
        return 0;
    }
    return sc_rows_sums(op, l->row_bytes[j], l->row_sums[j].data, groups, rsum);
}

/* Closes at once the endpoints of the nodes ops[0, n) posted to (the call's
 * deadline passed with transfers in flight): the transfers are cancelled,
 * their callbacks run, and none lands after this returned (tp_ep_abort). */
static void sc_dp_abort(st_client_t *c, sc_dp_op_t *ops, size_t n, _Atomic size_t *pending)
{
    sc_dp_t *dp = c->dp;
    uint8_t seen[SC_MAX_NODES] = {0};
    uint64_t t0 = cm_mono_ns();
    unsigned closed = 0;

    for (size_t i = 0; i < n; i++) {
        sc_dp_node_t *nd;

        if (!ops[i].posted || ops[i].node >= SC_MAX_NODES || seen[ops[i].node]) {
            continue;
        }
        seen[ops[i].node] = 1;
        nd = &dp->node[ops[i].node];
        pthread_mutex_lock(&nd->lock);
        pthread_mutex_lock(&dp->lock);
        if (nd->ep != NULL) {
            sc_dp_node_abort(nd);
            nd->tcalls = 0;
            closed++;
        }
        pthread_mutex_unlock(&dp->lock);
        pthread_mutex_unlock(&nd->lock);
    }
    sc_dp_wait(dp, pending); /* every callback ran in the aborts */
    sc_dp_settle(dp);        /* and the transport let go of every cancelled read */
    lg_warn_ratelimited("get: one-sided reads still in flight at the call's deadline (timeout "
                        "%u ms): closed the endpoints of %u nodes in %.1f ms",
                        c->timeout_ms, closed, (double)(cm_mono_ns() - t0) / 1e6);
}

/* ------------------------------------------------ reads on this thread -- */

/* Whether every op of h is a row read in the lease cache (then each has its
 * entry in ops[i].ce and its sums in ops[i].rsum). */
static int sc_dp_now_cached(st_handle_t *h, sc_dp_op_t *ops)
{
    st_client_t *c = h->client;
    uint64_t now = cm_mono_ns();

    for (size_t i = 0; i < h->n; i++) {
        const st_get_op_t *op = &h->gets[i];
        int owner = sc_dp_owner(c, h->chain, op->block);

        if (owner < 0 || !sc_dp_cache_find(c->dp, h, (uint32_t)owner, op, &ops[i], now)) {
            return 0;
        }
    }
    return 1;
}

/* Posts and lands the cached rows of h; whether all landed, under their
 * lease, and match their sums. */
static int sc_dp_now_read(st_handle_t *h, sc_dp_op_t *ops, _Atomic size_t *pending)
{
    sc_dp_t *dp = h->client->dp;
    size_t n = h->n, i;
    uint64_t now;
    int ok = 1;

    for (i = 0; ok && i < n; i++) {
        ops[i].pending = pending;
        ok = sc_dp_post_cached(h->client, &h->gets[i], &ops[i], &ops[i].ce) &&
             h->gets[i].status == ST_OK;
    }
    /* What was posted, whatever happens next, up to the call's deadline. */
    if (sc_dp_wait_until(dp, pending, h->deadline_ns) != ST_OK) {
        sc_dp_abort(h->client, ops, n, pending);
        return 0;
    }
    now = cm_mono_ns() - (uint64_t)dp->row_slow_ns;
    for (i = 0; ok && i < n; i++) {
        ok = ops[i].posted && !ops[i].failed && now < ops[i].expiry_ns;
    }
    for (i = 0; ok && i < n; i++) {
        if (!sc_dp_rows_ok(dp, &h->gets[i], &ops[i])) {
            ok = 0; /* the worker locates it again, and reads it inline if it fails again */
            sc_dp_cache_drop(dp, h, &h->gets[i]);
        }
    }
    return ok;
}

int sc_dp_get_now(st_handle_t *h)
{
    sc_dp_t *dp = h->client->dp;
    size_t n = h->n, i;
    sc_dp_op_t *ops;
    uint64_t *rsum;
    _Atomic size_t pending = 0;
    int ok;

    if (dp == NULL || n == 0 || n > SC_DP_NOW_MAX) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (h->gets[i].n_rows == 0) {
            return 0; /* whole objects: Locate and checksums, on a worker */
        }
    }
    ops = calloc(n, sizeof(*ops));
    rsum = ops != NULL ? sc_dp_rsum_room(h->gets, ops, n) : NULL;
    if (ops == NULL || rsum == NULL) {
        free(ops), free(rsum);
        return 0;
    }
    ok = sc_dp_now_cached(h, ops) && sc_dp_now_read(h, ops, &pending);
    sc_dp_free_tmp(dp, ops, n);
    for (i = 0; i < n; i++) {
        st_get_op_t *op = &h->gets[i];

        if (ok) {
            op->status = ST_OK;
            continue;
        }
        /* Undecided: a worker does the batch again, with a Locate for the
         * object whose entry failed. */
        if (ops[i].pending != NULL && (!ops[i].posted || ops[i].failed)) {
            sc_dp_cache_drop(dp, h, op);
        }
        op->status = ST_ERR_UNAVAILABLE;
        op->length = 0;
    }
    free(ops), free(rsum);
    return ok;
}

/* ------------------------------------------------------------ classify -- */

/* The per-op state of g; 0 when out of memory (everything stays todo). */
static int sc_dpg_open(sc_dpg_t *g, st_handle_t *h, uint8_t *todo)
{
    memset(g, 0, sizeof(*g));
    g->h = h;
    g->c = h->client;
    g->dp = g->c->dp;
    g->todo = todo;
    g->n = h->n;
    g->ops = calloc(g->n + 1, sizeof(*g->ops));
    g->perm = calloc(g->n + 1, sizeof(*g->perm));
    g->req = calloc(g->n + 1, sizeof(*g->req));
    if (g->ops == NULL || g->perm == NULL || g->req == NULL) {
        return 0;
    }
    g->rsum = sc_dp_rsum_room(h->gets, g->ops, g->n); /* NULL: rows unverifiable, read inline */
    return 1;
}

/* The owner of each op; ops in the lease cache are set aside (cached) for
 * the gets, the others will be located; ops with no data plane are todo. */
static void sc_dpg_classify(sc_dpg_t *g)
{
    st_client_t *c = g->c;
    const st_hash_t *seg = NULL;
    int seg_owner = -1;
    uint64_t now = cm_mono_ns();

    for (size_t i = 0; i < g->n; i++) {
        st_get_op_t *op = &g->h->gets[i];
        sc_dp_op_t *o = &g->ops[i];
        const st_hash_t *first = sc_segment_first(c, g->h->chain, op->block);

        /* The ring is asked once per run of ops in one segment. */
        if (first != seg) {
            seg = first;
            seg_owner = sc_dp_owner(c, g->h->chain, op->block);
        }
        o->owner = seg_owner;
        o->pending = &g->pending;
        if (o->owner >= 0 && (op->n_rows > 0 || c->cache_all) &&
            sc_dp_cache_find(g->dp, g->h, (uint32_t)o->owner, op, o,
                             op->n_rows > 0 ? now + SC_LC_REFRESH : now)) {
            o->cached = 1; /* no Locate: straight to the gets below */
            o->node = (uint32_t)o->owner;
            o->owner = -1;
            g->n_cached++;
            g->todo[i] = 0;
            continue;
        }
        g->todo[i] = o->owner < 0;
    }
}

/* ---------------------------------------------------------------- plan -- */

/* Request b's Locate: its ops' keys, with a lease and (rows) row sums. */
static void sc_dpg_request(sc_dpg_t *g, size_t b)
{
    const sc_dp_req_t *q = &g->req[b];
    Strata__V1__LocateRequest *m = &g->msg[b];

    strata__v1__locate_request__init(m);
    m->namespace_id = g->c->ns;
    m->keys = &g->kp[q->first];
    m->n_keys = q->count;
    m->lease = 1;
    for (size_t j = q->first; j < q->first + q->count; j++) {
        const st_get_op_t *op = &g->h->gets[g->perm[j]];

        /* Rows verify by them. */
        m->want_row_sums |= op->n_rows > 0 && !g->dp->rows_unverified;
        sc_dp_key(&g->keys[j], &g->h->chain[op->block], op->kind, op->layer);
        g->kp[j] = &g->keys[j];
    }
    g->items[b].ch = g->c->nodes[q->node].ch;
    g->items[b].req = &m->base;
}

/* Cuts the ops to locate into requests and waves and writes their Locates.
 * Returns 0 when there is nothing to read here (or no memory: then every op
 * is todo again). */
static int sc_dpg_plan(sc_dpg_t *g)
{
    int nomem = 0;

    g->nb = sc_dp_waves(g->c, g->h, g->ops, g->n, g->perm, g->req, &nomem);
    if (g->nb == 0 && g->n_cached == 0 && !nomem) {
        return 0;
    }
    g->nw = g->nb > 0 ? (size_t)g->req[g->nb - 1].wave + 1 : 0;
    g->loc = calloc(g->nw + 1, sizeof(*g->loc));
    g->plist = calloc(g->n + 1, sizeof(*g->plist));
    g->msg = calloc(g->nb + 1, sizeof(*g->msg));
    g->items = calloc(g->nb + 1, sizeof(*g->items));
    g->keys = calloc(g->n + 1, sizeof(*g->keys));
    g->kp = calloc(g->n + 1, sizeof(*g->kp));
    if (nomem || !g->loc || !g->plist || !g->msg || !g->items || !g->keys || !g->kp) {
        for (size_t i = 0; i < g->n; i++) {
            g->todo[i] = 1;
            g->ops[i].cached = 0;
        }
        return 0;
    }
    for (size_t b = 0; b < g->nb; b++) {
        sc_dp_loc_t *w = &g->loc[g->req[b].wave];

        sc_dpg_request(g, b);
        if (w->items == NULL) {
            w->items = &g->items[b];
            w->timeout_ms = sc_left_ms(g->h);
            w->c = g->c;
        }
        w->n++;
        for (size_t j = g->req[b].first; j < g->req[b].first + g->req[b].count; j++) {
            w->bytes += sc_dp_get_bytes(&g->h->gets[g->perm[j]]);
        }
    }
    return 1;
}

/* -------------------------------------------------------------- locate -- */

/*
 * The waves' Locates run on the locator threads, in order; the gets of a
 * wave are posted as soon as its answers are in, while the next waves are
 * being located. The first waves (up to SC_DP_INLINE_BYTES per node) go in
 * one fan-out on this thread (nothing to post before their answers), the
 * rest on the locators, started first.
 */
static void sc_dpg_locate(sc_dpg_t *g)
{
    st_client_t *c = g->c;
    sc_dp_loc_t *loc = g->loc, first;
    uint64_t lim, sum = 0;
    size_t m = 0;

    if (g->nw == 0) {
        return;
    }
    first = (sc_dp_loc_t){.items = loc[0].items, .timeout_ms = sc_left_ms(g->h), .c = c};
    lim = (uint64_t)SC_DP_INLINE_BYTES * loc[0].n;
    while (m < g->nw && (m == 0 || sum + loc[m].bytes <= lim)) {
        sum += loc[m].bytes;
        first.n += loc[m++].n;
    }
    sc_dp_loc_submit(g->dp, loc + m, g->nw - m);
    if (c->tcalls && sc_fan_start(&g->fan, c, &srpc_cache_methods[SRPC_CACHE_LOCATE], TCALL_LOCATE,
                                  first.items, first.n, first.timeout_ms)) {
        /* Each wave's Locate is its own message: the first answers (a few
         * objects) come while the daemon still serves the later ones, and
         * their gets run meanwhile. */
        g->fan_on = 1;
        /* Nodes without calls over the transport: over gRPC, now. */
        g->fan_ok = sc_fan_grpc(&g->fan) == ST_OK;
    } else {
        sc_dp_loc_run(&first);
    }
    for (size_t w = 0; w < m; w++) {
        if (g->fan_on) {
            loc[w].fan = &g->fan;
            loc[w].lo = (size_t)(loc[w].items - first.items);
            loc[w].hi = loc[w].lo + loc[w].n;
            loc[w].t_sent = g->fan.start;
            loc[w].ok = g->fan_ok;
            continue;
        }
        loc[w].t_sent = first.t_sent;
        loc[w].ok = first.ok;
        atomic_store_explicit(&loc[w].done, 1, memory_order_release);
    }
}

/* ---------------------------------------------------------------- post -- */

/* Rows (and with cache_locations = all, whole objects) keep the lease of
 * entry j of request b's answer: valid until 90% of it by our clock. */
static void sc_dpg_keep(sc_dpg_t *g, size_t b, size_t j, size_t i, uint64_t t_sent)
{
    const Strata__V1__LocateResponse *r = (const void *)g->items[b].resp;
    const Strata__V1__Locations *l = r->locations;
    const st_get_op_t *op = &g->h->gets[i];
    uint32_t node = g->req[b].node;
    sc_lc_ent_t e = {.hash = g->h->chain[op->block],
                     .gen = g->dp->node[node].gen,
                     .epoch = r->region_epoch,
                     .offset = l->offset[j],
                     .length = l->length[j],
                     .expiry_ns = t_sent + (uint64_t)r->lease_ms * 900000ull,
                     .node = node,
                     .region_id = l->region_id[j],
                     .layer = op->layer,
                     .kind = op->kind};

    if (op->n_rows != 0 && l->n_row_sums == g->req[b].count) {
        e.row_bytes = op->row_bytes;
        e.n_sums = l->row_sums[j].len / 8;
        e.sums = malloc(l->row_sums[j].len); /* NULL: later reads locate */
        if (e.sums != NULL) {
            memcpy(e.sums, l->row_sums[j].data, l->row_sums[j].len);
        }
    }
    g->ops[i].expiry_ns = e.expiry_ns;
    g->req[b].keep = 1;
    sc_lc_put(&g->dp->lc, &e);
}

/* Takes entry j of request b's answer (op i): a miss, an op that does not
 * fit, rows without sums (todo), or a location whose gets are posted (rows)
 * or listed in g->plist (whole objects). Node lock held. */
static void sc_dpg_take(sc_dpg_t *g, size_t b, size_t j, uint64_t t_sent, int *refreshed)
{
    const Strata__V1__LocateResponse *r = (const void *)g->items[b].resp;
    const Strata__V1__Locations *l = r->locations;
    uint32_t node = g->req[b].node;
    sc_dp_node_t *nd = &g->dp->node[node];
    size_t i = g->perm[g->req[b].first + j];
    st_get_op_t *op = &g->h->gets[i];
    sc_dp_op_t *o = &g->ops[i];
    sc_dp_region_t *reg;
    uint64_t len = l->length[j], off = l->offset[j];

    op->status = ST_ERR_NOT_FOUND;
    if (l->state[j] != STRATA__V1__OBJECT_STATE__OBJECT_PRESENT) {
        g->todo[i] = op->kind == ST_KIND_KDA; /* the next replica may have it */
        return;
    }
    if (sc_dp_get_fits(op, len) != ST_OK) {
        op->status = ST_ERR_INVALID;
        op->length = op->n_rows ? 0 : len;
        return;
    }
    if (op->n_rows != 0 && !g->dp->rows_unverified &&
        !(o->has_rsum = (uint8_t)sc_dp_located_sums(l, j, g->req[b].count, op, len, o->rsum))) {
        g->todo[i] = 1; /* no row sums to verify the rows by: inline, whole, checked */
        return;
    }
    if (g->np > 0 && !*refreshed &&
        (l->region_id[j] >= nd->cap || nd->reg[l->region_id[j]].rkey == NULL ||
         r->region_epoch != nd->epoch)) {
        /* A refresh may replace the keys the list holds: post it first. */
        sc_dp_post_objects(g->dp, nd, g->h, g->ops, g->plist, g->np);
        g->np = 0;
    }
    reg = sc_dp_region(g->c, node, l->region_id[j], r->region_epoch, refreshed, sc_left_ms(g->h));
    if (reg == NULL || off + len > reg->len) {
        return; /* a region we cannot reach: a miss */
    }
    o->node = node;
    o->checksum = l->checksum[j];
    o->lease = b;
    if (op->n_rows == 0 && r->lease_id != 0) {
        /* A whole object landed under the lease is the committed one. */
        o->bound_ns = t_sent + (uint64_t)r->lease_ms * 900000ull;
    }
    if ((op->n_rows != 0 || g->c->cache_all) && r->lease_id != 0) {
        sc_dpg_keep(g, b, j, i, t_sent);
    }
    if (op->n_rows == 0) {
        g->plist[g->np++] = (sc_dp_post_t){i, reg->base + off, len, reg->rkey, NULL, ST_OK, 0, 0};
        return;
    }
    sc_dp_post_get(g->dp, nd, op, o, reg, off, len);
}

/* Whether the Locate of request q answered with a location for each op. */
static int sc_dpg_located(const sc_dp_req_t *q, const srpc_fanout_item_t *it)
{
    const Strata__V1__LocateResponse *r = (const void *)it->resp;
    const Strata__V1__Locations *l = r != NULL ? r->locations : NULL;

    return it->status == ST_OK && l != NULL && l->n_state == q->count &&
           l->n_region_id == q->count && l->n_offset == q->count && l->n_length == q->count &&
           l->n_checksum == q->count;
}

/* Takes request b's Locate answer (its wave located: ok) and posts its gets. */
static void sc_dpg_post_request(sc_dpg_t *g, size_t b, int located, uint64_t t_sent)
{
    sc_dp_req_t *q = &g->req[b];
    sc_dp_node_t *nd = &g->dp->node[q->node];
    int refreshed = 0;

    if (!located) {
        for (size_t j = 0; j < q->count; j++) {
            g->todo[g->perm[q->first + j]] = 1;
        }
        return;
    }
    if (!sc_dpg_located(q, &g->items[b])) {
        if (g->items[b].status == ST_ERR_OVERLOADED) {
            /* Refused for load before it ran, as a refused Get (inline.c): the node is up,
             * its replicas are as loaded, and a Get of the same objects over gRPC would only
             * add load; the caller retries after the hint. */
            lg_ratelimited(LG_INFO, "get refused for load node=%s error=\"%s\"",
                           g->c->nodes[q->node].addr, g->items[b].err.message);
            for (size_t j = 0; j < q->count; j++) {
                size_t i = g->perm[q->first + j];

                g->h->gets[i].status = ST_ERR_OVERLOADED;
                g->todo[i] = 0;
            }
            return;
        }
        sc_node_failed(g->c, q->node, g->items[b].status, &g->items[b].err);
        return; /* those ops stay ST_ERR_UNAVAILABLE */
    }
    q->lease = ((const Strata__V1__LocateResponse *)(const void *)g->items[b].resp)->lease_id;
    pthread_mutex_lock(&nd->lock);
    for (size_t j = 0; j < q->count; j++) {
        sc_dpg_take(g, b, j, t_sent, &refreshed);
    }
    sc_dp_post_objects(g->dp, nd, g->h, g->ops, g->plist, g->np);
    g->np = 0;
    pthread_mutex_unlock(&nd->lock);
}

/* Op i's cached entry was stale: the inline path answers it. */
static void sc_dpg_stale(sc_dpg_t *g, size_t i)
{
    g->ops[i].cached = 0;
    g->todo[i] = 1;
    sc_dp_cache_drop(g->dp, g->h, &g->h->gets[i]);
}

/* The gets of the cached ops: row reads node by node in bulk (sc_dp_post_cached_rows), whole
 * objects one by one. */
static void sc_dpg_post_cached(sc_dpg_t *g)
{
    size_t *ix = g->n_cached > 1 ? malloc(sizeof(*ix) * g->n_cached) : NULL;
    uint8_t *ok = ix != NULL ? malloc(g->n_cached) : NULL;
    uint8_t *done = ok != NULL ? calloc(g->n, 1) : NULL;

    for (size_t i = 0; i < g->n; i++) {
        st_get_op_t *op = &g->h->gets[i];

        if (!g->ops[i].cached || (done != NULL && op->n_rows > 0)) {
            continue;
        }
        if (!sc_dp_post_cached(g->c, op, &g->ops[i], &g->ops[i].ce)) {
            sc_dpg_stale(g, i);
        }
    }
    for (size_t first = 0; done != NULL && first < g->n; first++) {
        size_t n = 0;
        uint32_t node;

        if (!g->ops[first].cached || g->h->gets[first].n_rows == 0 || done[first]) {
            continue;
        }
        node = g->ops[first].ce.node;
        for (size_t i = first; i < g->n; i++) {
            if (g->ops[i].cached && g->h->gets[i].n_rows > 0 && !done[i] &&
                g->ops[i].ce.node == node) {
                ix[n++] = i;
                done[i] = 1;
            }
        }
        sc_dp_post_cached_rows(g->c, g->h, g->ops, node, ix, n, ok);
        for (size_t j = 0; j < n; j++) {
            if (!ok[j]) {
                sc_dpg_stale(g, ix[j]);
            }
        }
    }
    free(ix), free(ok), free(done);
}

/* Posts the gets of every request as its wave is located, then those of
 * the cached ops (a stale entry: the inline path answers). */
static void sc_dpg_post(sc_dpg_t *g)
{
    uint64_t t_sent = 0;
    int located = 0;

    for (size_t b = 0; b < g->nb; b++) {
        uint32_t w = g->req[b].wave;

        if (b == 0 || w != g->req[b - 1].wave) {
            sc_dp_loc_wait(g->dp, &g->loc[w], &g->pending);
            t_sent = g->loc[w].t_sent;
            located = g->loc[w].ok;
        }
        sc_dpg_post_request(g, b, located, t_sent);
    }
    sc_dpg_post_cached(g);
}

/* -------------------------------------------------------------- settle -- */

/* Decides op i after its transfers and their verification. */
static void sc_dpg_decide(sc_dpg_t *g, size_t i)
{
    st_get_op_t *op = &g->h->gets[i];
    sc_dp_op_t *o = &g->ops[i];

    if (!o->posted) {
        if (op->status == ST_ERR_NOT_FOUND) {
            op->length = 0;
        }
        return;
    }
    if (o->failed) {
        op->status = ST_ERR_NOT_FOUND;
    } else if (op->n_rows == 0) {
        op->status = o->verified ? ST_OK : ST_ERR_NOT_FOUND;
        if (op->status != ST_OK) {
            lg_warn_ratelimited("get: one-sided read does not match its checksum (the "
                                "extent was reused after its lease): a miss bytes=%zu",
                                op->length);
        }
    } else {
        /* Rows count when each matches its row sum, computed by the daemon
         * at commit: also rows that landed after the lease's bound. */
        op->status = sc_dp_rows_ok(g->dp, op, o) ? ST_OK : ST_ERR_NOT_FOUND;
    }
    if (op->status != ST_OK) {
        op->length = 0;
        /* KDA may be on the next replica; rows under a cached lease that
         * ran out or failed are read again inline. */
        g->todo[i] = op->kind == ST_KIND_KDA || o->cached || o->expiry_ns != 0;
        if (o->expiry_ns != 0) {
            sc_dp_cache_drop(g->dp, g->h, op);
        }
    }
}

/*
 * The call's deadline passed with transfers in flight: the endpoints of the
 * nodes the batch read from are closed at once (tp_ep_abort), which cancels
 * the transfers (their callbacks run: failed) and guarantees that none of
 * them lands in the caller's buffers after the call returned; a node
 * connects again at its next Hello. Then every undecided op is
 * ST_ERR_TIMEOUT, and nothing is left for the inline path.
 */
static void sc_dpg_abort(sc_dpg_t *g)
{
    sc_dp_abort(g->c, g->ops, g->n, &g->pending);
    g->late = 1;
}

/* Waits for every transfer (up to the call's deadline), releases the leases
 * no row read keeps (in the background: the batch does not wait for it),
 * verifies and decides. */
static void sc_dpg_settle(sc_dpg_t *g)
{
    st_client_t *c = g->c;
    uint64_t now;

    if (g->dp->on_posted != NULL) {
        g->dp->on_posted(g->dp->on_posted_arg);
    }
    if (sc_dp_wait_until(g->dp, &g->pending, g->h->deadline_ns) != ST_OK) {
        sc_dpg_abort(g);
    }
    /* Every transfer has completed by now: whatever landed before now. */
    now = cm_mono_ns();
    sc_dp_release(c, g->req, g->nb);
    /* Whole objects that may have landed after their lease (or had none) are
     * checked by their checksum; with verify_reads = always, all are. */
    for (size_t i = 0; i < g->n; i++) {
        sc_dp_op_t *o = &g->ops[i];

        /* A node whose transport does not keep committed bytes read-only
         * (Hello's committed_read_only) has every object checked. */
        o->check = c->verify_always || o->bound_ns == 0 || !g->dp->node[o->node].committed_ro ||
                   (int64_t)(now - o->bound_ns) + g->dp->lease_skew_ns >= 0;
    }
    sc_dp_verify_all(g->h, g->ops, g->n);
    for (size_t i = 0; i < g->n; i++) {
        sc_dpg_decide(g, i);
        if (g->late && g->h->gets[i].status != ST_OK) {
            g->h->gets[i].status = ST_ERR_TIMEOUT;
            g->h->gets[i].length = 0;
            g->todo[i] = 0;
        }
    }
}

/* Frees what g holds (every wave was waited for). */
static void sc_dpg_close(sc_dpg_t *g)
{
    if (g->fan_on) {
        sc_fan_end(&g->fan);
    }
    if (g->items != NULL) {
        srpc_fanout_free(g->items, g->nb);
    }
    if (g->ops != NULL) {
        sc_dp_free_tmp(g->dp, g->ops, g->n);
    }
    free(g->ops), free(g->rsum), free(g->perm), free(g->req), free(g->msg), free(g->items);
    free(g->keys), free(g->kp), free(g->loc), free(g->plist);
}

void sc_dp_get(st_handle_t *h, uint8_t *todo)
{
    sc_dpg_t g;

    if (sc_dpg_open(&g, h, todo)) {
        sc_dpg_classify(&g);
        if (sc_dpg_plan(&g)) {
            sc_dpg_locate(&g);
            sc_dpg_post(&g);
            sc_dpg_settle(&g);
        }
    }
    sc_dpg_close(&g);
}
