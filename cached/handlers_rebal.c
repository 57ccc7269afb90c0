/*
 * handlers_rebal.c - the calls of membership changes (docs/daemon.md
 * "Membership changes"): Replicate, a peer's copy of durable objects (the
 * rebalancer's push, rebalance.h), and Drain, which hands this node's
 * durable objects to the ring without it and stops the daemon.
 */
#include "handlers.h"
#include "rebalance_internal.h"
#include "tier.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "utf8.h"

void cd_h_note_kda(cd_daemon_t *d, const cd_ns_entry_t *e, const cd_key_t *key,
                   const Strata__V1__BlockLink *link)
{
    const st_hash_t *parent = NULL;
    cd_err_t err = {""};

    if (link == NULL || link->placement.len != ST_HASH_BYTES) {
        return; /* a writer that names no placement: not moved (docs/daemon.md) */
    }
    if (link->parent_hash.len == ST_HASH_BYTES) {
        parent = (const void *)link->parent_hash.data;
    }

    (void)cd_rb_note(d->rb, e->wire_id, CD_KIND_KDA, &key->hash, key->layer, parent,
                     (const void *)link->placement.data);
    /* Kept on the SSD tier too, so that the node still moves it after a
     * restart (queued: committed with the next commit). */
    if (d->tier != NULL &&
        cd_tier_place_put(d->tier, e->wire_id, &key->hash, parent,
                          (const void *)link->placement.data, 0, &err) != ST_OK) {
        lg_warn_ratelimited("KDA placement record not written ns=%u: %s", e->local_id, err.msg);
    }
}

void cd_h_note_session(cd_daemon_t *d, const cd_ns_entry_t *e, const st_hash_t *id)
{
    (void)cd_rb_note(d->rb, e->wire_id, CD_KIND_SESSION, id, 0, NULL, NULL);
}

/* Only the cluster credential may call Replicate. */
static st_status_t cd_h_peer_only(srpc_ctx_t *ctx, const char *what)
{
    const cd_principal_t *pr = cd_au_principal(ctx);

    if (pr->pr_kind != CD_PR_PEER) {
        srpc_ctx_set_error(ctx, "%s is for the cluster's daemons (the cluster credential)", what);
        return pr->pr_kind == CD_PR_NONE ? ST_ERR_UNAUTHENTICATED : ST_ERR_PERMISSION;
    }
    return ST_OK;
}

/* The namespace of a Replicate: (tenant, model) checked, then found or made. */
static st_status_t cd_h_repl_ns(srpc_ctx_t *ctx, cd_daemon_t *d,
                                const Strata__V1__ReplicateRequest *req, cd_ns_entry_t **e_p)
{
    const char *tenant = req->tenant != NULL && req->tenant[0] ? req->tenant : "default";
    const char *model = req->model != NULL && req->model[0] ? req->model : "default";
    cd_err_t err = {""};
    st_status_t status;

    if (strlen(tenant) > CD_NAME_MAX || strlen(model) > CD_NAME_MAX ||
        utf8_bad_byte(tenant, 1) >= 0 || utf8_bad_byte(model, 1) >= 0) {
        srpc_ctx_set_error(ctx, "tenant and model must be UTF-8 text of at most %d bytes",
                           CD_NAME_MAX);
        return ST_ERR_INVALID;
    }
    if (req->block_tokens % 16 != 0 || req->block_tokens > 4096) {
        srpc_ctx_set_error(ctx, "block_tokens=%u must be a multiple of 16 in 16..4096",
                           req->block_tokens);
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_objects, "objects")) != ST_OK ||
        (status = cd_h_batch_limit(ctx, d, req->n_sessions, "sessions")) != ST_OK) {
        return status;
    }
    if (req->n_links != req->n_objects || req->n_session_checksum != req->n_sessions) {
        srpc_ctx_set_error(ctx,
                           "%zu links for %zu objects, %zu checksums for %zu sessions "
                           "(one each)",
                           req->n_links, req->n_objects, req->n_session_checksum, req->n_sessions);
        return ST_ERR_INVALID;
    }
    status = cd_daemon_ns_open(d, tenant, model, req->block_tokens, e_p, &err);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &err);
    }
    return ST_OK;
}

/*
 * A KDA copy into DRAM with one pass over its bytes: copied into the new
 * object, then hashed there, so that the checksum the sender's store kept
 * (the copy's) is compared with the bytes as this store holds them, and
 * becomes this object's checksum without a second pass. ST_ERR_CORRUPT when
 * they differ (nothing stored). An object already held goes through
 * cd_store_put (the same bytes: ST_OK; different ones: ST_ERR_EXISTS).
 */
