/* store.c - the store, its namespaces, eviction, leases, pins, the reaper
 * and stats. Objects are in object.c, sessions in session.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "xxh.h"

#include "clock.h"
#include "log.h"
#include "dlist.h"
#include "store_internal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

st_status_t cd_errf(cd_err_t *err, st_status_t st, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL) {
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return st;
}

uint64_t cd_checksum(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

static uint64_t ss_monotonic_ms(void *ctx)
{
    (void)ctx;
    return cm_mono_ms();
}

uint64_t cd_store_now(const cd_store_t *s)
{
    return s->ss_cfg.clock_ms(s->ss_cfg.clock_ctx);
}

void cd_store_config_defaults(cd_store_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->memory_limit = 1ull << 30;
    cfg->chunk_bytes = 64u << 20;
    cfg->page_bytes = 2u << 20;
    cfg->huge = CD_HUGE_THP;
    cfg->slab_min = 64;
    cfg->slab_factor = 1.25;
    cfg->limits.max_object_bytes = 64u << 20;
    cfg->limits.max_hashes = 65536;
    cfg->limits.max_batch = 4096;
    cfg->limits.max_layers = CD_LAYERS_MAX;
    cfg->limits.max_namespaces = 64;
    cfg->limits.max_sessions = 1000000;
    cfg->limits.lease_ms = 5000;
    cfg->limits.max_lease_ms = 60000;
    cfg->limits.reservation_ms = 30000;
    cfg->limits.session_ttl_ms = 86400000ull;
    cfg->limits.session_ttl_max_ms = 30ull * 86400000ull;
    cfg->limits.max_pin_ms = 3600000ull;
}

/* --- the namespace seed ----------------------------------------------------- */

static size_t put_field(uint8_t *buf, size_t at, const void *p, size_t len)
{
    for (int i = 0; i < 4; i++) {
        buf[at + (size_t)i] = (uint8_t)(len >> (8 * i));
    }
    memcpy(buf + at + 4, p, len);
    return at + 4 + len;
}

st_status_t cd_ns_seed(const uint8_t *secret, size_t secret_len, const char *tenant,
                       const char *model, st_hash_t *seed_p)
{
    static const char domain[] = "strata-ns-v1";
    uint8_t buf[sizeof(domain) - 1 + 8 + 2 * CD_NAME_MAX];
    uint8_t mac[EVP_MAX_MD_SIZE];
    unsigned int mac_len = 0;
    size_t tl, ml, at = sizeof(domain) - 1;

    if (secret == NULL || secret_len == 0 || secret_len > 256 || tenant == NULL || model == NULL) {
        return ST_ERR_INVALID;
    }
    tl = strlen(tenant);
    ml = strlen(model);
    if (tl == 0 || tl > CD_NAME_MAX || ml == 0 || ml > CD_NAME_MAX) {
        return ST_ERR_INVALID;
    }
    memcpy(buf, domain, at);
    at = put_field(buf, at, tenant, tl);
    at = put_field(buf, at, model, ml);
    /* A keyed MAC: without the secret, a seed cannot be computed from the names. */
    if (HMAC(EVP_sha256(), secret, (int)secret_len, buf, at, mac, &mac_len) == NULL ||
        mac_len < ST_HASH_BYTES) {
        lg_error("namespace seed: HMAC-SHA-256 failed in OpenSSL");
        return ST_ERR_INTERNAL;
    }
    memcpy(seed_p->b, mac, ST_HASH_BYTES);
    OPENSSL_cleanse(mac, sizeof(mac));
    return ST_OK;
}

/* --- store and namespaces ------------------------------------------------------ */

