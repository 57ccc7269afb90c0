/*
 * tier_recover.c - the SSD tier's recovery at start (docs/tiers.md, "In
 * stratad", Recovery): one pass of ssd_iterate over the keys fills the
 * T2 index with every KV, IDX and KDA object (no payload read) and gathers
 * the SESSION-kind keys; then the namespace records re-create their
 * namespaces (through the resolver), the tenants are charged what the tier
 * holds of theirs, and the session records are put back into the store.
 */
#include "tier_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

typedef struct t_rec_ctx {
    cd_tier_t *t;
    ssd_key_t *sess; /* SESSION-kind keys: namespace and session records */
    size_t n_sess, cap_sess;
    uint64_t objects;
    int nomem;
    /* Payload bytes of KV, IDX and KDA objects per wire namespace, charged to
     * the tenants once the namespaces are back (the ssd quota). */
    uint64_t wires[CD_TIER_NS_MAX], bytes[CD_TIER_NS_MAX];
    size_t n_wires;
} t_rec_ctx_t;

/* Adds an object's bytes to its wire namespace's sum (keys come grouped by
 * namespace: the last one is the usual match). */
static void t_rec_bytes(t_rec_ctx_t *r, uint64_t wire, uint64_t len)
{
    size_t i = r->n_wires;

    if (i > 0 && r->wires[i - 1] == wire) {
        r->bytes[i - 1] += len;
        return;
    }
    for (i = 0; i < r->n_wires && r->wires[i] != wire; i++) {
    }
    if (i == r->n_wires) {
        if (i == CD_TIER_NS_MAX) {
            return; /* more namespaces than a daemon has: not one of ours */
        }
        r->wires[i] = wire;
        r->bytes[i] = 0;
        r->n_wires++;
    }
    r->bytes[i] += len;
}

static int t_rec_visit(void *arg, const ssd_key_t *key, const ssd_meta_t *meta)
{
    t_rec_ctx_t *r = arg;

    if (key->kind == SSD_SESSION) {
        if (r->n_sess == r->cap_sess) {
            size_t cap = r->cap_sess ? r->cap_sess * 2 : 256;
            ssd_key_t *nk = realloc(r->sess, sizeof(*nk) * cap);

            if (nk == NULL) {
                r->nomem = 1;
                return 1;
            }
            r->sess = nk;
            r->cap_sess = cap;
        }
        r->sess[r->n_sess++] = *key;
        return 0;
    }
    if (key->kind == SSD_KV || key->kind == SSD_IDX || key->kind == SSD_KDA) {
        /* Recovery runs alone: the lock is taken once per object anyway, cheaply. */
        if (cd_tier_index_add(r->t, key->ns, &key->id, cd_tier_tag_of(key), 0) != 0) {
            r->nomem = 1;
            return 1;
        }
        r->objects++;
        t_rec_bytes(r, key->ns, meta->length);
    }
    return 0;
}

/* Re-creates the namespace of a namespace record. */
static void t_rec_ns(cd_tier_t *t, const ssd_key_t *k, uint32_t *n_ns)
{
    uint8_t buf[CD_TIER_NS_BYTES];
    char tenant[CD_NAME_MAX + 1], model[CD_NAME_MAX + 1];
    uint32_t block_tokens = 0;
    size_t len = 0;
    cd_err_t err = {""};
    cd_tier_ns_result_t res;
    st_status_t st;
    int rc;

    st = ssd_get_buf(t->ssd, k, buf, sizeof(buf), &len, NULL);
    rc = st == ST_OK ? cd_tier_ns_decode(buf, len, tenant, model, &block_tokens) : -1;
    if (rc == -1) {
        lg_warn("ssd recovery: unreadable namespace record ns=%llu: %s", (unsigned long long)k->ns,
                st == ST_OK ? "bad format" : st_strerror(st));
        return;
    }
    if (rc != 0) {
        lg_warn("ssd recovery: bad namespace record ns=%llu", (unsigned long long)k->ns);
        return;
    }
    res = t->p.ns_open(t->p.ns_arg, k->ns, tenant, model, block_tokens, &err);
    if (res == CD_TIER_NS_OTHER_ID) {
        lg_warn("ssd recovery: namespace record ns=%llu names tenant=%s model=%s of another id",
                (unsigned long long)k->ns, tenant, model);
        return;
    }
    if (res == CD_TIER_NS_NOT_SERVED) {
        /* Not re-created, so it takes no room from the tenants of the file. */
        lg_info("ssd recovery: namespace of a tenant the tenants_file no longer names is not "
                "served tenant=%s model=%s",
                tenant, model);
        return;
    }
    if (res != CD_TIER_NS_OPENED) {
        lg_warn("ssd recovery: cannot re-create namespace tenant=%s model=%s: %s", tenant, model,
                err.msg);
        return;
    }
    (*n_ns)++;
}

