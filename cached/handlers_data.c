/*
 * handlers_data.c - the object calls of strata.v1.Cache that write, read
 * and hold objects: Reserve, Commit, Abort, Release, Put, Get, Delete, Pin
 * and Unpin (Lookup and Locate: handlers_lookup.c).
 *
 * Every request is validated (sizes, hash lengths, kinds, limits) before it
 * reaches the store; per-key outcomes go into KeyStatus arrays and the call
 * itself succeeds when the batch was processed.
 */
#include "handlers.h"
#include "dataplane.h"
#include "tier.h"

#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "log.h"

/* ------------------------------------------------ Reserve/Commit/Abort -- */

/* A request's block links, sorted by hash for binary search. */
typedef struct cd_h_links {
    Strata__V1__BlockLink **v;
    size_t n;
} cd_h_links_t;

static int cd_h_link_cmp(const void *a, const void *b)
{
    const Strata__V1__BlockLink *x = *(Strata__V1__BlockLink *const *)a;
    const Strata__V1__BlockLink *y = *(Strata__V1__BlockLink *const *)b;

    return memcmp(x->hash.data, y->hash.data, ST_HASH_BYTES);
}

/* Sorts a copy of the links (checked by cd_h_check_links). */
static st_status_t cd_h_links_index(srpc_ctx_t *ctx, Strata__V1__BlockLink *const *links, size_t n,
                                    cd_h_links_t *out)
{
    out->n = n;
    out->v = srpc_ctx_alloc(ctx, sizeof(*out->v) * (n + 1));
    if (out->v == NULL) {
        return ST_ERR_NOMEM;
    }
    if (n > 0) {
        memcpy(out->v, links, sizeof(*out->v) * n);
        qsort(out->v, n, sizeof(*out->v), cd_h_link_cmp);
    }
    return ST_OK;
}