st_status_t cd_store_create(const cd_store_config_t *cfg, cd_store_t **store_p, cd_err_t *err)
{
    const cd_limits_t *l = &cfg->limits;
    cd_store_t *s;

    if (cfg->cluster_secret == NULL || cfg->cluster_secret_len < 16 ||
        cfg->cluster_secret_len > 256) {
        return cd_errf(err, ST_ERR_INVALID, "cluster secret must be 16 to 256 bytes, got %zu",
                       cfg->cluster_secret == NULL ? 0 : cfg->cluster_secret_len);
    }
    if (cfg->page_bytes < 4096 || cfg->page_bytes % 4096 != 0 ||
        cfg->chunk_bytes < cfg->page_bytes || cfg->chunk_bytes % cfg->page_bytes != 0) {
        return cd_errf(err, ST_ERR_INVALID,
                       "page_bytes=%zu must be a multiple of 4096 and chunk_bytes=%zu a "
                       "multiple of it",
                       cfg->page_bytes, cfg->chunk_bytes);
    }
    if (cfg->memory_limit < 2 * (uint64_t)cfg->chunk_bytes) {
        return cd_errf(err, ST_ERR_INVALID, "memory_limit=%llu is below two chunks (%zu bytes)",
                       (unsigned long long)cfg->memory_limit, 2 * cfg->chunk_bytes);
    }
    if (l->max_object_bytes == 0 || l->max_object_bytes > cfg->chunk_bytes) {
        return cd_errf(err, ST_ERR_INVALID,
                       "max_object_bytes=%llu must be 1..chunk_bytes (%zu): an object lies in "
                       "one region",
                       (unsigned long long)l->max_object_bytes, cfg->chunk_bytes);
    }
    if (l->max_layers == 0 || l->max_layers > CD_LAYERS_MAX || l->max_hashes == 0 ||
        l->max_batch == 0 || l->max_namespaces == 0 || l->lease_ms == 0 ||
        l->max_lease_ms < l->lease_ms || l->reservation_ms == 0 || l->session_ttl_ms == 0 ||
        l->session_ttl_max_ms < l->session_ttl_ms || l->max_pin_ms == 0) {
        return cd_errf(err, ST_ERR_INVALID,
                       "limits out of range: max_layers=%u (1..%d), max_hashes=%u, max_batch=%u, "
                       "max_namespaces=%u, lease_ms=%llu, reservation_ms=%llu, session ttl "
                       "%llu..%llu, max_pin_ms=%llu must be nonzero",
                       l->max_layers, CD_LAYERS_MAX, l->max_hashes, l->max_batch, l->max_namespaces,
                       (unsigned long long)l->lease_ms, (unsigned long long)l->reservation_ms,
                       (unsigned long long)l->session_ttl_ms,
                       (unsigned long long)l->session_ttl_max_ms,
                       (unsigned long long)l->max_pin_ms);
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return cd_errf(err, ST_ERR_NOMEM, "out of memory creating the store");
    }
    s->ss_ns = calloc(l->max_namespaces, sizeof(cd_ns_t *));
    if (s->ss_ns == NULL) {
        free(s);
        return cd_errf(err, ST_ERR_NOMEM, "out of memory creating the store");
    }
    s->ss_cfg = *cfg;
    memcpy(s->ss_secret, cfg->cluster_secret, cfg->cluster_secret_len);
    s->ss_cfg.cluster_secret = s->ss_secret;
    if (s->ss_cfg.clock_ms == NULL) {
        s->ss_cfg.clock_ms = ss_monotonic_ms;
    }
    if (s->ss_cfg.reserve_bytes == 0) {
        s->ss_cfg.reserve_bytes = cfg->memory_limit;
    }
    cd_budget_init(&s->ss_budget, cfg->memory_limit,
                   cfg->meta_reserve != 0 ? cfg->meta_reserve : cfg->memory_limit / 16);
    pthread_mutex_init(&s->ss_ns_lock, NULL);
    pthread_mutex_init(&s->ss_tn_lock, NULL);
    *store_p = s;
    return ST_OK;
}

static void ns_free(cd_ns_t *ns)
{
    cd_htab_t *t = &ns->ns_objs;

    /* Objects first (they hold extents and sit in blocks), then the rest. */
    for (size_t i = 0; i < t->ht_cap; i++) {
        if (t->ht_slots[i].used) {
            do_obj_free(ns, t->ht_slots[i].value);
        }
    }
    do_reservations_destroy(ns);
    do_pins_destroy(ns);
    while (ns->ns_lease_head != NULL) {
        cd_lease_t *l = ns->ns_lease_head;

        ns->ns_lease_head = l->ls_next;
        do_lease_free(ns, l);
    }
    do_sessions_destroy(ns);
    cd_htab_destroy(&ns->ns_objs);
    cd_htab_destroy(&ns->ns_ids);
    cd_radix_destroy(&ns->ns_radix);
    cd_slab_destroy(&ns->ns_slab);
    pthread_mutex_destroy(&ns->ns_lock);
    free(ns);
}

void cd_store_destroy(cd_store_t *s)
{
    if (s == NULL) {
        return;
    }
    for (uint32_t i = 0; i < s->ss_n_ns; i++) {
        ns_free(s->ss_ns[i]);
    }
    free(s->ss_ns);
    for (size_t i = 0; i < s->ss_n_tn; i++) {
        free(s->ss_tn[i]);
    }
    free(s->ss_tn);
    pthread_mutex_destroy(&s->ss_tn_lock);
    cd_budget_destroy(&s->ss_budget);
    pthread_mutex_destroy(&s->ss_ns_lock);
    memset(s->ss_secret, 0, sizeof(s->ss_secret));
    free(s);
}

cd_ns_t *cd_ns_get(cd_store_t *s, uint32_t ns_id)
{
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);

    return ns_id >= 1 && ns_id <= n ? s->ss_ns[ns_id - 1] : NULL;
}

