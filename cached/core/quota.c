/* quota.c - tenants' records and quotas in the store: the accounting every namespace of
 * a tenant shares, the quota checks and their messages, and the evictions a
 * memory quota asks for (store.h, "Tenants and their quotas"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "store_internal.h"

const char *const cd_tenant_resource_names[CD_TENANT_RESOURCES] = {
    "memory_bytes", "ssd_bytes", "sessions", "pins", "leases", "reservations", "namespaces"};

/* Messages name the quota without its unit: "memory quota", "pins quota". */
static const char *const tn_quota_names[CD_RES_COUNT] = {
    "memory",    "ssd", "sessions", "pins", "leases in flight", "reservations in flight",
    "namespaces"};

_Static_assert(sizeof(cd_tenant_quota_t) == CD_RES_COUNT * sizeof(uint64_t),
               "cd_tenant_quota_t is CD_RES_COUNT uint64_t in resource order");
_Static_assert(CD_TENANT_RESOURCES == CD_RES_COUNT, "one name per resource");

cd_tenant_t *cd_tenant_get(cd_store_t *s, const char *tenant, int create)
{
    cd_tenant_t *t = NULL;

    pthread_mutex_lock(&s->ss_tn_lock);
    for (size_t i = 0; i < s->ss_n_tn; i++) {
        if (strcmp(s->ss_tn[i]->tn_name, tenant) == 0) {
            t = s->ss_tn[i];
            break;
        }
    }
    if (t == NULL && create) {
        if (s->ss_n_tn == s->ss_cap_tn) {
            size_t cap = s->ss_cap_tn != 0 ? 2 * s->ss_cap_tn : 16;
            cd_tenant_t **a = realloc(s->ss_tn, cap * sizeof(*a));

            if (a == NULL) {
                goto out;
            }
            s->ss_tn = a;
            s->ss_cap_tn = cap;
        }
        t = calloc(1, sizeof(*t));
        if (t != NULL) {
            snprintf(t->tn_name, sizeof(t->tn_name), "%s", tenant);
            s->ss_tn[s->ss_n_tn++] = t;
        }
    }
out:
    pthread_mutex_unlock(&s->ss_tn_lock);
    return t;
}

/* Bytes for a person: "512 B", "42.0 KiB", "63.9 GiB". */
static void tn_bytes(char *buf, size_t cap, uint64_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    int u = -1;

    if (n < 1024) {
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
        return;
    }
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, cap, "%.1f %s", v, units[u]);
}

st_status_t cd_tenant_exceeded(cd_tenant_t *t, int r, uint64_t n, cd_err_t *err)
{
    uint64_t q = atomic_load_explicit(&t->tn_quota[r], memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&t->tn_used[r], memory_order_relaxed);

    lg_debug("tenant quota reached tenant=%s quota=%s limit=%llu used=%llu asked=%llu", t->tn_name,
             cd_tenant_resource_names[r], (unsigned long long)q, (unsigned long long)used,
             (unsigned long long)n);
    if (r == CD_RES_MEMORY || r == CD_RES_SSD) {
        char qb[32], ub[32], nb[32];

        tn_bytes(qb, sizeof(qb), q);
        tn_bytes(ub, sizeof(ub), used);
        tn_bytes(nb, sizeof(nb), n);
        return cd_errf(err, ST_ERR_EXHAUSTED, "tenant %s: %s quota %s, in use %s, asked %s",
                       t->tn_name, tn_quota_names[r], qb, ub, nb);
    }
    return cd_errf(err, ST_ERR_EXHAUSTED, "tenant %s: %s quota %llu, in use %llu, asked %llu",
                   t->tn_name, tn_quota_names[r], (unsigned long long)q, (unsigned long long)used,
                   (unsigned long long)n);
}