/* Finds the link of block h; NULL if none. */
static const Strata__V1__BlockLink *cd_h_link(const cd_h_links_t *l, const st_hash_t *h)
{
    size_t lo = 0, hi = l->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(l->v[mid]->hash.data, h->b, ST_HASH_BYTES);

        if (c == 0) {
            return l->v[mid];
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

/* Finds the parent hash of block h among the links; NULL if none. */
static const st_hash_t *cd_h_link_parent(const cd_h_links_t *l, const st_hash_t *h)
{
    const Strata__V1__BlockLink *link = cd_h_link(l, h);

    return link != NULL ? (const st_hash_t *)(const void *)link->parent_hash.data : NULL;
}

static st_status_t cd_h_check_links(srpc_ctx_t *ctx, Strata__V1__BlockLink *const *links, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (links[i]->hash.len != ST_HASH_BYTES || links[i]->parent_hash.len != ST_HASH_BYTES) {
            srpc_ctx_set_error(ctx, "links[%zu]: hash and parent_hash must be 16 bytes", i);
            return ST_ERR_INVALID;
        }
        if (links[i]->placement.len != 0 && links[i]->placement.len != ST_HASH_BYTES) {
            srpc_ctx_set_error(ctx, "links[%zu]: placement must be empty or 16 bytes", i);
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* srpc_ctx_alloc for the data plane's copies. */
static void *cd_h_wk_alloc(void *ctx, size_t len)
{
    return srpc_ctx_alloc(ctx, len);
}

/*
 * Gives each reserved extent its own write key where the transport enforces
 * keys (cd_dp_write_key(); the store's resv_end revokes it). Returns ST_OK
 * (also when the transport has no write keys), or the first failure, logged
 * and set on ctx.
 */
static st_status_t cd_h_write_keys(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_entry_t *e,
                                   const cd_resv_t *out, size_t n,
                                   Strata__V1__ReserveResponse *resp)
{
    if (!cd_dp_committed_read_only(d->dp)) {
        return ST_OK;
    }
    resp->write_rkeys = srpc_ctx_alloc(ctx, sizeof(*resp->write_rkeys) * n);
    if (resp->write_rkeys == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(resp->write_rkeys, 0, sizeof(*resp->write_rkeys) * n);
    resp->n_write_rkeys = n;
    for (size_t i = 0; i < n; i++) {
        st_status_t st;

        if (out[i].status != ST_OK) {
            continue;
        }
        st = cd_dp_write_key(d->dp, e->local_id, out[i].id, out[i].where.region,
                             out[i].where.offset, out[i].where.length, cd_h_wk_alloc, ctx,
                             &resp->write_rkeys[i].data, &resp->write_rkeys[i].len);
        if (st != ST_OK) {
            srpc_ctx_set_error(ctx, "keys[%zu]: cannot register its extent for write: %s", i,
                               st_strerror(st));
            return st;
        }
    }
    return ST_OK;
}

st_status_t cd_h_reserve(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                         void *arg)
{
    const Strata__V1__ReserveRequest *req = (const void *)reqm;
    Strata__V1__ReserveResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_resv_req_t *rq;
    cd_resv_t *out;
    uint64_t *ids, expires = 0;
    cd_h_links_t links;
    cd_err_t err = {""};
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if (req->n_keys == 0 || req->n_lengths != req->n_keys ||
        (req->n_row_bytes != 0 && req->n_row_bytes != req->n_keys)) {
        srpc_ctx_set_error(ctx,
                           "reserve needs one length (and row_bytes, if any) per key: "
                           "%zu keys, %zu lengths, %zu row_bytes",
                           req->n_keys, req->n_lengths, req->n_row_bytes);
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_keys, "keys")) != ST_OK ||
        (status = cd_h_check_links(ctx, req->links, req->n_links)) != ST_OK ||
        (status = cd_h_links_index(ctx, req->links, req->n_links, &links)) != ST_OK) {
        return status;
    }
    if (req->ttl_ms > d->cfg.reservation_ms) {
        srpc_ctx_set_error(ctx, "ttl_ms=%u exceeds reservation_ttl=%llu", req->ttl_ms,
                           (unsigned long long)d->cfg.reservation_ms);
        return ST_ERR_INVALID;
    }
    rq = srpc_ctx_alloc(ctx, sizeof(*rq) * req->n_keys);
    out = srpc_ctx_alloc(ctx, sizeof(*out) * req->n_keys);
    ids = calloc(req->n_keys, sizeof(*ids));
    if (rq == NULL || out == NULL || ids == NULL) {
        free(ids);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        if (cd_h_key(req->keys[i], &rq[i].key) != ST_OK || req->lengths[i] == 0 ||
            req->lengths[i] > d->cfg.max_object_bytes) {
            free(ids);
            srpc_ctx_set_error(ctx, "keys[%zu]: bad key or length %llu (1..max_object=%llu)", i,
                               (unsigned long long)req->lengths[i],
                               (unsigned long long)d->cfg.max_object_bytes);
            return ST_ERR_INVALID;
        }
        rq[i].parent = cd_h_link_parent(&links, &rq[i].key.hash);
        rq[i].length = req->lengths[i];
        if (req->n_row_bytes && req->row_bytes[i] != 0 && req->row_bytes[i] < PR_ROW_BYTES_MIN) {
            free(ids);
            srpc_ctx_set_error(ctx, "row_bytes[%zu]=%u: rows have at least %u bytes (or 0: none)",
                               i, req->row_bytes[i], PR_ROW_BYTES_MIN);
            return ST_ERR_INVALID;
        }
        rq[i].row_bytes = req->n_row_bytes ? req->row_bytes[i] : 0;
    }
    status = cd_store_reserve(d->store, e->local_id, rq, req->n_keys, out, &err);
    if (status != ST_OK) {
        free(ids);
        return cd_h_fail(ctx, status, &err);
    }
    resp->extents = cd_h_locations(ctx, req->n_keys);
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * req->n_keys);
    if (resp->extents == NULL || resp->status == NULL) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (out[i].status == ST_OK) {
                cd_store_abort(d->store, e->local_id, out[i].id);
            }
        }
        free(ids);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        resp->status[i] = cd_h_key_status(out[i].status);
        if (out[i].status == ST_OK) {
            ids[i] = out[i].id;
            cd_h_location_set(resp->extents, i, STRATA__V1__OBJECT_STATE__OBJECT_PRESENT,
                              &out[i].where);
            resp->extents->row_bytes[i] = req->n_row_bytes ? req->row_bytes[i] : 0;
            if (out[i].expires_ms > expires) {
                expires = out[i].expires_ms;
            }
        }
    }
    resp->n_status = req->n_keys;
    status = cd_h_write_keys(ctx, d, e, out, req->n_keys, resp);
    if (status != ST_OK) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (ids[i] != 0) {
                cd_store_abort(d->store, e->local_id, ids[i]);
            }
        }
        free(ids);
        return status;
    }
    status = cd_batch_add(d, e->local_id, cd_au_client(ctx), ids, req->n_keys,
                          expires ? expires : cd_store_now(d->store) + d->cfg.reservation_ms,
                          &resp->reservation_id);
    if (status != ST_OK) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (ids[i] != 0) {
                cd_store_abort(d->store, e->local_id, ids[i]);
            }
        }
        free(ids);
        return status;
    }
    resp->ttl_ms = (uint32_t)d->cfg.reservation_ms;
    resp->region_epoch = cd_daemon_ns_region_epoch(d, e);
    return ST_OK;
}