/* Hands an arena's region event to the store's owner (cd_store_config_t). */
static void ns_region_event(cd_ns_t *ns, cd_store_region_fn fn, const char *what, uint32_t region,
                            void *base, size_t len)
{
    lg_debug("arena region %s ns=%u region=%u bytes=%zu", what, ns->ns_id, region, len);
    if (fn != NULL) {
        fn(ns->ns_store->ss_cfg.region_ctx, ns->ns_id, region, base, len);
    }
}

static void ns_region_added(void *ctx, uint32_t region, void *base, size_t len)
{
    cd_ns_t *ns = ctx;

    ns_region_event(ns, ns->ns_store->ss_cfg.region_added, "added", region, base, len);
}

static void ns_region_removed(void *ctx, uint32_t region, void *base, size_t len)
{
    cd_ns_t *ns = ctx;

    ns_region_event(ns, ns->ns_store->ss_cfg.region_removed, "removed", region, base, len);
}

static st_status_t ns_chunk_alloc(void *ctx, uint32_t chunk, size_t len, void **base_p)
{
    cd_ns_t *ns = ctx;
    cd_store_t *s = ns->ns_store;

    return s->ss_cfg.chunk_alloc(s->ss_cfg.chunk_ctx, ns->ns_id, chunk, len, base_p);
}

static void ns_chunk_free(void *ctx, uint32_t chunk, void *base, size_t len)
{
    cd_ns_t *ns = ctx;
    cd_store_t *s = ns->ns_store;

    s->ss_cfg.chunk_free(s->ss_cfg.chunk_ctx, ns->ns_id, chunk, base, len);
}

static int ns_evict_cb(void *ctx)
{
    return do_evict_one(ctx);
}

static uint64_t ns_evictable_cb(void *ctx)
{
    cd_ns_t *ns = ctx;

    return ns->ns_radix.rx_bytes - ns->ns_radix.rx_held_bytes;
}

/* The settings of ns's allocator and arena, from the store's: its region
 * and chunk callbacks come back to the store with ns. */
static void ns_slab_config(cd_store_t *s, cd_ns_t *ns, cd_slab_config_t *sc)
{
    memset(sc, 0, sizeof(*sc));
    sc->arena.reserve_bytes = s->ss_cfg.reserve_bytes;
    sc->arena.chunk_bytes = s->ss_cfg.chunk_bytes;
    sc->arena.page_bytes = s->ss_cfg.page_bytes;
    sc->arena.huge = s->ss_cfg.huge;
    sc->arena.budget = &s->ss_budget;
    sc->arena.region_added = ns_region_added;
    sc->arena.region_removed = ns_region_removed;
    sc->arena.cb_ctx = ns;
    if (s->ss_cfg.chunk_alloc != NULL && s->ss_cfg.chunk_free != NULL) {
        sc->arena.chunk_alloc = ns_chunk_alloc;
        sc->arena.chunk_free = ns_chunk_free;
        sc->arena.chunk_ctx = ns;
    }
    sc->min_size = s->ss_cfg.slab_min;
    sc->factor = s->ss_cfg.slab_factor;
}

