/* pin.c - pins: one record per pinned block (its count and the time the
 * last pin ends), in the namespace's id table under ID_PIN and on a list
 * in expiry order, charged to the tenant's pins quota pin by pin. */
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "store_internal.h"

/* Files p on the expiry list (kept in order; a new pin usually goes last). */
static void pin_link(cd_ns_t *ns, cd_pin_t *p)
{
    CD_QUEUE_INSERT_SORTED(ns->ns_pin_head, ns->ns_pin_tail, p, pn_prev, pn_next, pn_expires);
}

static void pin_unlink(cd_ns_t *ns, cd_pin_t *p)
{
    CD_QUEUE_REMOVE(ns->ns_pin_head, ns->ns_pin_tail, p, pn_prev, pn_next);
}

/* Drops count pins of p (all of them: the record goes too). */
static void do_pin_drop(cd_ns_t *ns, cd_pin_t *p, uint32_t count)
{
    for (uint32_t i = 0; i < count; i++) {
        cd_radix_unhold(&ns->ns_radix, p->pn_block, 1);
    }
    p->pn_count -= count;
    ns->ns_st.pins_active -= count;
    cd_tenant_release(ns->ns_tn, CD_RES_PINS, count);
    if (p->pn_count == 0) {
        cd_htab_remove(&ns->ns_ids, &p->pn_hash, ID_PIN);
        pin_unlink(ns, p);
        cd_budget_release_meta(&ns->ns_store->ss_budget, sizeof(*p));
        free(p);
    }
}

static st_status_t do_pin(cd_ns_t *ns, const st_hash_t *hash, uint64_t ttl_ms, cd_err_t *err)
{
    uint64_t expires = cd_store_now(ns->ns_store) + ttl_ms;
    cd_block_t *b = cd_radix_find(&ns->ns_radix, hash);
    cd_pin_t *p;
    st_status_t st;

    if (b == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no block with this hash");
    }
    st = cd_tenant_charge(ns->ns_tn, CD_RES_PINS, 1, err);
    if (st != ST_OK) {
        return st;
    }
    p = cd_htab_find(&ns->ns_ids, hash, ID_PIN);
    if (p == NULL) {
        void *rec;

        st = do_record_alloc(ns, sizeof(*p), sizeof(*p), CD_RES_PINS, "a pin", &rec, err);
        if (st != ST_OK) {
            return st;
        }
        p = rec;
        /* The evictions above passed over nothing this needs: b is looked
         * up again, since making room may have evicted it. */
        b = cd_radix_find(&ns->ns_radix, hash);
        if (b == NULL) {
            free(p);
            cd_budget_release_meta(&ns->ns_store->ss_budget, sizeof(*p));
            cd_tenant_release(ns->ns_tn, CD_RES_PINS, 1);
            return cd_errf(err, ST_ERR_NOT_FOUND, "the block was evicted to make room for its pin");
        }
        p->pn_hash = *hash;
        p->pn_block = b;
        p->pn_expires = expires;
        (void)cd_htab_insert(&ns->ns_ids, hash, ID_PIN, p); /* reserved above */
        pin_link(ns, p);
    } else if (expires > p->pn_expires) {
        pin_unlink(ns, p);
        p->pn_expires = expires;
        pin_link(ns, p);
    }
    cd_radix_hold(&ns->ns_radix, b, 1);
    p->pn_count++;
    ns->ns_st.pins_active++;
    return ST_OK;
}

st_status_t cd_store_pin_ttl(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash, uint64_t ttl_ms,
                             cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    uint64_t max = s->ss_cfg.limits.max_pin_ms;
    st_status_t st;

    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    if (hash == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no block hash given");
    }
    if (ttl_ms > max) {
        return cd_errf(err, ST_ERR_INVALID, "pin ttl %llu ms is above the limit max_pin_ms=%llu",
                       (unsigned long long)ttl_ms, (unsigned long long)max);
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_pin(ns, hash, ttl_ms != 0 ? ttl_ms : max, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

st_status_t cd_store_pin(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash)
{
    return cd_store_pin_ttl(s, ns_id, hash, 0, NULL);
}

st_status_t cd_store_unpin(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    st_status_t st = ST_OK;
    cd_pin_t *p;

    if (ns == NULL || hash == NULL) {
        return ns == NULL ? ST_ERR_NOT_FOUND : ST_ERR_INVALID;
    }
    pthread_mutex_lock(&ns->ns_lock);
    p = cd_htab_find(&ns->ns_ids, hash, ID_PIN);
    if (p != NULL) {
        do_pin_drop(ns, p, 1);
    } else {
        st = cd_radix_find(&ns->ns_radix, hash) != NULL ? ST_ERR_INVALID : ST_ERR_NOT_FOUND;
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

uint64_t do_reap_pins(cd_ns_t *ns, uint64_t now)
{
    uint64_t n = 0;

    while (ns->ns_pin_head != NULL && ns->ns_pin_head->pn_expires <= now) {
        n += ns->ns_pin_head->pn_count;
        do_pin_drop(ns, ns->ns_pin_head, ns->ns_pin_head->pn_count);
    }
    return n;
}

void do_pins_destroy(cd_ns_t *ns)
{
    while (ns->ns_pin_head != NULL) {
        do_pin_drop(ns, ns->ns_pin_head, ns->ns_pin_head->pn_count);
    }
}
