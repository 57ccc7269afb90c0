/*
 * rowsum.c - the store's row sums: a checksum per row group of each
 * committed row-major object (KV, IDX written with row_bytes), computed at
 * commit in the same pass, over the same copy of each row, as the object's
 * checksum that the commit compares, kept on the heap beside the object
 * record (charged to the index's share of the budget) and copied into
 * Locate answers, so that a reader checks every row it accepts against
 * sums that no remote key can reach (docs/transport.md "Row verification").
 */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "rowsum.h"
#include "log.h"
#include "store_internal.h"

#if PR_ROW_GROUP != 1
#error "do_rowsum_compute sums one row a group"
#endif

/* Room for n sums in o->ob_rowsum, charged to the budget; 0 if none. */
static int do_rowsum_alloc(cd_ns_t *ns, cd_obj_t *o, uint64_t n)
{
    cd_budget_t *b = &ns->ns_store->ss_budget;
    st_status_t st;

    CD_WITH_EVICTION(ns, st, cd_budget_charge_meta(b, n * 8));
    if (st != ST_OK) {
        lg_warn_ratelimited("row sums not kept (rows will be read inline): no room for %llu "
                            "bytes ns=%u",
                            (unsigned long long)(n * 8), ns->ns_id);
        return 0;
    }
    o->ob_rowsum = malloc(n * 8);
    if (o->ob_rowsum == NULL) {
        cd_budget_release_meta(b, n * 8);
        lg_warn_ratelimited("row sums not kept (rows will be read inline): out of memory ns=%u",
                            ns->ns_id);
        return 0;
    }
    o->ob_n_rowsum = n;
    return 1;
}

uint64_t do_rowsum_compute(cd_ns_t *ns, cd_obj_t *o, const void *src)
{
    const uint8_t *p = src != NULL ? src : cd_extent_ptr(&ns->ns_slab, &o->ob_ext);
    size_t rb = o->ob_row_bytes;
    uint64_t rows = pr_rowsum_groups(o->ob_len, o->ob_row_bytes, PR_ROW_GROUP), whole;
    XXH3_state_t *h = NULL;
    uint8_t *row = NULL;

    do_rowsum_free(ns, o);
    if (rows == 0 || rb < PR_ROW_BYTES_MIN || !do_rowsum_alloc(ns, o, rows) ||
        (h = XXH3_createState()) == NULL || (row = malloc(rb)) == NULL ||
        XXH3_64bits_reset(h) != XXH_OK) {
        if (o->ob_rowsum != NULL) {
            lg_warn_ratelimited("row sums not kept (rows will be read inline): out of memory "
                                "ns=%u",
                                ns->ns_id);
        }
        XXH3_freeState(h);
        free(row);
        do_rowsum_free(ns, o);
        return cd_checksum(p, o->ob_len);
    }
    /* Each row is read once, into row: its sum and the object's checksum
     * are of the same bytes, whatever writes into the extent meanwhile. */
    for (uint64_t r = 0; r < rows; r++) {
        uint64_t v;

        memcpy(row, p + r * rb, rb);
        v = pr_rowsum(row, rb);
        for (int k = 0; k < 8; k++) {
            o->ob_rowsum[r * 8 + (uint64_t)k] = (uint8_t)(v >> (8 * k));
        }
        (void)XXH3_64bits_update(h, row, rb);
    }
    (void)XXH3_64bits_update(h, p + rows * rb, o->ob_len - rows * rb);
    whole = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    free(row);
    return whole;
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

/* Copies rows of o into buf, each checked against its row sum. */
static st_status_t do_get_rows(cd_ns_t *ns, cd_obj_t *o, const uint32_t *rows, size_t n_rows,
                               uint8_t *buf, cd_err_t *err)
{
    const uint8_t *p = cd_extent_ptr(&ns->ns_slab, &o->ob_ext);
    size_t rb = o->ob_row_bytes;

    for (size_t x = 0; x < n_rows; x++) {
        memcpy(buf + x * rb, p + (size_t)rows[x] * rb, rb);
        if (pr_rowsum(buf + x * rb, rb) != pr_rowsum_at(o->ob_rowsum, rows[x])) {
            ns->ns_st.corrupt++;
            lg_ratelimited(LG_ERROR,
                           "object row does not match its row sum ns=%u kind=%u layer=%u "
                           "row=%u region=%u gen=%llu",
                           ns->ns_id, o->ob_key.kind, o->ob_key.layer, rows[x], o->ob_ext.region,
                           (unsigned long long)o->ob_ext.gen);
            return cd_errf(err, ST_ERR_CORRUPT,
                           "row %u fails its row sum; treat the object as a miss", rows[x]);
        }
    }
    return ST_OK;
}

st_status_t cd_store_get_rows(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                              const uint32_t *rows, size_t n_rows, void *buf, uint64_t cap,
                              uint64_t *len_p, cd_location_t *where_p, cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_obj_t *o;
    st_status_t st = ST_OK;
    uint64_t need;

    *len_p = 0;
    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    pthread_mutex_lock(&ns->ns_lock);
    ns->ns_st.gets++;
    o = cd_htab_find(&ns->ns_objs, &key->hash, cd_obj_tag(key));
    if (o == NULL) {
        ns->ns_st.get_misses++;
        st = cd_errf(err, ST_ERR_NOT_FOUND, "no object of kind %u (layer %u) under this hash",
                     key->kind, key->layer);
    } else if (o->ob_n_rowsum == 0 || PR_ROW_GROUP != 1) {
        st = cd_errf(err, ST_ERR_UNSUPPORTED,
                     "the object has no row sums (written without row_bytes): get it whole");
    }
    for (size_t x = 0; st == ST_OK && x < n_rows; x++) {
        if (rows[x] >= o->ob_n_rowsum) {
            st = cd_errf(err, ST_ERR_INVALID, "row %u: the object has %llu rows of %u bytes",
                         rows[x], (unsigned long long)o->ob_n_rowsum, o->ob_row_bytes);
        }
    }
    if (st == ST_OK) {
        need = (uint64_t)n_rows * o->ob_row_bytes;
        *len_p = need;
        if (buf == NULL || cap < need) {
            st = cd_errf(err, ST_ERR_INVALID, "buffer of %llu bytes is too small for %llu",
                         (unsigned long long)cap, (unsigned long long)need);
        }
    }
    if (st == ST_OK) {
        st = do_get_rows(ns, o, rows, n_rows, buf, err);
    }
    if (st == ST_OK) {
        if (where_p != NULL) {
            where_p->region = o->ob_ext.region;
            where_p->length = o->ob_len;
            where_p->checksum = o->ob_checksum;
            where_p->generation = o->ob_ext.gen;
            where_p->row_bytes = o->ob_row_bytes;
            where_p->row_group = PR_ROW_GROUP;
            where_p->n_rowsum = o->ob_n_rowsum;
            where_p->rowsum = NULL;
        }
        cd_radix_touch(&ns->ns_radix, o->ob_block, cd_store_now(s));
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}