/* Copies a committed KDA object out of DRAM and writes it to the SSD tier. */
static st_status_t cd_h_commit_through(cd_daemon_t *d, const cd_ns_entry_t *e, const cd_key_t *key,
                                       const st_hash_t *parent, int durable, cd_err_t *err)
{
    uint64_t len = 0;
    void *buf;
    st_status_t status;

    status = cd_store_get(d->store, e->local_id, key, NULL, 0, &len, NULL, err);
    if (status != ST_OK && status != ST_ERR_INVALID) {
        return status; /* evicted already: its KDA copy cannot be written now */
    }
    buf = malloc(len ? len : 1);
    if (buf == NULL) {
        snprintf(err->msg, sizeof(err->msg), "no memory to copy a %llu-byte KDA object",
                 (unsigned long long)len);
        return ST_ERR_NOMEM;
    }
    status = cd_store_get(d->store, e->local_id, key, buf, len, &len, NULL, err);
    if (status == ST_OK) {
        status = cd_tier_put_object(d->tier, e->wire_id, key, parent, buf, len, durable, err);
    }
    free(buf);
    if (status != ST_OK && !durable) {
        lg_warn_ratelimited("KDA write-through of a commit not queued ns=%u: %s", e->local_id,
                            err->msg);
    }
    return status;
}

/* Takes the batch of reservation_id in the request's namespace into *b_p. With gone_ok, a
 * batch issued before and since expired, committed or aborted is ST_OK with *b_p NULL:
 * nothing is left to free. */
static st_status_t cd_h_batch(srpc_ctx_t *ctx, cd_daemon_t *d, uint64_t namespace_id,
                              uint64_t reservation_id, int gone_ok, cd_ns_entry_t **e_p,
                              cd_batch_t **b_p)
{
    st_status_t status = cd_h_ns(ctx, d, namespace_id, e_p);

    *b_p = NULL;
    if (status != ST_OK) {
        return status;
    }
    *b_p = cd_batch_take(d, (*e_p)->local_id, cd_au_client(ctx), reservation_id);
    if (*b_p != NULL ||
        (gone_ok && cd_batch_issued(d, (*e_p)->local_id, cd_au_client(ctx), reservation_id))) {
        return ST_OK;
    }
    srpc_ctx_set_error(ctx, "no reservation_id=%llu (unknown, committed, aborted or expired)",
                       (unsigned long long)reservation_id);
    return ST_ERR_NOT_FOUND;
}

/* Aborts the reservations of b from its key `from` on and frees b. */
static void cd_h_batch_abort(cd_daemon_t *d, const cd_ns_entry_t *e, cd_batch_t *b, size_t from)
{
    for (size_t i = from; i < b->n; i++) {
        if (b->resv[i] != 0) {
            cd_store_abort(d->store, e->local_id, b->resv[i]);
        }
    }
    cd_batch_free(b);
}