st_status_t cd_store_ns_create(cd_store_t *s, const char *tenant, const char *model,
                               uint32_t block_tokens, uint32_t *ns_id_p, cd_err_t *err)
{
    cd_slab_config_t sc;
    cd_slab_evictor_t ev;
    cd_ns_t *ns;
    cd_tenant_t *tn;
    st_hash_t seed;
    uint32_t n;
    st_status_t st;

    if (cd_ns_seed(s->ss_secret, s->ss_cfg.cluster_secret_len, tenant, model, &seed) != ST_OK) {
        return cd_errf(err, ST_ERR_INVALID, "tenant and model must be 1..%d bytes", CD_NAME_MAX);
    }
    if (block_tokens < 16 || block_tokens > ST_BLOCK_TOKENS_MAX || block_tokens % 16 != 0) {
        return cd_errf(err, ST_ERR_INVALID,
                       "block size %u tokens refused: a multiple of 16 in 16..%d", block_tokens,
                       ST_BLOCK_TOKENS_MAX);
    }
    pthread_mutex_lock(&s->ss_ns_lock);
    n = s->ss_n_ns;
    for (uint32_t i = 0; i < n; i++) {
        ns = s->ss_ns[i];
        if (strcmp(ns->ns_tenant, tenant) == 0 && strcmp(ns->ns_model, model) == 0) {
            pthread_mutex_unlock(&s->ss_ns_lock);
            if (ns->ns_block_tokens != block_tokens) {
                return cd_errf(err, ST_ERR_EXISTS,
                               "namespace tenant=%s model=%s exists with block size %u, not %u",
                               tenant, model, ns->ns_block_tokens, block_tokens);
            }
            *ns_id_p = ns->ns_id;
            return ST_OK;
        }
    }
    if (n == s->ss_cfg.limits.max_namespaces) {
        pthread_mutex_unlock(&s->ss_ns_lock);
        return cd_errf(err, ST_ERR_EXHAUSTED, "limit max_namespaces=%u reached",
                       s->ss_cfg.limits.max_namespaces);
    }
    tn = cd_tenant_get(s, tenant, 1);
    if (tn == NULL) {
        pthread_mutex_unlock(&s->ss_ns_lock);
        return cd_errf(err, ST_ERR_NOMEM, "out of memory creating a namespace");
    }
    st = cd_tenant_charge(tn, CD_RES_NAMESPACES, 1, err);
    if (st != ST_OK) {
        pthread_mutex_unlock(&s->ss_ns_lock);
        return st;
    }
    ns = calloc(1, sizeof(*ns));
    if (ns == NULL) {
        cd_tenant_release(tn, CD_RES_NAMESPACES, 1);
        pthread_mutex_unlock(&s->ss_ns_lock);
        return cd_errf(err, ST_ERR_NOMEM, "out of memory creating a namespace");
    }
    ns->ns_tn = tn;
    ns->ns_store = s;
    ns->ns_id = n + 1;
    snprintf(ns->ns_tenant, sizeof(ns->ns_tenant), "%s", tenant);
    snprintf(ns->ns_model, sizeof(ns->ns_model), "%s", model);
    ns->ns_block_tokens = block_tokens;
    ns->ns_seed = seed;
    ns->ns_next_id = XXH3_64bits_withSeed(&seed, sizeof(seed), ns->ns_id) >> 16;
    pthread_mutex_init(&ns->ns_lock, NULL);
    ns_slab_config(s, ns, &sc);
    st = cd_slab_init(&ns->ns_slab, &sc);
    if (st != ST_OK) {
        pthread_mutex_destroy(&ns->ns_lock);
        free(ns);
        cd_tenant_release(tn, CD_RES_NAMESPACES, 1);
        pthread_mutex_unlock(&s->ss_ns_lock);
        return cd_errf(err, st, "cannot set up the arena of namespace tenant=%s model=%s: %s",
                       tenant, model, st_strerror(st));
    }
    ev.evict = ns_evict_cb;
    ev.evictable = ns_evictable_cb;
    ev.ctx = ns;
    cd_slab_set_evictor(&ns->ns_slab, &ev);
    cd_radix_init(&ns->ns_radix, &s->ss_budget);
    cd_htab_init(&ns->ns_objs, &s->ss_budget);
    cd_htab_init(&ns->ns_ids, &s->ss_budget);
    s->ss_ns[n] = ns;
    atomic_store_explicit(&s->ss_n_ns, n + 1, memory_order_release);
    pthread_mutex_unlock(&s->ss_ns_lock);
    lg_info("namespace created ns=%u tenant=%s model=%s block_tokens=%u", ns->ns_id, tenant, model,
            block_tokens);
    *ns_id_p = ns->ns_id;
    return ST_OK;
}

st_status_t cd_store_ns_info(cd_store_t *s, uint32_t ns_id, cd_ns_info_t *info_p)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);

    if (ns == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    info_p->id = ns->ns_id;
    memcpy(info_p->tenant, ns->ns_tenant, sizeof(info_p->tenant));
    memcpy(info_p->model, ns->ns_model, sizeof(info_p->model));
    info_p->block_tokens = ns->ns_block_tokens;
    info_p->seed = ns->ns_seed;
    return ST_OK;
}

/*
 * Lease, reservation and session ids are random (OpenSSL's DRBG), so that
 * nobody guesses another client's; never 0 and never one the namespace
 * holds. Without randomness (never on Linux) the counter serves.
 */
uint64_t do_next_id(cd_ns_t *ns)
{
    for (int tries = 0; tries < 8; tries++) {
        uint64_t id = 0;
        st_hash_t key;

        if (RAND_bytes((unsigned char *)&id, sizeof(id)) != 1) {
            break;
        }
        key = cd_htab_id_key(id);
        if (id != 0 && cd_htab_find(&ns->ns_ids, &key, ID_RESV) == NULL &&
            cd_htab_find(&ns->ns_ids, &key, ID_LEASE) == NULL &&
            cd_htab_find(&ns->ns_ids, &key, ID_SESSION) == NULL) {
            return id;
        }
    }
    if (++ns->ns_next_id == 0) {
        ns->ns_next_id = 1;
    }
    return ns->ns_next_id;
}