static st_status_t cd_h_repl_store(cd_daemon_t *d, const cd_ns_entry_t *e, const cd_key_t *key,
                                   const st_hash_t *parent, const Strata__V1__InlineObject *o,
                                   cd_err_t *err)
{
    cd_put_t put;
    st_status_t status =
        cd_store_put_begin(d->store, e->local_id, key, parent, o->data.len, &put, err);

    if (status == ST_ERR_EXISTS) {
        if (cd_checksum(o->data.data, o->data.len) != o->checksum) {
            return ST_ERR_CORRUPT;
        }
        return cd_store_put(d->store, e->local_id, key, parent, o->data.data, o->data.len, err);
    }
    if (status != ST_OK) {
        return status;
    }
    memcpy(put.pt_data, o->data.data, o->data.len);
    if (cd_checksum(put.pt_data, o->data.len) != o->checksum) {
        cd_store_put_abort(d->store, &put);
        return ST_ERR_CORRUPT;
    }
    status = cd_store_put_commit(d->store, &put, o->checksum, err);
    if (status != ST_OK) {
        cd_store_put_abort(d->store, &put);
    }
    return status;
}

/* Object i of a Replicate: a KDA copy stored (and noted), or asked about. */
static Strata__V1__KeyStatus cd_h_repl_object(cd_daemon_t *d, const cd_ns_entry_t *e,
                                              const Strata__V1__InlineObject *o,
                                              const Strata__V1__BlockLink *l, int check)
{
    const st_hash_t *parent = NULL;
    cd_err_t err = {""};
    cd_key_t key;
    st_status_t status;

    if (cd_h_key(o->key, &key) != ST_OK || key.kind != CD_KIND_KDA ||
        l->hash.len != ST_HASH_BYTES || memcmp(l->hash.data, key.hash.b, ST_HASH_BYTES) != 0 ||
        (l->parent_hash.len != 0 && l->parent_hash.len != ST_HASH_BYTES) ||
        l->placement.len != ST_HASH_BYTES) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    if (check) {
        uint64_t len = 0;
        cd_location_t where;

        status = cd_store_get(d->store, e->local_id, &key, NULL, 0, &len, &where, &err);
        if (status == ST_ERR_NOT_FOUND && d->tier != NULL &&
            cd_tier_promote(d->tier, e->local_id, &key.hash) > 0) {
            status = cd_store_get(d->store, e->local_id, &key, NULL, 0, &len, &where, &err);
        }
        return status == ST_ERR_INVALID ? STRATA__V1__KEY_STATUS__KEY_OK
                                        : STRATA__V1__KEY_STATUS__KEY_NOT_FOUND;
    }
    if (o->data.len == 0 || o->data.len > d->cfg.max_object_bytes) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    if (l->parent_hash.len == ST_HASH_BYTES) {
        parent = (const void *)l->parent_hash.data;
    }
    status = cd_h_repl_store(d, e, &key, parent, o, &err);
    if (status == ST_ERR_CORRUPT) {
        lg_warn_ratelimited("replicate: a KDA copy failed its checksum ns=%u", e->local_id);
        return STRATA__V1__KEY_STATUS__KEY_CORRUPT;
    }
    if (status == ST_OK && d->tier != NULL) {
        /* Queued: the call commits its copies at once (cd_tier_flush) before it answers. */
        status = cd_tier_put_object(d->tier, e->wire_id, &key, parent, o->data.data, o->data.len, 0,
                                    &err);
    }
    if (status != ST_OK) {
        lg_warn_ratelimited("replicate: KDA copy refused ns=%u: %s", e->local_id, err.msg);
        return cd_h_key_status(status);
    }
    cd_h_note_kda(d, e, &key, l);
    return STRATA__V1__KEY_STATUS__KEY_OK;
}

/* Session i of a Replicate: the record restored unless this node holds a
 * newer version (then it is kept: versions never go back), or asked about. */
