/*
 * lease.c - the data plane's lease cache (lease.h): row reads (and, with
 * cache_locations = all, whole objects) keep the location their Locate
 * answered while at least SC_LC_MIN_LEFT of the lease is left.
 */
#include "lease.h"

#include <stdlib.h>
#include <string.h>

#include "rowsum.h"

st_status_t sc_lc_init(sc_lc_t *lc, uint32_t n_sets)
{
    memset(lc, 0, sizeof(*lc));
    lc->n_sets = n_sets > 0 ? n_sets : 1;
    lc->ent = calloc((size_t)lc->n_sets * SC_LC_WAYS, sizeof(*lc->ent));
    if (lc->ent == NULL) {
        return ST_ERR_NOMEM;
    }
    pthread_mutex_init(&lc->lock, NULL);
    return ST_OK;
}

void sc_lc_destroy(sc_lc_t *lc)
{
    if (lc->ent == NULL) {
        return;
    }
    for (size_t i = 0; i < (size_t)lc->n_sets * SC_LC_WAYS; i++) {
        free(lc->ent[i].sums);
    }
    free(lc->ent);
    lc->ent = NULL;
    pthread_mutex_destroy(&lc->lock);
}

/* The set of an object's entries: SC_LC_WAYS consecutive slots. */
static sc_lc_ent_t *sc_lc_set(sc_lc_t *lc, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    uint64_t x;

    memcpy(&x, h->b, sizeof(x));
    x ^= (uint64_t)kind * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer * 0xc2b2ae3d27d4eb4full;
    return &lc->ent[((x ^ (x >> 29)) % lc->n_sets) * SC_LC_WAYS];
}

static int sc_lc_match(const sc_lc_ent_t *e, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    return e->gen != 0 && e->kind == kind && e->layer == layer &&
           memcmp(e->hash.b, h->b, ST_HASH_BYTES) == 0;
}

int sc_rows_sums(const st_get_op_t *op, uint32_t row_bytes, const uint8_t *sums, uint64_t n_sums,
                 uint64_t *rsum)
{
    if (sums == NULL || rsum == NULL || row_bytes != op->row_bytes || PR_ROW_GROUP != 1) {
        return 0;
    }
    for (uint32_t x = 0; x < op->n_rows; x++) {
        if (op->rows[x] >= n_sums) {
            return 0;
        }
        rsum[x] = pr_rowsum_at(sums, op->rows[x]);
    }
    return 1;
}

int sc_lc_find(sc_lc_t *lc, uint32_t node, const st_hash_t *h, uint8_t kind, uint16_t layer,
               uint64_t now, const st_get_op_t *rows, uint64_t *rsum, sc_lc_ent_t *out)
{
    sc_lc_ent_t *set;
    int hit = 0;

    pthread_mutex_lock(&lc->lock);
    set = sc_lc_set(lc, h, kind, layer);
    for (uint32_t w = 0; !hit && w < SC_LC_WAYS; w++) {
        hit = sc_lc_match(&set[w], h, kind, layer) && set[w].node == node &&
              now + SC_LC_MIN_LEFT < set[w].expiry_ns;
        if (hit && rows != NULL && rows->n_rows > 0) {
            hit = sc_rows_sums(rows, set[w].row_bytes, set[w].sums, set[w].n_sums, rsum);
        }
        if (hit) {
            *out = set[w];
            out->sums = NULL;
        }
    }
    pthread_mutex_unlock(&lc->lock);
    return hit;
}

void sc_lc_put(sc_lc_t *lc, const sc_lc_ent_t *v)
{
    sc_lc_ent_t *set, *e = NULL;

    pthread_mutex_lock(&lc->lock);
    set = sc_lc_set(lc, &v->hash, v->kind, v->layer);
    for (uint32_t w = 0; e == NULL && w < SC_LC_WAYS; w++) {
        e = sc_lc_match(&set[w], &v->hash, v->kind, v->layer) ? &set[w] : NULL;
    }
    for (uint32_t w = 0; e == NULL && w < SC_LC_WAYS; w++) {
        e = set[w].gen == 0 ? &set[w] : NULL;
    }
    if (e == NULL) {
        e = &set[0];
        for (uint32_t w = 1; w < SC_LC_WAYS; w++) {
            e = set[w].expiry_ns < e->expiry_ns ? &set[w] : e;
        }
    }
    free(e->sums);
    *e = *v; /* the slot takes v->sums */
    pthread_mutex_unlock(&lc->lock);
}

void sc_lc_drop(sc_lc_t *lc, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    sc_lc_ent_t *set;

    pthread_mutex_lock(&lc->lock);
    set = sc_lc_set(lc, h, kind, layer);
    for (uint32_t w = 0; w < SC_LC_WAYS; w++) {
        if (sc_lc_match(&set[w], h, kind, layer)) {
            set[w].gen = 0;
            free(set[w].sums);
            set[w].sums = NULL;
        }
    }
    pthread_mutex_unlock(&lc->lock);
}