st_status_t do_exhausted(cd_ns_t *ns, cd_err_t *err, const char *what, uint64_t requested)
{
    uint64_t arena, meta, limit;

    cd_budget_read(&ns->ns_store->ss_budget, &arena, &meta, &limit);
    ns->ns_st.exhausted++;
    lg_warn_ratelimited("memory exhausted ns=%u what=%s requested=%llu used=%llu limit=%llu",
                        ns->ns_id, what, (unsigned long long)requested,
                        (unsigned long long)(arena + meta), (unsigned long long)limit);
    return cd_errf(err, ST_ERR_EXHAUSTED,
                   "memory exhausted for %s: requested=%llu used=%llu (arena %llu + index %llu) "
                   "limit=%llu evictable=%llu; the rest is leased, pinned or reserved",
                   what, (unsigned long long)requested, (unsigned long long)(arena + meta),
                   (unsigned long long)arena, (unsigned long long)meta, (unsigned long long)limit,
                   (unsigned long long)(ns->ns_radix.rx_bytes - ns->ns_radix.rx_held_bytes));
}

/* --- eviction ---------------------------------------------------------------- */

int do_evict_local(cd_ns_t *ns)
{
    cd_block_t *b = cd_radix_victim(&ns->ns_radix);

    /* Blocks the SSD tier is writing out stay where they are in the LRU and
     * are passed over (a batch at a time: few). */
    while (b != NULL && b->bk_wb > 0) {
        b = cd_radix_victim_after(&ns->ns_radix, b);
    }
    if (b == NULL) {
        return 0;
    }
    while (b->bk_objs != NULL) {
        cd_obj_t *o = b->bk_objs;

        b->bk_objs = o->ob_next;
        cd_htab_remove(&ns->ns_objs, &o->ob_key.hash, cd_obj_tag(&o->ob_key));
        if (ns->ns_store->ss_cfg.evicted != NULL) {
            ns->ns_store->ss_cfg.evicted(ns->ns_store->ss_cfg.evicted_ctx, ns->ns_id, &o->ob_key,
                                         o->ob_has_parent ? &o->ob_parent : NULL,
                                         cd_extent_ptr(&ns->ns_slab, &o->ob_ext), o->ob_len,
                                         o->ob_tiered, o->ob_row_bytes);
        }
        ns->ns_st.evicted_objects++;
        ns->ns_st.evicted_bytes += o->ob_len;
        do_obj_free(ns, o);
    }
    cd_radix_remove(&ns->ns_radix, b);
    ns->ns_st.evicted_blocks++;
    return 1;
}

/*
 * Called with ns locked (see do_evict_one for when): frees budget in
 * another namespace. Each other namespace is tried with trylock (never
 * waiting while holding ns's lock, so two namespaces reclaiming from each
 * other cannot deadlock; they fail instead). In the first one taken, blocks
 * are evicted in its LRU order until one of its chunks is wholly free, and
 * its free chunks are given back to the budget. Returns 1 if budget was
 * freed.
 */
/* The arena bytes each of the n namespaces may hold when all want more. */
static uint64_t ns_fair_share(const cd_store_t *s, uint32_t n)
{
    const cd_budget_t *b = &s->ss_budget;

    return n > 0 ? (b->bg_limit - b->bg_meta_reserve) / n : 0;
}

static int do_reclaim_other(cd_ns_t *ns)
{
    cd_store_t *s = ns->ns_store;
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);
    uint64_t share = ns_fair_share(s, n);

    for (uint32_t k = 1; k < n; k++) {
        cd_ns_t *o = s->ss_ns[(ns->ns_id - 1 + k) % n];
        uint64_t evicted0, freed;

        if (pthread_mutex_trylock(&o->ns_lock) != 0) {
            continue;
        }
        if (cd_arena_committed(&o->ns_slab.sl_arena) <= share) {
            pthread_mutex_unlock(&o->ns_lock); /* not above its share: leave it be */
            continue;
        }
        evicted0 = o->ns_st.evicted_blocks;
        while (o->ns_slab.sl_arena.ar_n_empty == 0 && do_evict_local(o)) {
        }
        freed = cd_arena_trim(&o->ns_slab.sl_arena, 0);
        if (freed > 0 || o->ns_st.evicted_blocks != evicted0) {
            lg_debug("memory reclaimed for ns=%u from ns=%u blocks=%llu bytes=%llu", ns->ns_id,
                     o->ns_id, (unsigned long long)(o->ns_st.evicted_blocks - evicted0),
                     (unsigned long long)freed);
        }
        pthread_mutex_unlock(&o->ns_lock);
        if (freed > 0) {
            ns->ns_st.reclaims++;
            return 1;
        }
    }
    return 0;
}

/*
 * Whom to take from: first a tenant above its memory quota (a lowered one:
 * the caller's own tenant from the caller's namespace, then the namespaces
 * of other such tenants). Then a namespace below its fair share of the
 * arena budget (limit less the metadata reserve, divided by the number of
 * namespaces) first takes back from namespaces above theirs, then evicts its
 * own blocks; one at or above its share evicts its own first. Either way it
 * reclaims from others only when it has nothing left to evict itself or is
 * below its share, and only from namespaces above theirs.
 */
