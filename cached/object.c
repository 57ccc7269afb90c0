/* object.c - objects: put and get inline, reserve/commit/abort, delete,
 * locate and the chain lookup. */
#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "st_log.h"
#include "store_internal.h"

static const char *const kind_names[CD_KIND_COUNT] = {"KV", "IDX", "KDA", "SESSION", "VIS"};

/* Checks a key against the limits. */
static st_status_t check_key(const cd_ns_t *ns, const cd_key_t *key, cd_err_t *err)
{
    const cd_limits_t *l = &ns->ns_store->ss_cfg.limits;

    if (key == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no key given");
    }
    if (key->kind >= CD_KIND_COUNT || key->kind == CD_KIND_SESSION) {
        return cd_errf(err, ST_ERR_INVALID,
                       "object kind %u refused: KV, IDX, KDA or VIS (sessions use the session "
                       "calls)",
                       key->kind);
    }
    if (key->layer >= l->max_layers) {
        return cd_errf(err, ST_ERR_INVALID,
                       "layer %u of a %s object is above the limit "
                       "max_layers=%u",
                       key->layer, kind_names[key->kind], l->max_layers);
    }
    return ST_OK;
}

static st_status_t check_len(const cd_ns_t *ns, uint64_t len, cd_err_t *err)
{
    uint64_t max = ns->ns_store->ss_cfg.limits.max_object_bytes;

    if (len == 0 || len > max) {
        return cd_errf(err, ST_ERR_INVALID,
                       "object of %llu bytes refused: the limit max_object_bytes is %llu and "
                       "empty objects are not stored",
                       (unsigned long long)len, (unsigned long long)max);
    }
    return ST_OK;
}

static st_status_t check_lease(const cd_store_t *s, uint64_t lease_ms, cd_err_t *err)
{
    uint64_t max = s->ss_cfg.limits.max_lease_ms;

    if (lease_ms != CD_LEASE_DEFAULT && lease_ms > max) {
        return cd_errf(err, ST_ERR_INVALID,
                       "lease of %llu ms refused: the limit max_lease_ms is %llu",
                       (unsigned long long)lease_ms, (unsigned long long)max);
    }
    return ST_OK;
}

static void fill_location(const cd_ns_t *ns, const cd_obj_t *o, cd_location_t *w)
{
    w->region = o->ob_ext.region;
    w->offset = cd_extent_region_offset(&ns->ns_slab, &o->ob_ext);
    w->length = o->ob_len;
    w->checksum = o->ob_state == OBJ_COMMITTED ? o->ob_checksum : 0;
    w->generation = o->ob_ext.gen;
    w->row_bytes = o->ob_row_bytes;
    w->row_group = o->ob_n_rowsum > 0 ? PR_ROW_GROUP : 0;
    w->n_rowsum = o->ob_n_rowsum;
    w->rowsum = NULL;
}

static void do_hold_blocks(cd_ns_t *ns, cd_block_t *held[2])
{
    for (int i = 0; i < 2; i++) {
        if (held[i] != NULL) {
            cd_radix_hold(&ns->ns_radix, held[i], 0);
        }
    }
}

/* Drops the holds do_hold_blocks() took and forgets them. */
static void do_unhold_blocks(cd_ns_t *ns, cd_block_t *held[2])
{
    for (int i = 0; i < 2; i++) {
        if (held[i] != NULL) {
            cd_radix_unhold(&ns->ns_radix, held[i], 0);
            held[i] = NULL;
        }
    }
}

/* Allocates an object record and its extent, evicting when memory is short.
 * Makes room in the object table and the tree for one insert too. */
