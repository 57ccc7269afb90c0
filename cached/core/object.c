/* object.c - objects: their records (new, attach, delete), put and get
 * inline, put by the caller's copy, delete. Reservations are in reserve.c,
 * locate and the chain lookup in locate.c. */
#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "log.h"
#include "dlist.h"
#include "store_internal.h"

static const char *const kind_names[CD_KIND_COUNT] = {"KV", "IDX", "KDA", "SESSION", "VIS"};

const char *cd_kind_name(uint32_t kind)
{
    return kind_names[kind];
}

/* Checks a key against the limits. */
st_status_t cd_obj_check_key(const cd_ns_t *ns, const cd_key_t *key, cd_err_t *err)
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
                       key->layer, cd_kind_name(key->kind), l->max_layers);
    }
    return ST_OK;
}

st_status_t cd_obj_check_len(const cd_ns_t *ns, uint64_t len, cd_err_t *err)
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

void cd_obj_location(const cd_ns_t *ns, const cd_obj_t *o, cd_location_t *w)
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
void do_obj_unhold(cd_ns_t *ns, cd_block_t *held[2])
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
st_status_t do_obj_new(cd_ns_t *ns, const cd_key_t *key, const st_hash_t *parent, uint64_t len,
                       cd_obj_t **obj_p, cd_err_t *err)
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
        do_obj_unhold(ns, held);
        return st;
    }
    CD_WITH_EVICTION(ns, st, cd_budget_charge_meta(b, sizeof(cd_obj_t)));
    if (st != ST_OK) {
        do_obj_unhold(ns, held);
        return do_exhausted(ns, err, "an object record", sizeof(cd_obj_t));
    }
    o = calloc(1, sizeof(*o));
    if (o == NULL) {
        do_obj_unhold(ns, held);
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
        do_obj_unhold(ns, o->ob_held);
        free(o);
        cd_budget_release_meta(b, sizeof(cd_obj_t));
        return st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, "the index", 0)
                                      : cd_errf(err, st, "out of memory growing the index");
    }
    st = cd_slab_alloc(&ns->ns_slab, len, &o->ob_ext, msg);
    if (st != ST_OK) {
        do_obj_unhold(ns, o->ob_held);
        free(o);
        cd_budget_release_meta(b, sizeof(cd_obj_t));
        if (st == ST_ERR_EXHAUSTED) {
            ns->ns_st.exhausted++;
        }
        return cd_errf(err, st, "%s (namespace %u, %s object)", msg, ns->ns_id,
                       cd_kind_name(key->kind));
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
void do_obj_attach(cd_ns_t *ns, cd_obj_t *o, uint64_t now)
{
    cd_block_t *b = NULL;

    (void)cd_radix_insert(&ns->ns_radix, &o->ob_key.hash, o->ob_has_parent ? &o->ob_parent : NULL,
                          now, &b, NULL);
    o->ob_state = OBJ_COMMITTED;
    o->ob_block = b;
    CD_LIST_PUSH(b->bk_objs, o, ob_prev, ob_next);
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
    CD_LIST_REMOVE(b->bk_objs, o, ob_prev, ob_next);
    b->bk_present[o->ob_key.kind][o->ob_key.layer / 64] &= ~(1ull << (o->ob_key.layer % 64));
    cd_radix_changed(b);
    do_obj_free(ns, o);
    if (b->bk_nobjs == 0 && cd_radix_removable(b)) {
        cd_radix_remove(&ns->ns_radix, b);
    }
}

st_status_t cd_ns_find(cd_store_t *s, uint32_t ns_id, cd_ns_t **ns_p, cd_err_t *err)
{
    *ns_p = cd_ns_get(s, ns_id);
    return *ns_p != NULL ? ST_OK : cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
}

st_status_t cd_ns_find_batch(cd_store_t *s, uint32_t ns_id, int given, size_t n, const char *what,
                             cd_ns_t **ns_p, cd_err_t *err)
{
    st_status_t st = cd_ns_find(s, ns_id, ns_p, err);

    if (st == ST_OK && (!given || n == 0 || n > s->ss_cfg.limits.max_batch)) {
        return cd_errf(err, ST_ERR_INVALID,
                       "%zu %s: the limit max_batch is %u (and at least one is needed)", n, what,
                       s->ss_cfg.limits.max_batch);
    }
    return st;
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
                       cd_kind_name(key->kind), key->layer);
    }
    st = do_obj_new(ns, key, parent, len, &o, err);
    if (st != ST_OK) {
        return st;
    }
    memcpy(cd_extent_ptr(&ns->ns_slab, &o->ob_ext), data, len);
    o->ob_row_bytes = row_bytes;
    o->ob_checksum = do_rowsum_compute(ns, o, data); /* of the caller's bytes */
    do_obj_attach(ns, o, now);
    do_obj_unhold(ns, o->ob_held);
    return ST_OK;
}

/* The checks both kinds of put make: namespace, key, length, and the
 * caller's pointer (what names it in the error). */
static st_status_t put_check(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, uint64_t len,
                             const void *ptr, const char *what, cd_ns_t **ns_p, cd_err_t *err)
{
    st_status_t st = cd_ns_find(s, ns_id, ns_p, err);

    if (st == ST_OK) {
        st = cd_obj_check_key(*ns_p, key, err);
    }
    if (st == ST_OK) {
        st = cd_obj_check_len(*ns_p, len, err);
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
                     cd_kind_name(key->kind), key->layer);
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
                           cd_kind_name(o->ob_key.kind), o->ob_key.layer);
        }
        do_obj_unhold(ns, o->ob_held);
        do_obj_free(ns, o);
        pthread_mutex_unlock(&ns->ns_lock);
        put->pt_obj = NULL;
        return ST_OK;
    }
    o->ob_row_bytes = put->pt_row_bytes;
    if (o->ob_row_bytes != 0 && do_rowsum_compute(ns, o, NULL) != checksum) {
        /* The extent changed since the caller verified it: no sums of it. */
        do_rowsum_free(ns, o);
        lg_warn_ratelimited("promoted object changed before its row sums were taken: none kept "
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
    do_obj_unhold(ns, o->ob_held);
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
    do_obj_unhold(ns, o->ob_held);
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
                       cd_kind_name(key->kind), key->layer);
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
        lg_ratelimited(LG_ERROR,
                       "object bytes do not match their checksum ns=%u kind=%s layer=%u "
                       "region=%u gen=%llu action=%s",
                       ns->ns_id, cd_kind_name(key->kind), key->layer, o->ob_ext.region,
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
        cd_obj_location(ns, o, where_p);
    }
    cd_radix_touch(&ns->ns_radix, o->ob_block, cd_store_now(ns->ns_store));
    return ST_OK;
}

st_status_t cd_store_get(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, void *buf,
                         uint64_t cap, uint64_t *len_p, cd_location_t *where_p, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = cd_ns_find(s, ns_id, &ns, err);

    if (st == ST_OK) {
        st = cd_obj_check_key(ns, key, err);
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

/* --- delete ---------------------------------------------------------------------------- */

st_status_t cd_store_delete(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, cd_err_t *err)
{
    cd_ns_t *ns;
    cd_obj_t *o;
    st_status_t st = cd_ns_find(s, ns_id, &ns, err);

    if (st == ST_OK) {
        st = cd_obj_check_key(ns, key, err);
    }
    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    o = cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key));
    if (o == NULL) {
        st = cd_errf(err, ST_ERR_NOT_FOUND, "no %s object (layer %u) under this hash",
                     cd_kind_name(key->kind), key->layer);
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