int do_evict_one(cd_ns_t *ns)
{
    cd_store_t *s = ns->ns_store;
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);

    if (do_reclaim_over_quota(ns)) {
        return 1;
    }
    if (n > 1 && cd_arena_committed(&ns->ns_slab.sl_arena) < ns_fair_share(s, n) &&
        do_reclaim_other(ns)) {
        return 1;
    }
    return do_evict_local(ns) || (n > 1 && do_reclaim_other(ns));
}

void do_obj_free(cd_ns_t *ns, cd_obj_t *o)
{
    if (o->ob_state == OBJ_COMMITTED) {
        ns->ns_st.objects[o->ob_key.kind]--;
        ns->ns_st.bytes[o->ob_key.kind] -= o->ob_len;
        if (o->ob_block != NULL) {
            cd_block_t *b = o->ob_block;

            b->bk_nobjs--;
            cd_radix_add_bytes(&ns->ns_radix, b, -(int64_t)o->ob_ext.size);
        }
    }
    cd_tenant_release(ns->ns_tn, CD_RES_MEMORY, o->ob_ext.size);
    do_rowsum_free(ns, o);
    cd_slab_free(&ns->ns_slab, &o->ob_ext);
    cd_budget_release_meta(&ns->ns_store->ss_budget, sizeof(*o));
    free(o);
}

/* --- write-behind ------------------------------------------------------------- */

st_status_t cd_store_clean_take(cd_store_t *s, uint32_t ns_id, uint32_t kinds, uint64_t ahead,
                                uint64_t max_bytes, cd_clean_t *out, size_t cap, size_t *n_p,
                                uint64_t *window_p)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_rnode_t *node, *next;
    uint64_t walked = 0, taken = 0;
    size_t n = 0, blocks = 0;

    *n_p = 0;
    if (ns == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&ns->ns_lock);
    /* Held blocks are passed over by eviction: at most an eighth of the
     * namespace's bytes (and one object) are held at a time, so that a
     * small namespace still has room to evict. */
    if (max_bytes > ns->ns_radix.rx_bytes / 8) {
        max_bytes = ns->ns_radix.rx_bytes / 8;
    }
    /* Eviction's order: the coldest leaf node first, each node's run from
     * its last block back. */
    for (node = ns->ns_radix.rx_lru_cold; node != NULL && walked < ahead; node = next) {
        next = node->rn_lru_next;
        for (uint32_t i = node->rn_len; i-- > 0 && walked < ahead;) {
            cd_block_t *b = node->rn_run[i];
            int held = 0;

            if (blocks++ == CD_CLEAN_WALK_MAX) {
                goto done;
            }
            walked += b->bk_bytes;
            if (b->bk_wb > 0) {
                continue;
            }
            for (cd_obj_t *o = b->bk_objs; o != NULL; o = o->ob_next) {
                cd_clean_t *c;

                if (o->ob_tiered || !(kinds & (1u << o->ob_key.kind))) {
                    continue;
                }
                if (n == cap || taken >= max_bytes) {
                    goto done;
                }
                c = &out[n++];
                c->key = o->ob_key;
                c->has_parent = o->ob_has_parent;
                c->parent = o->ob_parent;
                c->data = cd_extent_ptr(&ns->ns_slab, &o->ob_ext);
                c->len = o->ob_len;
                c->checksum = o->ob_checksum;
                c->row_bytes = o->ob_row_bytes;
                c->status = ST_ERR_UNAVAILABLE;
                c->obj_ = o;
                c->held_ = !held;
                if (!held) {
                    b->bk_wb++;
                    held = 1;
                }
                taken += o->ob_len;
            }
        }
    }
done:
    pthread_mutex_unlock(&ns->ns_lock);
    *n_p = n;
    if (window_p != NULL) {
        *window_p = walked;
    }
    return ST_OK;
}

void cd_store_clean_finish(cd_store_t *s, uint32_t ns_id, cd_clean_t *items, size_t n)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);

    if (ns == NULL || n == 0) {
        return;
    }
    pthread_mutex_lock(&ns->ns_lock);
    /* The held blocks kept every object: none was evicted, deleted or
     * replaced meanwhile. */
    for (size_t i = 0; i < n; i++) {
        cd_obj_t *o = items[i].obj_;

        if (items[i].status == ST_OK) {
            o->ob_tiered = items[i].token != 0 ? items[i].token : 1;
        }
        if (items[i].held_) {
            o->ob_block->bk_wb--;
        }
    }
    pthread_mutex_unlock(&ns->ns_lock);
}

/* --- leases (pins are in pin.c) ---------------------------------------------------------- */

