/*
 * daemon_ns.c - the daemon's tables beside the store: namespaces by wire id,
 * the regions of each namespace's arena (as Hello hands them out), and
 * reservation batches.
 */
#include "daemon.h"

#include "tier.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "log.h"

/* ------------------------------------------------------- namespaces -- */

uint64_t cd_wire_ns_id(const char *tenant, const char *model)
{
    XXH3_state_t st;
    uint32_t len;
    uint64_t id;

    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, "strata-nsid-v1", 14);
    len = (uint32_t)strlen(tenant);
    XXH3_64bits_update(&st, &len, 4);
    XXH3_64bits_update(&st, tenant, len);
    len = (uint32_t)strlen(model);
    XXH3_64bits_update(&st, &len, 4);
    XXH3_64bits_update(&st, model, len);
    id = XXH3_64bits_digest(&st);
    return id == 0 ? 1 : id; /* 0 means "no namespace" on the wire */
}

st_status_t cd_daemon_ns_open(cd_daemon_t *d, const char *tenant, const char *model,
                              uint32_t block_tokens, cd_ns_entry_t **entry_p, cd_err_t *err)
{
    uint64_t wire = cd_wire_ns_id(tenant, model);
    cd_ns_entry_t *e;
    cd_ns_info_t info;
    uint32_t local;
    st_status_t status;

    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        if (d->ns[i]->wire_id == wire) {
            e = d->ns[i];
            pthread_mutex_unlock(&d->ns_lock);
            if (block_tokens != 0 && block_tokens != e->block_tokens) {
                snprintf(err->msg, sizeof(err->msg),
                         "namespace tenant=%s model=%s has block_tokens=%u, not %u", tenant, model,
                         e->block_tokens, block_tokens);
                return ST_ERR_EXISTS;
            }
            *entry_p = e;
            return ST_OK;
        }
    }
    if (d->n_ns == CD_MAX_NS) {
        pthread_mutex_unlock(&d->ns_lock);
        snprintf(err->msg, sizeof(err->msg), "no room for another namespace (limit %d)", CD_MAX_NS);
        return ST_ERR_EXHAUSTED;
    }
    status = cd_store_ns_create(d->store, tenant, model,
                                block_tokens ? block_tokens : (uint32_t)d->cfg.block_tokens, &local,
                                err);
    if (status == ST_OK) {
        status = cd_store_ns_info(d->store, local, &info);
    }
    if (status != ST_OK) {
        pthread_mutex_unlock(&d->ns_lock);
        return status;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL || d->n_ns == CD_MAX_NS) {
        pthread_mutex_unlock(&d->ns_lock);
        free(e);
        snprintf(err->msg, sizeof(err->msg), "no room for another namespace (limit %d)", CD_MAX_NS);
        return e == NULL ? ST_ERR_NOMEM : ST_ERR_EXHAUSTED;
    }
    e->wire_id = wire;
    e->local_id = local;
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    e->block_tokens = info.block_tokens;
    e->seed = info.seed;
    {
        char name[2 * CD_NAME_MAX + 2];

        snprintf(name, sizeof(name), "%s/%s", tenant, model);
        status = cd_obs_ns_add(d->obs, name, &e->mx);
    }
    if (status != ST_OK) {
        pthread_mutex_unlock(&d->ns_lock);
        free(e);
        snprintf(err->msg, sizeof(err->msg), "no memory for the namespace's metrics");
        return status;
    }
    cd_tier_ns_bind(d->tier, local, wire);
    d->ns[d->n_ns++] = e;
    pthread_mutex_unlock(&d->ns_lock);
    *entry_p = e;
    /* The record recovery re-creates the namespace from (durable, rare). */
    status = cd_tier_ns_put(d->tier, wire, tenant, model, e->block_tokens, err);
    if (status != ST_OK) {
        /* Served from DRAM all the same; only its recovery after a restart is at stake. */
        lg_warn("namespace record not stored in the SSD tier tenant=%s model=%s: %s", tenant, model,
                err->msg);
        err->msg[0] = '\0';
    }
    return ST_OK;
}

cd_ns_entry_t *cd_daemon_ns_find(cd_daemon_t *d, uint64_t wire_id)
{
    cd_ns_entry_t *found = NULL;

    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        if (d->ns[i]->wire_id == wire_id) {
            found = d->ns[i];
            break;
        }
    }
    pthread_mutex_unlock(&d->ns_lock);
    return found;
}

/* Files region (add) or takes it out of namespace ns_id's table, and bumps
 * the table's epoch. Runs with the namespace lock held (the store's
 * callbacks); takes only region_lock. */
static void cd_region_change(cd_daemon_t *d, uint32_t ns_id, uint32_t region, void *base,
                             size_t len, int add)
{
    cd_region_table_t *t;

    if (ns_id == 0 || ns_id > CD_MAX_NS) {
        return;
    }
    pthread_mutex_lock(&d->region_lock);
    t = d->regions[ns_id];
    if (t == NULL && add) {
        t = d->regions[ns_id] = calloc(1, sizeof(*t));
    }
    if (add && t != NULL && t->n < CD_MAX_REGIONS) {
        t->r[t->n].id = region;
        t->r[t->n].base = base;
        t->r[t->n].len = len;
        t->n++;
        t->epoch++;
    } else if (add) {
        lg_warn_ratelimited("region table full ns=%u region=%u", ns_id, region);
    }
    for (uint32_t i = 0; !add && t != NULL && i < t->n; i++) {
        if (t->r[i].id == region) {
            t->r[i] = t->r[--t->n];
            t->epoch++;
            break;
        }
    }
    pthread_mutex_unlock(&d->region_lock);
}