static Strata__V1__KeyStatus cd_h_repl_session(cd_daemon_t *d, const cd_ns_entry_t *e,
                                               const Strata__V1__SessionInfo *si, uint64_t sum,
                                               int check)
{
    cd_session_t rec, have;
    cd_err_t err = {""};
    uint64_t now_unix = cm_real_ms(), now_store = cd_store_now(d->store);
    st_status_t status;

    if (si->session_id.len != ST_HASH_BYTES || si->head_hash.len != ST_HASH_BYTES) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    memset(&rec, 0, sizeof(rec));
    memcpy(rec.id.b, si->session_id.data, ST_HASH_BYTES);
    memcpy(rec.head.b, si->head_hash.data, ST_HASH_BYTES);
    rec.length = si->length;
    rec.version = si->version;
    if (cd_rb_session_sum(&rec.id, &rec.head, rec.length, rec.version) != sum) {
        lg_warn_ratelimited("replicate: a session record failed its checksum ns=%u", e->local_id);
        return STRATA__V1__KEY_STATUS__KEY_CORRUPT;
    }
    status = cd_store_session_get(d->store, e->local_id, &rec.id, &have);
    if (status == ST_OK && have.version >= rec.version) {
        return STRATA__V1__KEY_STATUS__KEY_OK; /* held, as new or newer */
    }
    if (check) {
        return STRATA__V1__KEY_STATUS__KEY_NOT_FOUND;
    }
    /* Wall-clock times back to this store's clock. */
    rec.created_ms =
        now_store - (now_unix > si->created_unix_ms ? now_unix - si->created_unix_ms : 0);
    rec.updated_ms =
        now_store - (now_unix > si->updated_unix_ms ? now_unix - si->updated_unix_ms : 0);
    rec.ttl_ms = si->ttl_ms ? si->ttl_ms : d->cfg.session_ttl_ms;
    status = cd_store_session_restore(d->store, e->local_id, &rec, &err);
    if (status == ST_OK && d->tier != NULL) {
        status = cd_tier_session_put(d->tier, e->wire_id, &rec, 0, &err); /* flushed below */
    }
    if (status != ST_OK) {
        lg_warn_ratelimited("replicate: session copy refused ns=%u: %s", e->local_id, err.msg);
        return cd_h_key_status(status);
    }
    cd_h_note_session(d, e, &rec.id);
    return STRATA__V1__KEY_STATUS__KEY_OK;
}

st_status_t cd_h_replicate(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                           void *arg)
{
    const Strata__V1__ReplicateRequest *req = (const void *)reqm;
    Strata__V1__ReplicateResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    st_status_t status;

    (void)arg;
    if ((status = cd_h_peer_only(ctx, "Replicate")) != ST_OK ||
        (status = cd_h_repl_ns(ctx, d, req, &e)) != ST_OK) {
        return status;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_objects + 1));
    resp->session_status =
        srpc_ctx_alloc(ctx, sizeof(*resp->session_status) * (req->n_sessions + 1));
    if (resp->status == NULL || resp->session_status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_objects; i++) {
        resp->status[i] = cd_h_repl_object(d, e, req->objects[i], req->links[i], req->check_only);
    }
    resp->n_status = req->n_objects;
    for (size_t i = 0; i < req->n_sessions; i++) {
        resp->session_status[i] =
            cd_h_repl_session(d, e, req->sessions[i], req->session_checksum[i], req->check_only);
    }
    resp->n_session_status = req->n_sessions;
    /* One commit for every copy of the call: acknowledged only once on disk. */
    if (!req->check_only && d->tier != NULL && (status = cd_tier_flush(d->tier)) != ST_OK) {
        lg_warn_ratelimited("replicate: the SSD tier did not commit the copies: %s",
                            st_strerror(status));
        for (size_t i = 0; i < req->n_objects; i++) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
        }
        for (size_t i = 0; i < req->n_sessions; i++) {
            resp->session_status[i] = STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
        }
    }
    return ST_OK;
}

st_status_t cd_h_drain(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__DrainRequest *req = (const void *)reqm;
    Strata__V1__DrainResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    const cd_principal_t *pr = cd_au_principal(ctx);
    cd_rb_stats_t st;
    st_status_t status;

    (void)arg;
    if (pr->pr_kind != CD_PR_PEER && pr->pr_kind != CD_PR_ANY) {
        srpc_ctx_set_error(ctx, "Drain needs the cluster credential or the admin token "
                                "(auth_token), not a tenant's");
        return pr->pr_kind == CD_PR_NONE ? ST_ERR_UNAUTHENTICATED : ST_ERR_PERMISSION;
    }
    status = cd_daemon_drain_start(d, req->timeout_ms);
    if (status != ST_OK) {
        srpc_ctx_set_error(ctx, "node %s cannot drain: %s", d->cfg.node_id, st_strerror(status));
        return status;
    }
    cd_rb_stats(d->rb, &st);
    resp->node_id = d->cfg.node_id;
    resp->pending = st.catalog; /* held here: each handed over, or checked, before it stops */
    return ST_OK;
}