st_status_t do_record_alloc(cd_ns_t *ns, size_t size, uint64_t bytes, int r, const char *what,
                            void **rec_p, cd_err_t *err)
{
    cd_budget_t *b = &ns->ns_store->ss_budget;
    st_status_t st;

    CD_WITH_EVICTION(ns, st, cd_htab_reserve(&ns->ns_ids, 1));
    if (st == ST_OK) {
        CD_WITH_EVICTION(ns, st, cd_budget_charge_meta(b, bytes));
    }
    if (st != ST_OK) {
        cd_tenant_release(ns->ns_tn, r, 1);
        return st == ST_ERR_EXHAUSTED ? do_exhausted(ns, err, what, bytes)
                                      : cd_errf(err, st, "out of memory for %s", what);
    }
    *rec_p = calloc(1, size);
    if (*rec_p == NULL) {
        cd_budget_release_meta(b, bytes);
        cd_tenant_release(ns->ns_tn, r, 1);
        return cd_errf(err, ST_ERR_NOMEM, "out of memory for %s", what);
    }
    return ST_OK;
}

st_status_t do_lease_alloc(cd_ns_t *ns, size_t cap, cd_lease_t **lease_p, cd_err_t *err)
{
    cd_budget_t *b = &ns->ns_store->ss_budget;
    uint64_t bytes = sizeof(cd_lease_t) + cap * sizeof(cd_block_t *);
    cd_lease_t *l;
    void *rec;
    st_status_t st;

    st = cd_tenant_charge(ns->ns_tn, CD_RES_LEASES, 1, err);
    if (st == ST_OK) {
        st = do_record_alloc(ns, sizeof(*l), bytes, CD_RES_LEASES, "a lease", &rec, err);
    }
    if (st != ST_OK) {
        return st;
    }
    l = rec;
    if (cap > 0) {
        l->ls_blocks = malloc(cap * sizeof(cd_block_t *));
    }
    if (cap > 0 && l->ls_blocks == NULL) {
        free(l);
        cd_budget_release_meta(b, bytes);
        cd_tenant_release(ns->ns_tn, CD_RES_LEASES, 1);
        return cd_errf(err, ST_ERR_NOMEM, "out of memory for a lease");
    }
    l->ls_cap = cap;
    *lease_p = l;
    return ST_OK;
}

void do_lease_free(cd_ns_t *ns, cd_lease_t *l)
{
    cd_tenant_release(ns->ns_tn, CD_RES_LEASES, 1);
    cd_budget_release_meta(&ns->ns_store->ss_budget,
                           sizeof(cd_lease_t) + l->ls_cap * sizeof(cd_block_t *));
    free(l->ls_blocks);
    free(l);
}

void do_lease_grant(cd_ns_t *ns, cd_lease_t *l, uint64_t now, uint64_t lease_ms)
{
    st_hash_t key;

    for (size_t i = 0; i < l->ls_n; i++) {
        cd_radix_hold(&ns->ns_radix, l->ls_blocks[i], 0);
    }
    l->ls_id = do_next_id(ns);
    l->ls_expires =
        now + (lease_ms == CD_LEASE_DEFAULT ? ns->ns_store->ss_cfg.limits.lease_ms : lease_ms);
    /* The list is kept in expiry order; with one usual duration the place
     * is at the tail, so walking back from it is O(1) in practice. */
    CD_QUEUE_INSERT_SORTED(ns->ns_lease_head, ns->ns_lease_tail, l, ls_prev, ls_next, ls_expires);
    key = cd_htab_id_key(l->ls_id);
    (void)cd_htab_insert(&ns->ns_ids, &key, ID_LEASE, l); /* reserved by do_lease_alloc */
    ns->ns_st.leases_granted++;
    ns->ns_st.leases_active++;
}

/* Drops a granted lease: unholds its blocks, unlinks and frees it. */
static void do_lease_end(cd_ns_t *ns, cd_lease_t *l)
{
    st_hash_t key = cd_htab_id_key(l->ls_id);

    for (size_t i = 0; i < l->ls_n; i++) {
        cd_radix_unhold(&ns->ns_radix, l->ls_blocks[i], 0);
    }
    cd_htab_remove(&ns->ns_ids, &key, ID_LEASE);
    CD_QUEUE_REMOVE(ns->ns_lease_head, ns->ns_lease_tail, l, ls_prev, ls_next);
    ns->ns_st.leases_active--;
    do_lease_free(ns, l);
}

st_status_t cd_store_end_id(cd_store_t *s, uint32_t ns_id, uint64_t id, uint32_t tag,
                            void (*end)(cd_ns_t *ns, void *rec))
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    st_hash_t key = cd_htab_id_key(id);
    void *rec;

    if (ns == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&ns->ns_lock);
    rec = cd_htab_find(&ns->ns_ids, &key, tag);
    if (rec != NULL) {
        end(ns, rec);
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return rec != NULL ? ST_OK : ST_ERR_NOT_FOUND;
}