/* Puts a session record back; deletes it when it expired meanwhile. */
static void t_rec_session(cd_tier_t *t, const ssd_key_t *k)
{
    uint8_t buf[CD_TIER_SESS_BYTES];
    size_t len = 0;
    uint32_t local = cd_tier_local_of(t, k->ns);
    cd_session_t rec;
    cd_err_t err = {""};
    uint64_t now_unix = cd_tier_unix_ms(), now_store = cd_store_now(t->store), created, updated;
    st_status_t st;

    if (local == 0) {
        lg_warn("ssd recovery: session of an unknown namespace ns=%llu skipped",
                (unsigned long long)k->ns);
        return;
    }
    memset(&rec, 0, sizeof(rec));
    st = ssd_get_buf(t->ssd, k, buf, sizeof(buf), &len, NULL);
    if (st != ST_OK || cd_tier_session_decode(buf, len, &rec, &created, &updated) != 0) {
        lg_warn("ssd recovery: unreadable session record ns=%llu: %s", (unsigned long long)k->ns,
                st == ST_OK ? "bad format" : st_strerror(st));
        return;
    }
    rec.id = k->id;
    if (updated + rec.ttl_ms <= now_unix) {
        (void)ssd_delete(t->ssd, k, 0, NULL, NULL);
        return;
    }
    /* Wall-clock ages back onto the store's clock (clamped at its zero). */
    rec.created_ms = now_unix - created < now_store ? now_store - (now_unix - created) : 0;
    rec.updated_ms = now_unix - updated < now_store ? now_store - (now_unix - updated) : 0;
    if (updated > now_unix) {
        rec.updated_ms = now_store;
    }
    if (created > now_unix) {
        rec.created_ms = now_store;
    }
    st = cd_store_session_restore(t->store, local, &rec, &err);
    if (st != ST_OK) {
        lg_warn("ssd recovery: session not restored ns=%llu: %s", (unsigned long long)k->ns,
                err.msg);
        return;
    }
    t->recovered_sessions++;
    if (t->p.durable_found != NULL) {
        t->p.durable_found(t->p.ns_arg, k->ns, CD_KIND_SESSION, &rec.id, 0, NULL, NULL);
    }
}

/* A KDA block's placement record: each KDA object of the block that the T2
 * index names is reported (durable_found); a record of a block gone is dropped. */
static void t_rec_place(cd_tier_t *t, const ssd_key_t *k)
{
    uint8_t buf[CD_TIER_PLACE_BYTES];
    uint16_t layers[64];
    size_t len = 0, n = 0;
    st_hash_t parent, placement;
    int has_parent;
    cd_tier_block_t *e;

    if (ssd_get_buf(t->ssd, k, buf, sizeof(buf), &len, NULL) != ST_OK ||
        cd_tier_place_decode(buf, len, &has_parent, &parent, &placement) != 0) {
        lg_warn("ssd recovery: unreadable KDA placement record ns=%llu", (unsigned long long)k->ns);
        return;
    }
    pthread_mutex_lock(&t->lock);
    e = cd_tier_index_find(t, k->ns, &k->id);
    for (uint32_t i = 0; e != NULL && i < e->n && n < 64; i++) {
        if ((e->tags[i] >> 8) == CD_KIND_KDA) {
            layers[n++] = e->tags[i] & 0xffu;
        }
    }
    pthread_mutex_unlock(&t->lock);
    if (n == 0) {
        (void)ssd_delete(t->ssd, k, 0, NULL, NULL); /* its objects are gone */
        return;
    }
    for (size_t i = 0; t->p.durable_found != NULL && i < n; i++) {
        t->p.durable_found(t->p.ns_arg, k->ns, CD_KIND_KDA, &k->id, layers[i],
                           has_parent ? &parent : NULL, &placement);
    }
}

/* After the iteration: namespaces, the tenants' ssd bytes, then sessions. */
static void t_rec_records(cd_tier_t *t, const t_rec_ctx_t *r, uint32_t *n_ns)
{
    for (size_t i = 0; i < r->n_sess; i++) {
        if (r->sess[i].layer == CD_TIER_NS_LAYER) {
            t_rec_ns(t, &r->sess[i], n_ns);
        }
    }
    for (size_t i = 0; i < r->n_wires; i++) {
        uint32_t local = cd_tier_local_of(t, r->wires[i]);

        if (local != 0) {
            cd_store_tenant_ssd_add(t->store, local, (int64_t)r->bytes[i]);
        }
    }
    for (size_t i = 0; i < r->n_sess; i++) {
        if (r->sess[i].layer == CD_TIER_PLACE_LAYER) {
            t_rec_place(t, &r->sess[i]);
        } else if (r->sess[i].layer != CD_TIER_NS_LAYER) {
            t_rec_session(t, &r->sess[i]);
        }
    }
}

st_status_t cd_tier_recover(cd_tier_t *t, cd_store_t *store)
{
    t_rec_ctx_t r;
    uint64_t t0 = cm_mono_us(), count = 0, t_iter;
    uint32_t n_ns = 0;
    st_status_t st;

    t->store = store;
    memset(&r, 0, sizeof(r));
    r.t = t;
    t->recovering = 1;
    st = ssd_iterate(t->ssd, t_rec_visit, &r, &count);
    t_iter = cm_mono_us();
    if (st == ST_OK && r.nomem) {
        st = ST_ERR_NOMEM;
    }
    if (st != ST_OK) {
        lg_error("ssd recovery failed data_dir=%s: %s", t->p.dir, st_strerror(st));
        free(r.sess);
        t->recovering = 0;
        return st;
    }
    t_rec_records(t, &r, &n_ns);
    free(r.sess);
    t->recovering = 0;
    t->recovered_objects = r.objects;
    t->recovered_ms = (cm_mono_us() - t0) / 1000;
    lg_info("ssd recovery done data_dir=%s namespaces=%u sessions=%llu blocks=%zu objects=%llu "
            "iterate_ms=%llu total_ms=%llu",
            t->p.dir, n_ns, (unsigned long long)t->recovered_sessions, t->nblocks,
            (unsigned long long)r.objects, (unsigned long long)((t_iter - t0) / 1000),
            (unsigned long long)t->recovered_ms);
    return ST_OK;
}