st_status_t cd_h_commit(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__CommitRequest *req = (const void *)reqm;
    Strata__V1__CommitResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_batch_t *b;
    st_status_t status;

    status = cd_h_batch(ctx, d, req->namespace_id, req->reservation_id, 0, &e, &b);
    if (status != ST_OK) {
        return status;
    }
    if (req->n_checksums != b->n) {
        srpc_ctx_set_error(ctx, "commit needs %zu checksums, one per reserved key, got %zu", b->n,
                           req->n_checksums);
        /* Put it back: the writer may retry with the right count. */
        pthread_mutex_lock(&d->batch_lock);
        b->next = d->batches;
        d->batches = b;
        pthread_mutex_unlock(&d->batch_lock);
        return ST_ERR_INVALID;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * b->n);
    if (resp->status == NULL) {
        cd_batch_free(b);
        return ST_ERR_NOMEM;
    }
    if (req->durable && d->tier == NULL) {
        cd_batch_free(b);
        srpc_ctx_set_error(ctx, "durable commit on node %s, which has no SSD tier (data_dir)",
                           d->cfg.node_id);
        return ST_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < b->n; i++) {
        cd_err_t err = {""};
        cd_key_t key;
        st_hash_t parent;
        int has_parent = 0;

        if (b->resv[i] == 0) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_EXISTS;
            continue;
        }
        status = cd_store_commit_key(d->store, e->local_id, b->resv[i], req->checksums[i], &key,
                                     &parent, &has_parent, &err);
        if (status == ST_OK && d->tier != NULL && key.kind == CD_KIND_KDA) {
            /* Written through like a Put's KDA object; with durable, before the reply. */
            status =
                cd_h_commit_through(d, e, &key, has_parent ? &parent : NULL, req->durable, &err);
            if (status != ST_OK && req->durable) {
                lg_warn_ratelimited("durable commit refused ns=%u: %s", e->local_id, err.msg);
                srpc_ctx_set_error(ctx, "key %zu: %s", i, err.msg);
                cd_h_batch_abort(d, e, b, i + 1);
                return status;
            }
            status = ST_OK;
        }
        resp->status[i] = status == ST_ERR_NOT_FOUND ? STRATA__V1__KEY_STATUS__KEY_EXPIRED
                                                     : cd_h_key_status(status);
        if (status == ST_ERR_CORRUPT) {
            /* Nothing became visible; free the extent now rather than at expiry. */
            cd_store_abort(d->store, e->local_id, b->resv[i]);
            lg_debug("commit refused: checksum mismatch ns=%u key=%zu", e->local_id, i);
        }
    }
    resp->n_status = b->n;
    cd_batch_free(b);
    return ST_OK;
}

st_status_t cd_h_abort(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__AbortRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_batch_t *b;
    st_status_t status;

    status = cd_h_batch(ctx, d, req->namespace_id, req->reservation_id, 1, &e, &b);
    if (status == ST_OK && b != NULL) {
        cd_h_batch_abort(d, e, b, 0);
    }
    return status;
}

st_status_t cd_h_release(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                         void *arg)
{
    const Strata__V1__ReleaseRequest *req = (const void *)reqm;
    Strata__V1__ReleaseResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK || (status = cd_h_batch_limit(ctx, d, req->n_lease_ids, "leases"))) {
        return status;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_lease_ids + 1));
    if (resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_lease_ids; i++) {
        uint64_t client = cd_au_client(ctx);
        st_status_t st = cd_store_release(d->store, e->local_id, req->lease_ids[i] ^ client);

        if (st == ST_ERR_NOT_FOUND && client != 0) {
            /* A lease granted without a client id (a peer's fan-out): bound to the tenant. */
            st = cd_store_release(d->store, e->local_id, req->lease_ids[i]);
        }
        resp->status[i] = cd_h_key_status(st);
    }
    resp->n_status = req->n_lease_ids;
    return ST_OK;
}