static st_status_t do_obj_new(cd_ns_t *ns, const cd_key_t *key, const st_hash_t *parent,
                              uint64_t len, cd_obj_t **obj_p, cd_err_t *err)
{
    cd_budget_t *b = &ns->ns_store->ss_budget;
    char msg[CD_SLAB_MSG_LEN];
    cd_block_t *held[2];
    cd_obj_t *o;
    st_status_t st;

    /* Hold the parent block and the object's own block (when present) while
     * this object is being written, so that the evictions its allocation
     * may cause never take them: a child must not outlive its parent, and
     * the block must not lose its other objects to make room for this one. */
    held[0] = parent != NULL ? cd_radix_find(&ns->ns_radix, parent) : NULL;
    held[1] = cd_radix_find(&ns->ns_radix, &key->hash);
    do_hold_blocks(ns, held);
    /* The tenant's memory quota first: past it, the tenant's own blocks go. */
    st = do_tenant_room(ns, len, err);
    if (st != ST_OK) {
        do_unhold_blocks(ns, held);
        return st;
    }
    CD_WITH_EVICTION(ns, st, cd_budget_charge_meta(b, sizeof(cd_obj_t)));
    if (st != ST_OK) {
        do_unhold_blocks(ns, held);
        return do_exhausted(ns, err, "an object record", sizeof(cd_obj_t));
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
        do_unhold_blocks(ns, held);
        cd_budget_release_meta(b, sizeof(cd_obj_t));
        return cd_errf(err, ST_ERR_NOMEM, "out of memory for an object record");
    }
    o->ob_held[0] = held[0];
    o->ob_held[1] = held[1];
    CD_WITH_EVICTION(ns, st, cd_htab_reserve(&ns->ns_objs, 1));
    if (st == ST_OK) {
        CD_WITH_EVICTION(ns, st, cd_radix_prepare(&ns->ns_radix, parent));
    }
    if (st != ST_OK) {
        do_unhold_blocks(ns, o->ob_held);
        free(o);
        cd_budget_release_meta(b, sizeof(cd_obj_t));
        return st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, "the index", 0)
                                      : cd_errf(err, st, "out of memory growing the index");
    }
    st = cd_slab_alloc(&ns->ns_slab, len, &o->ob_ext, msg);
    if (st != ST_OK) {
        do_unhold_blocks(ns, o->ob_held);
        free(o);
        cd_budget_release_meta(b, sizeof(cd_obj_t));
        if (st == ST_ERR_EXHAUSTED) {
            ns->ns_st.exhausted++;
        }
        return cd_errf(err, st, "%s (namespace %u, %s object)", msg, ns->ns_id,
                       kind_names[key->kind]);
    }
    /* Charged as allocated (the extent's size class); do_obj_free gives it back. */
    atomic_fetch_add_explicit(&ns->ns_tn->tn_used[CD_RES_MEMORY], o->ob_ext.size,
                              memory_order_relaxed);
    o->ob_key = *key;
    o->ob_len = len;
    o->ob_created = cd_store_now(ns->ns_store);
    if (parent != NULL) {
        o->ob_has_parent = 1;
        o->ob_parent = *parent;
    }
    *obj_p = o;
    return ST_OK;
}

/* Makes a committed object visible: its block (created under its parent if
 * needed), the object table, the counters. Room was made by do_obj_new()
 * (or again by the caller), so this cannot fail. */
static void do_obj_attach(cd_ns_t *ns, cd_obj_t *o, uint64_t now)
{
    cd_block_t *b = NULL;

    (void)cd_radix_insert(&ns->ns_radix, &o->ob_key.hash, o->ob_has_parent ? &o->ob_parent : NULL,
                          now, &b, NULL);
    o->ob_state = OBJ_COMMITTED;
    o->ob_block = b;
    o->ob_prev = NULL;
    o->ob_next = b->bk_objs;
    if (b->bk_objs != NULL) {
        b->bk_objs->ob_prev = o;
    }
    b->bk_objs = o;
    b->bk_nobjs++;
    b->bk_present[o->ob_key.kind][o->ob_key.layer / 64] |= 1ull << (o->ob_key.layer % 64);
    cd_radix_changed(b);
    cd_radix_add_bytes(&ns->ns_radix, b, (int64_t)o->ob_ext.size);
    cd_radix_touch(&ns->ns_radix, b, now);
    (void)cd_htab_insert(&ns->ns_objs, &o->ob_key.hash, cd_obj_tag(&o->ob_key), o);
    ns->ns_st.objects[o->ob_key.kind]++;
    ns->ns_st.bytes[o->ob_key.kind] += o->ob_len;
}

/* Takes a committed object out of its block and the table, and frees it.
 * The block leaves the tree if it is left empty and removable. */
static void do_obj_delete(cd_ns_t *ns, cd_obj_t *o)
{
    cd_block_t *b = o->ob_block;

    cd_htab_remove(&ns->ns_objs, &o->ob_key.hash, cd_obj_tag(&o->ob_key));
    if (o->ob_prev != NULL) {
        o->ob_prev->ob_next = o->ob_next;
    } else {
        b->bk_objs = o->ob_next;
    }
    if (o->ob_next != NULL) {
        o->ob_next->ob_prev = o->ob_prev;
    }
    b->bk_present[o->ob_key.kind][o->ob_key.layer / 64] &= ~(1ull << (o->ob_key.layer % 64));
    cd_radix_changed(b);
    do_obj_free(ns, o);
    if (b->bk_nobjs == 0 && cd_radix_removable(b)) {
        cd_radix_remove(&ns->ns_radix, b);
    }
}

static st_status_t ns_lookup(cd_store_t *s, uint32_t ns_id, cd_ns_t **ns_p, cd_err_t *err)
{
    *ns_p = cd_ns_get(s, ns_id);
    return *ns_p != NULL ? ST_OK : cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
}

