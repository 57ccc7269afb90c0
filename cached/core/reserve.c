/* reserve.c - writes by the client's own copy: reserve an extent, commit
 * it (checksum and row sums), abort it, expire reservations. */
#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "dlist.h"
#include "store_internal.h"

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
    CD_QUEUE_REMOVE(ns->ns_resv_head, ns->ns_resv_tail, o, ob_prev, ob_next);
    o->ob_next = o->ob_prev = NULL;
    ns->ns_st.reservations_active--;
    ns->ns_st.reserved_bytes -= o->ob_len;
    cd_tenant_release(ns->ns_tn, CD_RES_RESERVATIONS, 1);
}

static void resv_drop(cd_ns_t *ns, cd_obj_t *o)
{
    resv_unlink(ns, o);
    do_obj_unhold(ns, o->ob_held);
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
                do_obj_unhold(ns, o->ob_held);
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
        CD_QUEUE_PUSH_TAIL(ns->ns_resv_head, ns->ns_resv_tail, o, ob_prev, ob_next);
        ns->ns_st.reservations_active++;
        ns->ns_st.reservations_granted++;
        ns->ns_st.reserved_bytes += o->ob_len;
        out[i].status = ST_OK;
        out[i].id = o->ob_resv_id;
        out[i].expires_ms = o->ob_expires;
        cd_obj_location(ns, o, &out[i].where);
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
    st_status_t st = cd_ns_find_batch(s, ns_id, reqs != NULL && out != NULL, n,
                                      "objects in one reserve", &ns, err);

    if (st != ST_OK) {
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        st = cd_obj_check_key(ns, &reqs[i].key, err);
        if (st == ST_OK) {
            st = cd_obj_check_len(ns, reqs[i].length, err);
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
    do_obj_unhold(ns, o->ob_held);
    ns->ns_st.reservations_committed++;
    return ST_OK;
}

st_status_t cd_store_commit(cd_store_t *s, uint32_t ns_id, uint64_t resv_id, uint64_t checksum,
                            cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st = cd_ns_find(s, ns_id, &ns, err);

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
    st_status_t st = cd_ns_find(s, ns_id, &ns, err);

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

/* Ends reservation o on its writer's word (cd_store_end_id). */
static void resv_abort(cd_ns_t *ns, void *o)
{
    resv_drop(ns, o);
    ns->ns_st.reservations_aborted++;
}

st_status_t cd_store_abort(cd_store_t *s, uint32_t ns_id, uint64_t resv_id)
{
    return cd_store_end_id(s, ns_id, resv_id, ID_RESV, resv_abort);
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
