/*
 * rowsum.c - the store's row sums: a checksum per row group of each
 * committed row-major object (KV, IDX written with row_bytes), computed from
 * the bytes in the arena at commit, kept on the heap beside the object
 * record (charged to the index's share of the budget) and copied into
 * Locate answers, so that a reader checks every row it accepts against
 * sums that no remote key can reach (docs/transport.md "Row verification").
 */
#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "st_log.h"
#include "store_internal.h"

void do_rowsum_compute(cd_ns_t *ns, cd_obj_t *o)
{
    cd_budget_t *b = &ns->ns_store->ss_budget;
    uint64_t n = pr_rowsum_groups(o->ob_len, o->ob_row_bytes, PR_ROW_GROUP);
    st_status_t st;

    do_rowsum_free(ns, o);
    if (n == 0 || o->ob_row_bytes < PR_ROW_BYTES_MIN) {
        return;
    }
    CD_WITH_EVICTION(ns, st, cd_budget_charge_meta(b, n * 8));
    if (st != ST_OK) {
        st_warn_ratelimited("row sums not kept (rows will be read inline): no room for %llu "
                            "bytes ns=%u",
                            (unsigned long long)(n * 8), ns->ns_id);
        return;
    }
    o->ob_rowsum = malloc(n * 8);
    if (o->ob_rowsum == NULL) {
        cd_budget_release_meta(b, n * 8);
        st_warn_ratelimited("row sums not kept (rows will be read inline): out of memory ns=%u",
                            ns->ns_id);
        return;
    }
    pr_rowsum_all(cd_extent_ptr(&ns->ns_slab, &o->ob_ext), o->ob_len, o->ob_row_bytes, PR_ROW_GROUP,
                  n, o->ob_rowsum);
    o->ob_n_rowsum = n;
}

void do_rowsum_free(cd_ns_t *ns, cd_obj_t *o)
{
    if (o->ob_rowsum != NULL) {
        free(o->ob_rowsum);
        cd_budget_release_meta(&ns->ns_store->ss_budget, o->ob_n_rowsum * 8);
    }
    o->ob_rowsum = NULL;
    o->ob_n_rowsum = 0;
}

st_status_t cd_store_row_sums(cd_store_t *s, uint32_t ns_id, const cd_key_t *keys,
                              cd_located_t *out, size_t n, uint8_t *buf, size_t cap)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    size_t used = 0;

    if (ns == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&ns->ns_lock);
    for (size_t i = 0; i < n; i++) {
        cd_location_t *w = &out[i].where;
        cd_obj_t *o;

        if (out[i].status != ST_OK || w->n_rowsum == 0) {
            continue;
        }
        o = cd_htab_find(&ns->ns_objs, &keys[i].hash, cd_obj_tag(&keys[i]));
        if (o == NULL || o->ob_ext.gen != w->generation || o->ob_n_rowsum != w->n_rowsum ||
            w->n_rowsum * 8 > cap - used) {
            w->row_group = 0;
            w->n_rowsum = 0;
            continue;
        }
        memcpy(buf + used, o->ob_rowsum, w->n_rowsum * 8);
        w->rowsum = buf + used;
        used += w->n_rowsum * 8;
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return ST_OK;
}