/* --- put and get -------------------------------------------------------------------- */

static st_status_t do_put(cd_ns_t *ns, const cd_key_t *key, const st_hash_t *parent,
                          const void *data, uint64_t len, uint32_t row_bytes, cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    cd_obj_t *o = cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key));
    st_status_t st;

    ns->ns_st.puts++;
    if (o != NULL) {
        if (o->ob_len == len && o->ob_checksum == cd_checksum(data, len)) {
            cd_radix_touch(&ns->ns_radix, o->ob_block, now);
            return ST_OK;
        }
        return cd_errf(err, ST_ERR_EXISTS,
                       "a different %s object (layer %u) is already committed under this hash; "
                       "objects are immutable",
                       kind_names[key->kind], key->layer);
    }
    st = do_obj_new(ns, key, parent, len, &o, err);
    if (st != ST_OK) {
        return st;
    }
    memcpy(cd_extent_ptr(&ns->ns_slab, &o->ob_ext), data, len);
    o->ob_row_bytes = row_bytes;
    o->ob_checksum = do_rowsum_compute(ns, o, data); /* of the caller's bytes */
    do_obj_attach(ns, o, now);
    do_unhold_blocks(ns, o->ob_held);
    return ST_OK;
}

/* The checks both kinds of put make: namespace, key, length, and the
 * caller's pointer (what names it in the error). */
static st_status_t put_check(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, uint64_t len,
                             const void *ptr, const char *what, cd_ns_t **ns_p, cd_err_t *err)
{
    st_status_t st = ns_lookup(s, ns_id, ns_p, err);

    if (st == ST_OK) {
        st = check_key(*ns_p, key, err);
    }
    if (st == ST_OK) {
        st = check_len(*ns_p, len, err);
    }
    if (st == ST_OK && ptr == NULL) {
        st = cd_errf(err, ST_ERR_INVALID, "no %s given", what);
    }
    return st;
}

st_status_t cd_store_put(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                         const st_hash_t *parent, const void *data, uint64_t len, cd_err_t *err)
{
    return cd_store_put_rows(s, ns_id, key, parent, data, len, 0, err);
}