/* ------------------------------------------------------------ Put/Get -- */

st_status_t cd_h_put(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__PutRequest *req = (const void *)reqm;
    Strata__V1__PutResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_links_t links;
    cd_ns_entry_t *e;
    uint64_t slice = 0;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_objects, "objects")) != ST_OK ||
        (status = cd_h_check_links(ctx, req->links, req->n_links)) != ST_OK ||
        (status = cd_h_links_index(ctx, req->links, req->n_links, &links)) != ST_OK) {
        return status;
    }
    if (req->durable && d->tier == NULL) {
        srpc_ctx_set_error(ctx, "durable put on node %s, which has no SSD tier (data_dir)",
                           d->cfg.node_id);
        return ST_ERR_UNSUPPORTED;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_objects + 1));
    if (resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_objects; i++) {
        const Strata__V1__InlineObject *o = req->objects[i];
        cd_key_t key;
        cd_err_t err = {""};

        if (i > 0) {
            cd_h_slice(ctx, d, &slice, req->objects[i - 1]->data.len);
        }
        if (cd_h_key(o->key, &key) != ST_OK || o->data.len == 0 ||
            o->data.len > d->cfg.max_object_bytes) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID;
            continue;
        }
        if (cd_checksum(o->data.data, o->data.len) != o->checksum) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_CORRUPT;
            continue;
        }
        if (o->row_bytes != 0 && o->row_bytes < PR_ROW_BYTES_MIN) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID; /* rows too small */
            continue;
        }
        status = cd_store_put_rows(d->store, e->local_id, &key, cd_h_link_parent(&links, &key.hash),
                                   o->data.data, o->data.len, o->row_bytes, &err);
        if (status == ST_OK && d->tier != NULL && key.kind == CD_KIND_KDA) {
            /* Written through; with durable, the reply waits for the commit. */
            status =
                cd_tier_put_object(d->tier, e->wire_id, &key, cd_h_link_parent(&links, &key.hash),
                                   o->data.data, o->data.len, req->durable, &err);
            if (status != ST_OK && req->durable) {
                lg_warn_ratelimited("durable put refused ns=%u: %s", e->local_id, err.msg);
                srpc_ctx_set_error(ctx, "objects[%zu]: %s", i, err.msg);
                return status;
            }
            if (status != ST_OK) {
                lg_warn_ratelimited("KDA write-through not queued ns=%u: %s", e->local_id, err.msg);
                status = ST_OK; /* not asked to be durable: in DRAM, as asked */
            }
        }
        resp->status[i] = cd_h_key_status(status);
        if (status == ST_OK && key.kind == CD_KIND_KDA) {
            cd_h_note_kda(d, e, &key, cd_h_link(&links, &key.hash)); /* moved on member changes */
        }
        if (status == ST_OK) {
            mx_counter_inc(e->mx->stored_objects[key.kind]);
            mx_counter_add(e->mx->stored_bytes[key.kind], o->data.len);
        } else if (status == ST_ERR_EXHAUSTED) {
            lg_warn_ratelimited("put refused ns=%u: %s", e->local_id, err.msg);
        }
    }
    resp->n_status = req->n_objects;
    return ST_OK;
}

/* The length of one key of a Get (whole, or its selected rows), for
 * cd_h_ask_promoting. */
typedef struct cd_h_get_ask {
    cd_daemon_t *d;
    cd_ns_entry_t *e;
    const cd_key_t *key;
    const Strata__V1__RowSelection *sel; /* NULL: the whole object */
    uint64_t len;
    unsigned asks; /* a hit after the first ask came from the SSD tier */
    cd_err_t err;
} cd_h_get_ask_t;

/* Counts one key of a Get by kind and outcome: final is the store's answer
 * (ST_OK: a hit; ST_ERR_NOT_FOUND: a miss; anything else is neither). */