st_status_t cd_tenant_charge(cd_tenant_t *t, int r, uint64_t n, cd_err_t *err)
{
    uint64_t q = atomic_load_explicit(&t->tn_quota[r], memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&t->tn_used[r], memory_order_relaxed);

    /* Namespaces of one tenant charge in parallel: compare and swap, so that
     * two of them cannot both take the last unit. */
    do {
        if (q != 0 && (n > q || used > q - n)) {
            return cd_tenant_exceeded(t, r, n, err);
        }
    } while (!atomic_compare_exchange_weak_explicit(&t->tn_used[r], &used, used + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return ST_OK;
}

void cd_tenant_release(cd_tenant_t *t, int r, uint64_t n)
{
    atomic_fetch_sub_explicit(&t->tn_used[r], n, memory_order_relaxed);
}

int cd_tenant_over_memory(cd_tenant_t *t)
{
    uint64_t q = atomic_load_explicit(&t->tn_quota[CD_RES_MEMORY], memory_order_relaxed);

    return q != 0 && atomic_load_explicit(&t->tn_used[CD_RES_MEMORY], memory_order_relaxed) > q;
}

/* Whether t's DRAM plus len more fits its memory quota. */
static int tn_memory_fits(cd_tenant_t *t, uint64_t len)
{
    uint64_t q = atomic_load_explicit(&t->tn_quota[CD_RES_MEMORY], memory_order_relaxed);
    uint64_t used = atomic_load_explicit(&t->tn_used[CD_RES_MEMORY], memory_order_relaxed);

    return q == 0 || (len <= q && used <= q - len);
}

/* Evicts one block from another namespace of ns's tenant (trylock: never
 * waiting while ns's lock is held). Returns 1 if it did. */
static int do_evict_tenant_other(cd_ns_t *ns)
{
    cd_store_t *s = ns->ns_store;
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);

    for (uint32_t i = 0; i < n; i++) {
        cd_ns_t *o = s->ss_ns[i];
        int done;

        if (o == ns || o->ns_tn != ns->ns_tn || pthread_mutex_trylock(&o->ns_lock) != 0) {
            continue;
        }
        done = do_evict_local(o);
        pthread_mutex_unlock(&o->ns_lock);
        if (done) {
            return 1;
        }
    }
    return 0;
}

st_status_t do_tenant_room(cd_ns_t *ns, uint64_t len, cd_err_t *err)
{
    cd_tenant_t *t = ns->ns_tn;
    uint64_t q = atomic_load_explicit(&t->tn_quota[CD_RES_MEMORY], memory_order_relaxed);

    if (q == 0) {
        return ST_OK;
    }
    if (len > q) {
        return cd_tenant_exceeded(t, CD_RES_MEMORY, len, err);
    }
    while (!tn_memory_fits(t, len)) {
        if (!do_evict_local(ns) && !do_evict_tenant_other(ns)) {
            ns->ns_st.exhausted++;
            return cd_tenant_exceeded(t, CD_RES_MEMORY, len, err);
        }
    }
    return ST_OK;
}

int do_reclaim_over_quota(cd_ns_t *ns)
{
    cd_store_t *s = ns->ns_store;
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);

    /* The caller's own tenant above its quota gives from its own first. */
    if (cd_tenant_over_memory(ns->ns_tn) && do_evict_local(ns)) {
        return 1;
    }
    for (uint32_t k = 1; k < n; k++) {
        cd_ns_t *o = s->ss_ns[(ns->ns_id - 1 + k) % n];
        uint64_t freed;

        if (!cd_tenant_over_memory(o->ns_tn) || pthread_mutex_trylock(&o->ns_lock) != 0) {
            continue;
        }
        /* Its blocks in its LRU order, until a chunk is free or the tenant
         * is back within its quota; then its free chunks go back. */
        while (o->ns_slab.sl_arena.ar_n_empty == 0 && cd_tenant_over_memory(o->ns_tn) &&
               do_evict_local(o)) {
        }
        freed = cd_arena_trim(&o->ns_slab.sl_arena, 0);
        pthread_mutex_unlock(&o->ns_lock);
        if (freed > 0) {
            lg_debug("memory reclaimed for ns=%u from over-quota tenant=%s ns=%u bytes=%llu",
                     ns->ns_id, o->ns_tn->tn_name, o->ns_id, (unsigned long long)freed);
            ns->ns_st.reclaims++;
            return 1;
        }
    }
    return 0;
}

/* --- the API --------------------------------------------------------------------- */

st_status_t cd_tenant_quota_parse(const char *fields, cd_tenant_quota_t *q, cd_err_t *err)
{
    static const char *const keys[CD_RES_COUNT] = {"memory", "ssd",          "sessions",  "pins",
                                                   "leases", "reservations", "namespaces"};
    uint64_t v[CD_RES_COUNT] = {0};
    const char *p = fields != NULL ? fields : "";

    for (;;) {
        char tok[96], *eq, *end;
        size_t n;
        int r;

        p += strspn(p, " \t,");
        if (*p == '\0') {
            break;
        }
        n = strcspn(p, " \t,");
        if (n >= sizeof(tok)) {
            return cd_errf(err, ST_ERR_INVALID, "quota field too long: %.32s...", p);
        }
        memcpy(tok, p, n);
        tok[n] = '\0';
        p += n;
        eq = strchr(tok, '=');
        if (eq == NULL) {
            return cd_errf(err, ST_ERR_INVALID, "quota field %s is not name=value", tok);
        }
        *eq = '\0';
        for (r = 0; r < CD_RES_COUNT && strcmp(tok, keys[r]) != 0; r++) {
        }
        if (r == CD_RES_COUNT) {
            return cd_errf(err, ST_ERR_INVALID,
                           "unknown quota %s (memory, ssd, sessions, pins, leases, reservations, "
                           "namespaces)",
                           tok);
        }
        if (r == CD_RES_MEMORY || r == CD_RES_SSD) {
            if (cfg_parse_size(eq + 1, &v[r]) != ST_OK) {
                return cd_errf(err, ST_ERR_INVALID, "quota %s=%s is not a size (64G, 512M)", tok,
                               eq + 1);
            }
        } else {
            errno = 0;
            v[r] = strtoull(eq + 1, &end, 10);
            if (eq[1] < '0' || eq[1] > '9' || *end != '\0' || errno != 0) {
                return cd_errf(err, ST_ERR_INVALID, "quota %s=%s is not a count", tok, eq + 1);
            }
        }
    }
    memcpy(q, v, sizeof(*q));
    return ST_OK;
}