/* Store callback: a chunk of a namespace's arena became a region. */
void cd_region_added(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len)
{
    cd_region_change(ctx, ns_id, region, base, len, 1);
}

/* Store callback: a region's chunk went back. */
void cd_region_removed(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len)
{
    cd_region_change(ctx, ns_id, region, base, len, 0);
}

uint64_t cd_daemon_ns_region_epoch(cd_daemon_t *d, const cd_ns_entry_t *e)
{
    uint64_t epoch;

    cd_daemon_ns_regions(d, e, NULL, 0, &epoch);
    return epoch;
}

uint32_t cd_daemon_ns_regions(cd_daemon_t *d, const cd_ns_entry_t *e, cd_region_t *out,
                              uint32_t max, uint64_t *epoch_p)
{
    cd_region_table_t *t;
    uint32_t n = 0;

    pthread_mutex_lock(&d->region_lock);
    t = e->local_id <= CD_MAX_NS ? d->regions[e->local_id] : NULL;
    if (t != NULL) {
        n = t->n < max ? t->n : max;
        if (n > 0) {
            memcpy(out, t->r, sizeof(*out) * n);
        }
        *epoch_p = t->epoch;
    } else {
        *epoch_p = 0;
    }
    pthread_mutex_unlock(&d->region_lock);
    return n;
}

/* ---------------------------------------------------- reservations -- */

/* Finds batch id among the live ones. batch_lock held. */
static cd_batch_t *cd_batch_find_locked(cd_daemon_t *d, uint64_t id)
{
    for (cd_batch_t *b = d->batches; b != NULL; b = b->next) {
        if (b->id == id) {
            return b;
        }
    }
    return NULL;
}

/* Remembers a finished batch. batch_lock held. */
static void cd_batch_retire_locked(cd_daemon_t *d, const cd_batch_t *b)
{
    struct cd_batch_retired *r = &d->retired[d->n_retired++ % CD_BATCH_RETIRED];

    r->id = b->id;
    r->client = b->client;
    r->ns_local = b->ns_local;
}

st_status_t cd_batch_add(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t *resv,
                         size_t n, uint64_t expires_ms, uint64_t *id_p)
{
    cd_batch_t *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        return ST_ERR_NOMEM;
    }
    b->ns_local = ns_local;
    b->client = client;
    b->expires_ms = expires_ms;
    b->n = n;
    b->resv = resv;
    pthread_mutex_lock(&d->batch_lock);
    /* Random, so that nobody guesses another client's batch; never 0, never a live one. */
    do {
        b->id = cd_au_random64();
    } while (b->id != 0 && cd_batch_find_locked(d, b->id) != NULL);
    if (b->id == 0) {
        pthread_mutex_unlock(&d->batch_lock);
        free(b);
        return ST_ERR_INTERNAL;
    }
    b->next = d->batches;
    d->batches = b;
    pthread_mutex_unlock(&d->batch_lock);
    *id_p = b->id;
    return ST_OK;
}

cd_batch_t *cd_batch_take(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id)
{
    cd_batch_t **pp, *b = NULL;

    pthread_mutex_lock(&d->batch_lock);
    for (pp = &d->batches; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id && (*pp)->ns_local == ns_local &&
            ((*pp)->client == 0 || (*pp)->client == client)) {
            b = *pp;
            *pp = b->next;
            cd_batch_retire_locked(d, b);
            break;
        }
    }
    pthread_mutex_unlock(&d->batch_lock);
    return b;
}

int cd_batch_issued(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id)
{
    int found = 0;

    pthread_mutex_lock(&d->batch_lock);
    for (uint32_t i = 0; i < CD_BATCH_RETIRED && i < d->n_retired && !found; i++) {
        const struct cd_batch_retired *r = &d->retired[i];

        found = id != 0 && r->id == id && r->ns_local == ns_local &&
                (r->client == 0 || r->client == client);
    }
    pthread_mutex_unlock(&d->batch_lock);
    return found;
}

void cd_batch_free(cd_batch_t *b)
{
    if (b != NULL) {
        free(b->resv);
        free(b);
    }
}

/* Drops batches past their expiry; the store expires the reservations. */
void cd_batch_expire(cd_daemon_t *d, uint64_t now_ms)
{
    cd_batch_t **pp = &d->batches, *dead = NULL;

    pthread_mutex_lock(&d->batch_lock);
    while (*pp != NULL) {
        cd_batch_t *b = *pp;

        if (b->expires_ms <= now_ms) {
            cd_batch_retire_locked(d, b);
            *pp = b->next;
            b->next = dead;
            dead = b;
        } else {
            pp = &b->next;
        }
    }
    pthread_mutex_unlock(&d->batch_lock);
    while (dead != NULL) {
        cd_batch_t *next = dead->next;

        cd_batch_free(dead);
        dead = next;
    }
}