static void cd_h_get_count(const cd_h_get_ask_t *g, st_status_t final)
{
    if (final == ST_OK) {
        cd_obs_get(g->e->mx, g->key->kind, g->asks > 1 ? CD_OBS_GET_SSD : CD_OBS_GET_DRAM);
    } else if (final == ST_ERR_NOT_FOUND) {
        cd_obs_get(g->e->mx, g->key->kind, CD_OBS_GET_MISS);
    }
}

/* cd_h_ask_t.ask of a Get: the object's length (ST_OK or ST_ERR_INVALID
 * with len: a hit), or the length of its selected rows (ST_ERR_INVALID). */
static st_status_t cd_h_get_ask(void *arg)
{
    cd_h_get_ask_t *g = arg;

    g->asks++;
    g->len = 0;
    if (g->sel != NULL) {
        return cd_store_get_rows(g->d->store, g->e->local_id, g->key, g->sel->rows, g->sel->n_rows,
                                 NULL, 0, &g->len, NULL, &g->err);
    }
    return cd_store_get(g->d->store, g->e->local_id, g->key, NULL, 0, &g->len, NULL, &g->err);
}

/* cd_h_ask_t.promote of a Get: the key's block, when the key missed. */
static int cd_h_get_promote(void *arg, st_status_t asked)
{
    cd_h_get_ask_t *g = arg;

    return asked == ST_ERR_NOT_FOUND ? cd_tier_promote(g->d->tier, g->e->local_id, &g->key->hash)
                                     : 0;
}

/*
 * One key of a Get with a row selection: the rows, each checked against the
 * object's row sums, into o (data, the XXH3-64 of those bytes, row_bytes,
 * generation); ON_DISK objects are promoted first. Returns the key's status
 * (ST_ERR_UNSUPPORTED: the object has no row sums, KEY_INVALID), or
 * ST_ERR_NOMEM for the call.
 */
static st_status_t cd_h_get_rows(cd_daemon_t *d, cd_ns_entry_t *e, const cd_key_t *key,
                                 const Strata__V1__RowSelection *sel, Strata__V1__InlineObject *o,
                                 srpc_ctx_t *ctx, uint64_t *budget)
{
    cd_location_t where;
    cd_h_get_ask_t g = {d, e, key, sel, 0, 0, {""}};
    cd_h_ask_t ask = {cd_h_get_ask, cd_h_get_promote, &g};
    cd_err_t err = {""};
    uint64_t len;
    st_status_t status;
    void *buf;

    status = cd_h_ask_promoting(d, &ask); /* the length */
    len = g.len;
    if (status != ST_ERR_INVALID || len == 0) {
        cd_h_get_count(&g, status == ST_ERR_NOT_FOUND ? status : ST_ERR_INVALID);
        return status == ST_OK ? ST_ERR_INVALID : status; /* (no rows selected) */
    }
    if (len > *budget) {
        return ST_ERR_EXHAUSTED;
    }
    buf = srpc_ctx_alloc(ctx, len);
    if (buf == NULL) {
        return ST_ERR_NOMEM;
    }
    status = cd_store_get_rows(d->store, e->local_id, key, sel->rows, sel->n_rows, buf, len, &len,
                               &where, &err);
    cd_h_get_count(&g, status);
    if (status != ST_OK) {
        return status;
    }
    *budget -= len;
    mx_counter_inc(e->mx->served_objects[key->kind]);
    mx_counter_add(e->mx->served_bytes[key->kind], len);
    o->data.data = buf;
    o->data.len = len;
    o->checksum = cd_checksum(buf, len);
    o->row_bytes = where.row_bytes;
    o->generation = where.generation;
    return ST_OK;
}