st_status_t cd_store_put_rows(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                              const st_hash_t *parent, const void *data, uint64_t len,
                              uint32_t row_bytes, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = put_check(s, ns_id, key, len, data, "data", &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (key->kind == CD_KIND_VIS) {
        parent = NULL;
    }
    if (row_bytes != 0 && row_bytes < PR_ROW_BYTES_MIN) {
        return cd_errf(err, ST_ERR_INVALID, "row_bytes %u: rows have at least %u bytes (or 0)",
                       row_bytes, PR_ROW_BYTES_MIN);
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_put(ns, key, parent, data, len, row_bytes, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

/* --- put by the caller's copy -------------------------------------------------------- */

st_status_t cd_store_put_begin(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                               const st_hash_t *parent, uint64_t len, cd_put_t *put, cd_err_t *err)
{
    cd_ns_t *ns;
    cd_obj_t *o = NULL;
    st_status_t st = put_check(s, ns_id, key, len, put, "put handle", &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (key->kind == CD_KIND_VIS) {
        parent = NULL;
    }
    pthread_mutex_lock(&ns->ns_lock);
    ns->ns_st.puts++;
    if (cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key)) != NULL) {
        st = cd_errf(err, ST_ERR_EXISTS,
                     "a %s object (layer %u) is already committed under "
                     "this hash",
                     kind_names[key->kind], key->layer);
    } else {
        st = do_obj_new(ns, key, parent, len, &o, err);
    }
    if (st == ST_OK) {
        put->pt_ns_id = ns_id;
        put->pt_obj = o;
        put->pt_data = cd_extent_ptr(&ns->ns_slab, &o->ob_ext);
        put->pt_tiered = 0;
        put->pt_row_bytes = 0;
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

st_status_t cd_store_put_commit(cd_store_t *s, cd_put_t *put, uint64_t checksum, cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, put->pt_ns_id);
    cd_obj_t *o = put->pt_obj, *old;
    st_status_t st;

    pthread_mutex_lock(&ns->ns_lock);
    old = cd_htab_find(&ns->ns_objs, &o->ob_key.hash, cd_obj_tag(&o->ob_key));
    if (old != NULL) {
        int same = old->ob_len == o->ob_len && old->ob_checksum == checksum;

        if (!same) {
            pthread_mutex_unlock(&ns->ns_lock);
            return cd_errf(err, ST_ERR_EXISTS,
                           "a different %s object (layer %u) was committed under this hash "
                           "meanwhile; objects are immutable",
                           kind_names[o->ob_key.kind], o->ob_key.layer);
        }
        do_unhold_blocks(ns, o->ob_held);
        do_obj_free(ns, o);
        pthread_mutex_unlock(&ns->ns_lock);
        put->pt_obj = NULL;
        return ST_OK;
    }
    o->ob_row_bytes = put->pt_row_bytes;
    if (o->ob_row_bytes != 0 && do_rowsum_compute(ns, o, NULL) != checksum) {
        /* The extent changed since the caller verified it: no sums of it. */
        do_rowsum_free(ns, o);
        st_warn_ratelimited("promoted object changed before its row sums were taken: none kept "
                            "ns=%u",
                            ns->ns_id);
    }
    /* Room for the insert again: evictions since the begin may have used
     * what was set aside then. */
    CD_WITH_EVICTION(ns, st, cd_htab_reserve(&ns->ns_objs, 1));
    if (st == ST_OK) {
        CD_WITH_EVICTION(ns, st,
                         cd_radix_prepare(&ns->ns_radix, o->ob_has_parent ? &o->ob_parent : NULL));
    }
    if (st != ST_OK) {
        st = st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, "the index", 0)
                                    : cd_errf(err, st, "out of memory growing the index");
        pthread_mutex_unlock(&ns->ns_lock);
        return st;
    }
    o->ob_checksum = checksum;
    o->ob_tiered = put->pt_tiered;
    do_obj_attach(ns, o, cd_store_now(ns->ns_store));
    do_unhold_blocks(ns, o->ob_held);
    pthread_mutex_unlock(&ns->ns_lock);
    put->pt_obj = NULL;
    return ST_OK;
}

void cd_store_put_abort(cd_store_t *s, cd_put_t *put)
{
    cd_ns_t *ns = cd_ns_get(s, put->pt_ns_id);
    cd_obj_t *o = put->pt_obj;

    if (o == NULL || ns == NULL) {
        return;
    }
    pthread_mutex_lock(&ns->ns_lock);
    do_unhold_blocks(ns, o->ob_held);
    do_obj_free(ns, o);
    pthread_mutex_unlock(&ns->ns_lock);
    put->pt_obj = NULL;
}

static st_status_t do_get(cd_ns_t *ns, const cd_key_t *key, void *buf, uint64_t cap,
                          uint64_t *len_p, cd_location_t *where_p, cd_err_t *err)
{
    cd_obj_t *o = cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key));
    const void *p;

    ns->ns_st.gets++;
    if (o == NULL) {
        ns->ns_st.get_misses++;
        return cd_errf(err, ST_ERR_NOT_FOUND, "no %s object (layer %u) under this hash",
                       kind_names[key->kind], key->layer);
    }
    *len_p = o->ob_len;
    if (cap < o->ob_len) {
        return cd_errf(err, ST_ERR_INVALID, "buffer of %llu bytes is too small for %llu",
                       (unsigned long long)cap, (unsigned long long)o->ob_len);
    }
    p = cd_extent_ptr(&ns->ns_slab, &o->ob_ext);
    if (cd_checksum(p, o->ob_len) != o->ob_checksum) {
        /*
         * Damaged in memory: counted, and dropped so that no later lookup
         * claims it, unless a lease still holds its block (one-sided readers
         * may be reading the extent; it goes with the block's eviction).
         */
        int drop = o->ob_block->bk_leases == 0 && o->ob_block->bk_wb == 0;

        ns->ns_st.corrupt++;
        st_log_ratelimited(ST_LOG_ERROR,
                           "object bytes do not match their checksum ns=%u kind=%s layer=%u "
                           "region=%u gen=%llu action=%s",
                           ns->ns_id, kind_names[key->kind], key->layer, o->ob_ext.region,
                           (unsigned long long)o->ob_ext.gen, drop ? "dropped" : "kept_leased");
        if (drop) {
            do_obj_delete(ns, o);
        }
        return cd_errf(err, ST_ERR_CORRUPT,
                       "stored bytes fail their checksum (%s); treat as a miss",
                       drop ? "dropped" : "kept while leased");
    }
    memcpy(buf, p, o->ob_len);
    if (where_p != NULL) {
        fill_location(ns, o, where_p);
    }
    cd_radix_touch(&ns->ns_radix, o->ob_block, cd_store_now(ns->ns_store));
    return ST_OK;
}

st_status_t cd_store_get(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, void *buf,
                         uint64_t cap, uint64_t *len_p, cd_location_t *where_p, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st == ST_OK) {
        st = check_key(ns, key, err);
    }
    if (st == ST_OK && (len_p == NULL || (buf == NULL && cap > 0))) {
        st = cd_errf(err, ST_ERR_INVALID, "no length or buffer given");
    }
    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_get(ns, key, buf, cap, len_p, where_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

/* --- reserve, commit, abort ------------------------------------------------------------ */

/* Stops the reservation's one-sided writes (its write key): before its
 * bytes are checksummed and before its extent can be reused. */
static void resv_fence(cd_ns_t *ns, cd_obj_t *o)
{
    const cd_store_config_t *cfg = &ns->ns_store->ss_cfg;

    if (cfg->resv_end != NULL) {
        cfg->resv_end(cfg->chunk_ctx, ns->ns_id, o->ob_resv_id);
    }
}

static void resv_unlink(cd_ns_t *ns, cd_obj_t *o)
{
    st_hash_t key = cd_htab_id_key(o->ob_resv_id);

    resv_fence(ns, o);

    cd_htab_remove(&ns->ns_ids, &key, ID_RESV);
    if (o->ob_prev != NULL) {
        o->ob_prev->ob_next = o->ob_next;
    } else {
        ns->ns_resv_head = o->ob_next;
    }
    if (o->ob_next != NULL) {
        o->ob_next->ob_prev = o->ob_prev;
    } else {
        ns->ns_resv_tail = o->ob_prev;
    }
    o->ob_next = o->ob_prev = NULL;
    ns->ns_st.reservations_active--;
    ns->ns_st.reserved_bytes -= o->ob_len;
    cd_tenant_release(ns->ns_tn, CD_RES_RESERVATIONS, 1);
}

static void resv_drop(cd_ns_t *ns, cd_obj_t *o)
{
    resv_unlink(ns, o);
    do_unhold_blocks(ns, o->ob_held);
    do_obj_free(ns, o);
}

static st_status_t do_reserve(cd_ns_t *ns, const cd_resv_req_t *reqs, size_t n, cd_resv_t *out,
                              cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    uint64_t ttl = ns->ns_store->ss_cfg.limits.reservation_ms;
    st_status_t st = ST_OK;
    size_t i;

    for (i = 0; i < n; i++) {
        const cd_resv_req_t *rq = &reqs[i];
        const st_hash_t *parent = rq->key.kind == CD_KIND_VIS ? NULL : rq->parent;
        cd_obj_t *o;
        st_hash_t key;

        memset(&out[i], 0, sizeof(out[i]));
        if (cd_htab_find(&ns->ns_objs, &rq->key.hash, cd_obj_tag(&rq->key)) != NULL) {
            out[i].status = ST_ERR_EXISTS;
            continue;
        }
        st = cd_tenant_charge(ns->ns_tn, CD_RES_RESERVATIONS, 1, err);
        if (st != ST_OK) {
            break;
        }
        st = do_obj_new(ns, &rq->key, parent, rq->length, &o, err);
        if (st == ST_OK) {
            CD_WITH_EVICTION(ns, st, cd_htab_reserve(&ns->ns_ids, 1));
            if (st != ST_OK) {
                do_unhold_blocks(ns, o->ob_held);
                do_obj_free(ns, o);
                st = st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, "a reservation", 0)
                                            : cd_errf(err, st, "out of memory for a reservation");
            }
        }
        if (st != ST_OK) {
            cd_tenant_release(ns->ns_tn, CD_RES_RESERVATIONS, 1);
            break;
        }
        o->ob_state = OBJ_RESERVED;
        o->ob_row_bytes = rq->row_bytes;
        o->ob_resv_id = do_next_id(ns);
        o->ob_expires = now + ttl;
        key = cd_htab_id_key(o->ob_resv_id);
        (void)cd_htab_insert(&ns->ns_ids, &key, ID_RESV, o);
        o->ob_prev = ns->ns_resv_tail;
        o->ob_next = NULL;
        if (ns->ns_resv_tail != NULL) {
            ns->ns_resv_tail->ob_next = o;
        } else {
            ns->ns_resv_head = o;
        }
        ns->ns_resv_tail = o;
        ns->ns_st.reservations_active++;
        ns->ns_st.reservations_granted++;
        ns->ns_st.reserved_bytes += o->ob_len;
        out[i].status = ST_OK;
        out[i].id = o->ob_resv_id;
        out[i].expires_ms = o->ob_expires;
        fill_location(ns, o, &out[i].where);
    }
    if (st != ST_OK) {
        /* All or nothing: undo what this call reserved. */
        for (size_t j = 0; j < i; j++) {
            st_hash_t key = cd_htab_id_key(out[j].id);
            cd_obj_t *o;

            if (out[j].status != ST_OK) {
                continue;
            }
            o = cd_htab_find(&ns->ns_ids, &key, ID_RESV);
            if (o != NULL) {
                resv_drop(ns, o);
                ns->ns_st.reservations_granted--;
            }
            out[j].status = st;
            out[j].id = 0;
        }
    }
    return st;
}

st_status_t cd_store_reserve(cd_store_t *s, uint32_t ns_id, const cd_resv_req_t *reqs, size_t n,
                             cd_resv_t *out, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (reqs == NULL || out == NULL || n == 0 || n > s->ss_cfg.limits.max_batch) {
        return cd_errf(err, ST_ERR_INVALID,
                       "%zu objects in one reserve: the limit max_batch is "
                       "%u (and at least one is needed)",
                       n, s->ss_cfg.limits.max_batch);
    }
    for (size_t i = 0; i < n; i++) {
        st = check_key(ns, &reqs[i].key, err);
        if (st == ST_OK) {
            st = check_len(ns, reqs[i].length, err);
        }
        if (st == ST_OK && reqs[i].row_bytes != 0 && reqs[i].row_bytes < PR_ROW_BYTES_MIN) {
            st = cd_errf(err, ST_ERR_INVALID, "row_bytes %u: rows have at least %u bytes (or 0)",
                         reqs[i].row_bytes, PR_ROW_BYTES_MIN);
        }
        if (st != ST_OK) {
            return st;
        }
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_reserve(ns, reqs, n, out, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

static st_status_t do_commit(cd_ns_t *ns, uint64_t resv_id, uint64_t claimed, cd_key_t *key_p,
                             st_hash_t *parent_p, int *has_parent_p, cd_err_t *err)
{
    st_hash_t key = cd_htab_id_key(resv_id);
    cd_obj_t *o = cd_htab_find(&ns->ns_ids, &key, ID_RESV), *old;
    uint64_t actual;
    st_status_t st;

    if (o == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "reservation %llu is unknown or expired",
                       (unsigned long long)resv_id);
    }
    if (key_p != NULL) {
        *key_p = o->ob_key;
        *has_parent_p = o->ob_has_parent;
        *parent_p = o->ob_parent;
    }
    resv_fence(ns, o); /* no write may land between the checksum and the reader */
    /* The row sums (ob_row_bytes) in the same pass, of the same bytes. */
    actual = do_rowsum_compute(ns, o, NULL);
    if (actual != claimed) {
        do_rowsum_free(ns, o);
        ns->ns_st.corrupt++;
        return cd_errf(err, ST_ERR_CORRUPT,
                       "commit refused: the %llu bytes in reservation %llu hash to %016llx, the "
                       "client claims %016llx",
                       (unsigned long long)o->ob_len, (unsigned long long)resv_id,
                       (unsigned long long)actual, (unsigned long long)claimed);
    }
    old = cd_htab_find(&ns->ns_objs, &o->ob_key.hash, cd_obj_tag(&o->ob_key));
    if (old != NULL) {
        int same = old->ob_len == o->ob_len && old->ob_checksum == actual;

        resv_drop(ns, o);
        if (same) {
            ns->ns_st.reservations_committed++;
            return ST_OK;
        }
        return cd_errf(err, ST_ERR_EXISTS,
                       "another writer committed different bytes under "
                       "this key first; reservation %llu dropped",
                       (unsigned long long)resv_id);
    }
    /* Room for the insert again: evictions since the reserve may have used
     * what was set aside then. */
    CD_WITH_EVICTION(ns, st, cd_htab_reserve(&ns->ns_objs, 1));
    if (st == ST_OK) {
        CD_WITH_EVICTION(ns, st,
                         cd_radix_prepare(&ns->ns_radix, o->ob_has_parent ? &o->ob_parent : NULL));
    }
    if (st != ST_OK) {
        return st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, "the index", 0)
                                      : cd_errf(err, st, "out of memory growing the index");
    }
    resv_unlink(ns, o);
    o->ob_checksum = actual;
    do_obj_attach(ns, o, cd_store_now(ns->ns_store));
    do_unhold_blocks(ns, o->ob_held);
    ns->ns_st.reservations_committed++;
    return ST_OK;
}

st_status_t cd_store_commit(cd_store_t *s, uint32_t ns_id, uint64_t resv_id, uint64_t checksum,
                            cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_commit(ns, resv_id, checksum, NULL, NULL, NULL, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

st_status_t cd_store_commit_key(cd_store_t *s, uint32_t ns_id, uint64_t resv_id, uint64_t checksum,
                                cd_key_t *key_p, st_hash_t *parent_p, int *has_parent_p,
                                cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (key_p == NULL || parent_p == NULL || has_parent_p == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no place for the committed key");
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_commit(ns, resv_id, checksum, key_p, parent_p, has_parent_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

st_status_t cd_store_abort(cd_store_t *s, uint32_t ns_id, uint64_t resv_id)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    st_hash_t key = cd_htab_id_key(resv_id);
    cd_obj_t *o;

    if (ns == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&ns->ns_lock);
    o = cd_htab_find(&ns->ns_ids, &key, ID_RESV);
    if (o != NULL) {
        resv_drop(ns, o);
        ns->ns_st.reservations_aborted++;
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return o != NULL ? ST_OK : ST_ERR_NOT_FOUND;
}

uint64_t do_reap_reservations(cd_ns_t *ns, uint64_t now)
{
    uint64_t n = 0;

    while (ns->ns_resv_head != NULL && ns->ns_resv_head->ob_expires <= now) {
        resv_drop(ns, ns->ns_resv_head);
        ns->ns_st.reservations_expired++;
        n++;
    }
    return n;
}

void do_reservations_destroy(cd_ns_t *ns)
{
    while (ns->ns_resv_head != NULL) {
        resv_drop(ns, ns->ns_resv_head);
    }
}

/* --- delete ---------------------------------------------------------------------------- */

st_status_t cd_store_delete(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, cd_err_t *err)
{
    cd_ns_t *ns;
    cd_obj_t *o;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st == ST_OK) {
        st = check_key(ns, key, err);
    }
    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    o = cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key));
    if (o == NULL) {
        st = cd_errf(err, ST_ERR_NOT_FOUND, "no %s object (layer %u) under this hash",
                     kind_names[key->kind], key->layer);
    } else if (o->ob_block->bk_leases + o->ob_block->bk_pins + o->ob_block->bk_wb > 0) {
        st = cd_errf(err, ST_ERR_BUSY,
                     "the object's block is leased (%u), pinned (%u) or being written to SSD (%u)",
                     o->ob_block->bk_leases, o->ob_block->bk_pins, o->ob_block->bk_wb);
    } else {
        do_obj_delete(ns, o);
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

/* --- locate and lookup --------------------------------------------------------------------- */

static st_status_t do_locate(cd_ns_t *ns, const cd_key_t *keys, size_t n, uint64_t lease_ms,
                             cd_located_t *out, uint64_t *lease_id_p, uint64_t *expires_p,
                             cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    cd_lease_t *l = NULL;
    st_status_t st;

    if (lease_ms != CD_LEASE_NONE) {
        st = do_lease_alloc(ns, n, &l, err);
        if (st != ST_OK) {
            return st;
        }
    }
    ns->ns_st.locates++;
    ns->ns_st.locate_keys += n;
    for (size_t i = 0; i < n; i++) {
        cd_obj_t *o = cd_htab_find(&ns->ns_objs, &keys[i].hash, cd_obj_tag(&keys[i]));

        memset(&out[i], 0, sizeof(out[i]));
        if (o == NULL) {
            out[i].status = ST_ERR_NOT_FOUND;
            continue;
        }
        out[i].status = ST_OK;
        fill_location(ns, o, &out[i].where);
        cd_radix_touch(&ns->ns_radix, o->ob_block, now);
        ns->ns_st.locate_hits++;
        if (l != NULL) {
            l->ls_blocks[l->ls_n++] = o->ob_block;
        }
    }
    if (lease_id_p != NULL) {
        *lease_id_p = 0;
    }
    if (l != NULL && l->ls_n == 0) {
        do_lease_free(ns, l);
    } else if (l != NULL) {
        do_lease_grant(ns, l, now, lease_ms);
        if (lease_id_p != NULL) {
            *lease_id_p = l->ls_id;
        }
        if (expires_p != NULL) {
            *expires_p = l->ls_expires;
        }
    }
    return ST_OK;
}

st_status_t cd_store_locate(cd_store_t *s, uint32_t ns_id, const cd_key_t *keys, size_t n,
                            uint64_t lease_ms, cd_located_t *out, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (keys == NULL || out == NULL || n == 0 || n > s->ss_cfg.limits.max_batch) {
        return cd_errf(err, ST_ERR_INVALID,
                       "%zu keys in one locate: the limit max_batch is %u "
                       "(and at least one is needed)",
                       n, s->ss_cfg.limits.max_batch);
    }
    for (size_t i = 0; i < n; i++) {
        st = check_key(ns, &keys[i], err);
        if (st != ST_OK) {
            return st;
        }
    }
    st = check_lease(s, lease_ms, err);
    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_locate(ns, keys, n, lease_ms, out, lease_id_p, lease_expires_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

static st_status_t do_lookup(cd_ns_t *ns, const cd_segment_t *segs, const cd_probes_t *probes,
                             size_t nseg, const cd_require_t *req, uint64_t lease_ms, size_t total,
                             cd_seg_answer_t *answers, uint64_t *kda, size_t kda_cap, size_t *kda_n,
                             uint64_t *lease_id_p, uint64_t *expires_p, cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    cd_lease_t *l = NULL;
    uint64_t matched = 0;
    st_status_t st;

    if (lease_ms != CD_LEASE_NONE) {
        st = do_lease_alloc(ns, total, &l, err);
        if (st != ST_OK) {
            return st;
        }
    }
    *kda_n = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (probes != NULL && probes[i].offsets != NULL) {
            cd_radix_lookup_compact(&ns->ns_radix, &segs[i], &probes[i], req, now, &answers[i], kda,
                                    kda_cap, kda_n);
        } else {
            cd_radix_lookup(&ns->ns_radix, &segs[i], req, now, &answers[i], kda, kda_cap, kda_n,
                            l != NULL ? l->ls_blocks : NULL, l != NULL ? &l->ls_n : NULL);
        }
        matched += answers[i].matched;
        total -= answers[i].unresolved; /* asked again with their hashes, counted then */
    }
    ns->ns_st.lookups++;
    ns->ns_st.lookup_hits += matched > 0;
    ns->ns_st.lookup_tokens += (uint64_t)total * ns->ns_block_tokens;
    ns->ns_st.hit_tokens += matched * ns->ns_block_tokens;
    if (lease_id_p != NULL) {
        *lease_id_p = 0;
    }
    if (l != NULL && l->ls_n == 0) {
        do_lease_free(ns, l);
    } else if (l != NULL) {
        do_lease_grant(ns, l, now, lease_ms);
        if (lease_id_p != NULL) {
            *lease_id_p = l->ls_id;
        }
        if (expires_p != NULL) {
            *expires_p = l->ls_expires;
        }
    }
    return ST_OK;
}

st_status_t cd_store_lookup(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs, size_t nseg,
                            const cd_require_t *req, uint64_t lease_ms, cd_seg_answer_t *answers,
                            uint64_t *kda, size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err)
{
    return cd_store_lookup_probes(s, ns_id, segs, NULL, nseg, req, lease_ms, answers, kda, kda_cap,
                                  kda_n, lease_id_p, lease_expires_p, err);
}

st_status_t cd_store_lookup_probes(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs,
                                   const cd_probes_t *probes, size_t nseg, const cd_require_t *req,
                                   uint64_t lease_ms, cd_seg_answer_t *answers, uint64_t *kda,
                                   size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                                   uint64_t *lease_expires_p, cd_err_t *err)
{
    const cd_limits_t *lim = &s->ss_cfg.limits;
    static const cd_require_t none = {0, {0, 0}};
    cd_ns_t *ns;
    size_t total = 0;
    st_status_t st = ns_lookup(s, ns_id, &ns, err);

    if (st != ST_OK) {
        return st;
    }
    if (segs == NULL || answers == NULL || kda_n == NULL || (kda == NULL && kda_cap > 0) ||
        nseg == 0 || nseg > lim->max_batch) {
        return cd_errf(err, ST_ERR_INVALID,
                       "%zu segments in one lookup: the limit max_batch is "
                       "%u (and at least one is needed)",
                       nseg, lim->max_batch);
    }
    for (size_t i = 0; i < nseg; i++) {
        const cd_segment_t *sg = &segs[i];

        if (sg->hashes == NULL && sg->n > 0) {
            return cd_errf(err, ST_ERR_INVALID, "segment %zu has no hashes", i);
        }
        if (probes != NULL && probes[i].offsets != NULL) {
            /* Compact: offsets strictly increasing from 0 to n - 1, no lease. */
            const cd_probes_t *pr = &probes[i];
            int ok = sg->n > 0 && pr->n_offsets > 0 && pr->offsets[0] == 0 &&
                     pr->offsets[pr->n_offsets - 1] == sg->n - 1 && lease_ms == CD_LEASE_NONE;

            for (uint32_t j = 1; ok && j < pr->n_offsets; j++) {
                ok = pr->offsets[j] > pr->offsets[j - 1];
            }
            if (!ok) {
                return cd_errf(err, ST_ERR_INVALID,
                               "compact segment %zu: probes must rise from 0 to its last block, "
                               "and it takes no lease",
                               i);
            }
        }
        total += sg->n;
    }
    if (total > lim->max_hashes) {
        return cd_errf(err, ST_ERR_INVALID, "%zu hashes in one lookup: the limit max_hashes is %u",
                       total, lim->max_hashes);
    }
    if (req == NULL) {
        req = &none;
    }
    st = check_lease(s, lease_ms, err);
    if (st != ST_OK) {
        return st;
    }
    if (req->kinds >= (1u << CD_KIND_COUNT) || (req->kinds & (1u << CD_KIND_SESSION))) {
        return cd_errf(err, ST_ERR_INVALID, "required kinds mask 0x%x names unknown kinds",
                       req->kinds);
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_lookup(ns, segs, probes, nseg, req, lease_ms, total, answers, kda, kda_cap, kda_n,
                   lease_id_p, lease_expires_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}