st_status_t cd_store_tenant_set(cd_store_t *s, const char *tenant, const cd_tenant_quota_t *q,
                                cd_err_t *err)
{
    const uint64_t *v = (const uint64_t *)q;
    cd_tenant_t *t;
    size_t len;

    if (tenant == NULL || q == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no tenant or quota given");
    }
    len = strlen(tenant);
    if (len == 0 || len > CD_NAME_MAX) {
        return cd_errf(err, ST_ERR_INVALID, "tenant name must be 1..%d bytes, got %zu", CD_NAME_MAX,
                       len);
    }
    t = cd_tenant_get(s, tenant, 1);
    if (t == NULL) {
        return cd_errf(err, ST_ERR_NOMEM, "out of memory for tenant %s", tenant);
    }
    for (int r = 0; r < CD_RES_COUNT; r++) {
        atomic_store_explicit(&t->tn_quota[r], v[r], memory_order_relaxed);
    }
    lg_info("tenant quotas set tenant=%s memory=%llu ssd=%llu sessions=%llu pins=%llu "
            "leases=%llu reservations=%llu namespaces=%llu",
            tenant, (unsigned long long)q->memory_bytes, (unsigned long long)q->ssd_bytes,
            (unsigned long long)q->sessions, (unsigned long long)q->pins,
            (unsigned long long)q->leases, (unsigned long long)q->reservations,
            (unsigned long long)q->namespaces);
    return ST_OK;
}

static void tn_copy(const cd_tenant_t *t, cd_tenant_usage_t *out)
{
    uint64_t *q = (uint64_t *)&out->quota, *u = (uint64_t *)&out->used;

    memcpy(out->tenant, t->tn_name, sizeof(out->tenant));
    for (int r = 0; r < CD_RES_COUNT; r++) {
        q[r] = atomic_load_explicit(&t->tn_quota[r], memory_order_relaxed);
        u[r] = atomic_load_explicit(&t->tn_used[r], memory_order_relaxed);
    }
}

st_status_t cd_store_tenant_usage(cd_store_t *s, const char *tenant, cd_tenant_usage_t *out)
{
    cd_tenant_t *t = tenant != NULL ? cd_tenant_get(s, tenant, 0) : NULL;

    if (t == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    tn_copy(t, out);
    return ST_OK;
}

size_t cd_store_tenants(cd_store_t *s, cd_tenant_usage_t *out, size_t cap)
{
    size_t n;

    pthread_mutex_lock(&s->ss_tn_lock);
    n = s->ss_n_tn;
    for (size_t i = 0; i < n && i < cap; i++) {
        tn_copy(s->ss_tn[i], &out[i]);
    }
    pthread_mutex_unlock(&s->ss_tn_lock);
    return n;
}

st_status_t cd_store_tenant_ssd_check(cd_store_t *s, uint32_t ns_id, uint64_t bytes, cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_tenant_t *t;
    uint64_t q, used;

    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    t = ns->ns_tn;
    q = atomic_load_explicit(&t->tn_quota[CD_RES_SSD], memory_order_relaxed);
    used = atomic_load_explicit(&t->tn_used[CD_RES_SSD], memory_order_relaxed);
    if (q != 0 && (bytes > q || used > q - bytes)) {
        return cd_tenant_exceeded(t, CD_RES_SSD, bytes, err);
    }
    return ST_OK;
}

void cd_store_tenant_ssd_add(cd_store_t *s, uint32_t ns_id, int64_t delta)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    _Atomic uint64_t *u;
    uint64_t cur, next;

    if (ns == NULL || delta == 0) {
        return;
    }
    u = &ns->ns_tn->tn_used[CD_RES_SSD];
    cur = atomic_load_explicit(u, memory_order_relaxed);
    do {
        uint64_t down = (uint64_t)0 - (uint64_t)delta; /* |delta| when delta < 0 */

        next = delta > 0 ? cur + (uint64_t)delta : (cur > down ? cur - down : 0);
    } while (!atomic_compare_exchange_weak_explicit(u, &cur, next, memory_order_relaxed,
                                                    memory_order_relaxed));
}