/* Ends lease l on its holder's word (cd_store_end_id). */
static void lease_release(cd_ns_t *ns, void *l)
{
    do_lease_end(ns, l);
    ns->ns_st.leases_released++;
}

st_status_t cd_store_release(cd_store_t *s, uint32_t ns_id, uint64_t lease_id)
{
    return cd_store_end_id(s, ns_id, lease_id, ID_LEASE, lease_release);
}

/* --- the reaper and stats -------------------------------------------------------- */

void cd_store_reap(cd_store_t *s, uint64_t now_ms, cd_reaped_t *out)
{
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);
    cd_reaped_t r = {0};

    for (uint32_t i = 0; i < n; i++) {
        cd_ns_t *ns = s->ss_ns[i];

        pthread_mutex_lock(&ns->ns_lock);
        r.reservations += do_reap_reservations(ns, now_ms);
        while (ns->ns_lease_head != NULL && ns->ns_lease_head->ls_expires <= now_ms) {
            do_lease_end(ns, ns->ns_lease_head);
            ns->ns_st.leases_expired++;
            r.leases++;
        }
        r.sessions += do_reap_sessions(ns, now_ms);
        r.pins += do_reap_pins(ns, now_ms);
        r.trimmed_bytes += cd_arena_trim(&ns->ns_slab.sl_arena, 1);
        pthread_mutex_unlock(&ns->ns_lock);
    }
    if (out != NULL) {
        *out = r;
    }
}

void cd_store_regions(cd_store_t *s, uint32_t ns_id, cd_store_region_fn fn, void *ctx)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_arena_t *a;

    if (ns == NULL) {
        return;
    }
    pthread_mutex_lock(&ns->ns_lock);
    a = &ns->ns_slab.sl_arena;
    for (uint32_t c = 0; c < a->ar_n_chunks; c++) {
        if (a->ar_active[c]) {
            fn(ctx, ns_id, c, cd_arena_chunk(a, c), a->ar_chunk_bytes);
        }
    }
    pthread_mutex_unlock(&ns->ns_lock);
}

size_t cd_store_class_stats(cd_store_t *s, uint32_t ns_id, cd_class_stats_t *out, size_t cap)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    const cd_slab_t *sl;
    size_t n;

    if (ns == NULL) {
        return 0;
    }
    pthread_mutex_lock(&ns->ns_lock);
    sl = &ns->ns_slab;
    n = sl->sl_n_classes + 1;
    for (size_t i = 0; i < n && i < cap; i++) {
        if (i < sl->sl_n_classes) {
            const cd_slab_class_t *c = &sl->sl_classes[i];

            out[i] =
                (cd_class_stats_t){c->sc_size, c->sc_pages, c->sc_used, c->sc_allocs, c->sc_frees};
        } else {
            out[i] = (cd_class_stats_t){0, sl->sl_large_pages, sl->sl_large_extents, 0, 0};
        }
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return n;
}

static void stats_add(cd_stats_t *to, const cd_stats_t *from)
{
    const uint64_t *f = (const uint64_t *)((const char *)from + offsetof(cd_stats_t, objects));
    uint64_t *t = (uint64_t *)((char *)to + offsetof(cd_stats_t, objects));
    size_t n = (sizeof(cd_stats_t) - offsetof(cd_stats_t, objects)) / sizeof(uint64_t);

    for (size_t i = 0; i < n; i++) {
        t[i] += f[i];
    }
}

st_status_t cd_store_stats(cd_store_t *s, uint32_t ns_id, cd_stats_t *out)
{
    uint32_t n = atomic_load_explicit(&s->ss_n_ns, memory_order_acquire);
    uint64_t arena, meta, limit;

    if (ns_id != 0 && cd_ns_get(s, ns_id) == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    memset(out, 0, sizeof(*out));
    for (uint32_t i = 0; i < n; i++) {
        cd_ns_t *ns = s->ss_ns[i];
        cd_stats_t one;

        if (ns_id != 0 && ns->ns_id != ns_id) {
            continue;
        }
        pthread_mutex_lock(&ns->ns_lock);
        one = ns->ns_st;
        one.blocks = ns->ns_radix.rx_blocks;
        one.nodes = ns->ns_radix.rx_nodes;
        one.splits = ns->ns_radix.rx_splits;
        one.arena_committed = cd_arena_committed(&ns->ns_slab.sl_arena);
        one.arena_used = ns->ns_slab.sl_used_bytes;
        one.memory_used = 0;
        one.memory_limit = 0;
        pthread_mutex_unlock(&ns->ns_lock);
        stats_add(out, &one);
        out->namespaces++;
    }
    cd_budget_read(&s->ss_budget, &arena, &meta, &limit);
    out->memory_used = arena + meta;
    out->memory_limit = limit;
    return ST_OK;
}