st_status_t cd_h_get(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__GetRequest *req = (const void *)reqm;
    Strata__V1__GetResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    uint64_t budget = d->cfg.max_message_bytes;
    const Strata__V1__RowSelection **sel;
    cd_ns_entry_t *e;
    cd_h_get_ask_t g;
    cd_h_ask_t ask = {cd_h_get_ask, cd_h_get_promote, &g};
    uint64_t slice = 0;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_keys, "keys")) != ST_OK) {
        return status;
    }
    sel = req->n_rows > 0 ? srpc_ctx_alloc(ctx, sizeof(*sel) * (req->n_keys + 1)) : NULL;
    if (req->n_rows > 0 && sel == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t r = 0; r < req->n_rows; r++) {
        if (req->rows[r]->key_index >= req->n_keys) {
            srpc_ctx_set_error(ctx, "rows[%zu].key_index=%u is not a key index", r,
                               req->rows[r]->key_index);
            return ST_ERR_INVALID;
        }
        if (sel[req->rows[r]->key_index] != NULL) {
            srpc_ctx_set_error(ctx, "rows[%zu]: a second selection for key %u (at most one a key)",
                               r, req->rows[r]->key_index);
            return ST_ERR_INVALID;
        }
        sel[req->rows[r]->key_index] = req->rows[r];
    }
    resp->objects = srpc_ctx_alloc(ctx, sizeof(*resp->objects) * (req->n_keys + 1));
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_keys + 1));
    if (resp->objects == NULL || resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        Strata__V1__InlineObject *o = srpc_ctx_alloc(ctx, sizeof(*o));
        cd_key_t key;
        cd_err_t err = {""};
        cd_location_t where;
        uint64_t len;
        void *buf;

        if (o == NULL) {
            return ST_ERR_NOMEM;
        }
        if (i > 0) {
            cd_h_slice(ctx, d, &slice, resp->objects[i - 1]->data.len);
        }
        strata__v1__inline_object__init(o);
        o->key = req->keys[i];
        resp->objects[i] = o;
        if (cd_h_key(req->keys[i], &key) != ST_OK) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID;
            continue;
        }
        if (sel != NULL && sel[i] != NULL) {
            status = cd_h_get_rows(d, e, &key, sel[i], o, ctx, &budget);
            if (status == ST_ERR_NOMEM) {
                return status;
            }
            resp->status[i] = cd_h_key_status(status);
            continue;
        }
        /* First the length, then the bytes (objects are immutable). */
        g = (cd_h_get_ask_t){d, e, &key, NULL, 0, 0, {""}};
        status = cd_h_ask_promoting(d, &ask);
        len = g.len;
        if (status != ST_OK && status != ST_ERR_INVALID) {
            cd_h_get_count(&g, status);
            resp->status[i] = cd_h_key_status(status);
            continue;
        }
        if (len > budget) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
            continue;
        }
        buf = srpc_ctx_alloc(ctx, len ? len : 1);
        if (buf == NULL) {
            return ST_ERR_NOMEM;
        }
        status = cd_store_get(d->store, e->local_id, &key, buf, len, &len, &where, &err);
        cd_h_get_count(&g, status);
        resp->status[i] = cd_h_key_status(status);
        if (status != ST_OK) {
            continue;
        }
        budget -= len;
        mx_counter_inc(e->mx->served_objects[key.kind]);
        mx_counter_add(e->mx->served_bytes[key.kind], len);
        o->data.data = buf;
        o->data.len = len;
        o->checksum = where.checksum;
        o->generation = where.generation;
    }
    resp->n_objects = req->n_keys;
    resp->n_status = req->n_keys;
    resp->ring_epoch = cd_ring_epoch(d); /* a client behind it reads the members again */
    return ST_OK;
}

/* ------------------------------------------------ Delete/Pin/Unpin -- */

st_status_t cd_h_read_keys(srpc_ctx_t *ctx, Strata__V1__ObjectKey *const *in, size_t n_in,
                           const Strata__V1__KeyGrid *grid, int detailed, cd_key_t *keys,
                           size_t cap, size_t *n_p)
{
    size_t n = 0;
    st_status_t status;

    for (size_t i = 0; i < n_in; i++) {
        if (cd_h_key(in[i], &keys[n]) != ST_OK) {
            if (detailed) {
                srpc_ctx_set_error(ctx,
                                   "keys[%zu]: block_hash must be 16 bytes, kind KV, IDX, KDA "
                                   "or VIS, layer < %d",
                                   i, CD_LAYERS_MAX);
            } else {
                srpc_ctx_set_error(ctx, "keys[%zu] is malformed", i);
            }
            return ST_ERR_INVALID;
        }
        n++;
    }
    status = cd_h_grid(ctx, grid, keys, &n, cap);
    *n_p = n;
    return status;
}

st_status_t cd_h_delete(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__DeleteRequest *req = (const void *)reqm;
    Strata__V1__DeleteResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    size_t n = 0, cap = req->n_keys + cd_h_grid_cells(req->grid);
    cd_ns_entry_t *e;
    cd_key_t *keys;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, cap, "keys")) != ST_OK) {
        return status;
    }
    keys = srpc_ctx_alloc(ctx, sizeof(*keys) * (cap + 1));
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (cap + 1));
    if (keys == NULL || resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    if ((status = cd_h_read_keys(ctx, req->keys, req->n_keys, req->grid, 0, keys, cap, &n)) !=
        ST_OK) {
        return status;
    }
    for (size_t i = 0; i < n; i++) {
        cd_err_t err = {""};

        resp->status[i] = cd_h_key_status(cd_store_delete(d->store, e->local_id, &keys[i], &err));
        if (d->tier != NULL && resp->status[i] != STRATA__V1__KEY_STATUS__KEY_BUSY) {
            cd_tier_forget(d->tier, e->wire_id, &keys[i]);
        }
    }
    resp->n_status = n;
    return ST_OK;
}

static st_status_t cd_h_pin_common(srpc_ctx_t *ctx, uint64_t ns_wire,
                                   const ProtobufCBinaryData *hashes, int pin, uint64_t ttl_ms,
                                   Strata__V1__KeyStatus **status_p, size_t *n_p)
{
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    const st_hash_t *h;
    size_t n;
    st_status_t status;

    status = cd_h_ns(ctx, d, ns_wire, &e);
    if (status != ST_OK) {
        return status;
    }
    h = cd_h_hashes(ctx, hashes, &n, "block_hashes");
    if (h == NULL) {
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, n, "block hashes")) != ST_OK) {
        return status;
    }
    *status_p = srpc_ctx_alloc(ctx, sizeof(**status_p) * (n + 1));
    if (*status_p == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        st_hash_t one;
        cd_err_t err = {{0}};

        memcpy(&one, &h[i], sizeof(one));
        status = pin ? cd_store_pin_ttl(d->store, e->local_id, &one, ttl_ms, &err)
                     : cd_store_unpin(d->store, e->local_id, &one);
        if (pin && status == ST_ERR_EXHAUSTED) {
            /* The tenant's pins quota (or memory): the call is refused with
             * the numbers, and the pins it made are undone. */
            for (size_t j = 0; j < i; j++) {
                if ((*status_p)[j] == STRATA__V1__KEY_STATUS__KEY_OK) {
                    memcpy(&one, &h[j], sizeof(one));
                    (void)cd_store_unpin(d->store, e->local_id, &one);
                }
            }
            srpc_ctx_set_error(ctx, "block_hashes[%zu]: %s", i, err.msg);
            return status;
        }
        (*status_p)[i] = cd_h_key_status(status);
    }
    *n_p = n;
    return ST_OK;
}

st_status_t cd_h_pin(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__PinRequest *req = (const void *)reqm;
    Strata__V1__PinResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);

    if (req->ttl_ms > d->cfg.max_pin_ms) {
        srpc_ctx_set_error(ctx, "pin ttl_ms=%u is above the limit max_pin=%llu ms", req->ttl_ms,
                           (unsigned long long)d->cfg.max_pin_ms);
        return ST_ERR_INVALID;
    }
    return cd_h_pin_common(ctx, req->namespace_id, &req->block_hashes, 1, req->ttl_ms,
                           &resp->status, &resp->n_status);
}

st_status_t cd_h_unpin(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__UnpinRequest *req = (const void *)reqm;
    Strata__V1__UnpinResponse *resp = (void *)respm;

    return cd_h_pin_common(ctx, req->namespace_id, &req->block_hashes, 0, 0, &resp->status,
                           &resp->n_status);
}
