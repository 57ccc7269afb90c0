/*
 * tier.c - stratad and the SSD tier: write-through of KDA objects, session
 * and namespace records, spill on eviction, promote on a miss, recovery.
 * See tier.h and docs/tiers.md ("In stratad").
 */
#include "tier.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon.h"
#include "st_log.h"

#define T_PREFIX       24 /* magic u32, flags u32, parent hash 16 */
/* flags: bit 0 the object has a parent; bits 8..31 its row size (KV, IDX
 * written with row_bytes; 0: none), so that a promote computes its row sums
 * again. */
#define T_ROWB_SHIFT   8
#define T_ROWB_MAX     ((1u << 24) - 1)
#define T_OBJ_MAGIC    0x31544443u /* "CDT1" */
#define T_NS_MAGIC     0x314e4443u /* "CDN1" */
#define T_SESS_MAGIC   0x31534443u /* "CDS1" */
#define T_SESS_BYTES   64
#define T_NS_LAYER     0xffffu /* SESSION-kind key of a namespace record */
#define T_INFLIGHT_MAX (256ull << 20)

/* One block of the T2 index. */
typedef struct t2_ent {
    struct t2_ent *next;
    uint64_t ns;
    st_hash_t h;
    uint32_t n, cap;
    uint32_t pending; /* spills queued, not yet committed */
    int promoting;    /* a thread is promoting the tags it took */
    uint16_t *tags;   /* kind << 8 | layer */
    uint16_t inl[4];
} t2_ent_t;

struct cd_tier {
    cd_daemon_t *d;
    st_ssd_t *ssd;
    int spill;
    int recovering;
    _Atomic uint64_t wire[CD_MAX_NS + 1]; /* local namespace id -> wire id */

    pthread_mutex_t close_lock; /* st_ssd_close against cd_tier_stats (the metrics thread) */
    pthread_mutex_t lock;       /* the index */
    pthread_cond_t cond;        /* a promotion finished */
    t2_ent_t **buckets;
    size_t nbuckets, nblocks, nobjects;

    _Atomic uint64_t inflight; /* bytes of spills queued, not yet done */
    _Atomic uint64_t gen;      /* promotions finished */
    _Atomic uint64_t spill_queued, spill_dropped, promoted, promote_misses;
    _Atomic uint64_t spill_clean; /* evictions of objects whose tier copy stayed */
    /* Per local namespace and cd_kind_t (KV, IDX, KDA): objects written to
     * the tier from DRAM (spills and the write-behind's), and promoted. */
    _Atomic uint64_t flow_spills[CD_MAX_NS + 1][3];
    _Atomic uint64_t flow_promoted[CD_MAX_NS + 1][3];
    uint64_t recovered_ms, recovered_sessions, recovered_objects;

    /* Write-behind (t_wb_main): one thread writes the coldest objects of
     * each namespace out ahead of eviction, a batch at a time. */
    uint64_t wb_ahead;      /* ssd_writeback; 0: no thread */
    _Atomic int wb_running; /* read by evictions on any thread */
    int wb_stop;
    pthread_t wb_thread;
    pthread_mutex_t wb_lock;
    pthread_cond_t wb_cond;      /* a kick or the stop */
    pthread_cond_t wb_done_cond; /* the batch's last write finished */
    uint32_t wb_pending;         /* writes of the batch not finished */
    _Atomic uint8_t wb_want[CD_MAX_NS + 1];
    /* Per namespace: the window's size when a pass last found it all
     * written, and an estimate of its written bytes left since (evictions
     * of written objects take from it; under half the window, a kick). */
    _Atomic uint64_t wb_window[CD_MAX_NS + 1];
    _Atomic int64_t wb_clean[CD_MAX_NS + 1];
    cd_clean_t *wb_items;
    struct t_wb_job *wb_jobs;
    _Atomic uint64_t wb_objects, wb_bytes, wb_failed;
};

/* One write of a write-behind batch. */
typedef struct t_wb_job {
    cd_tier_t *t;
    cd_clean_t *c;
} t_wb_job_t;

#define T_WB_CAP       1024          /* objects per write-behind batch */
#define T_WB_MAX_BYTES (16ull << 20) /* object bytes per batch (their blocks are held) */
#define T_WB_RETRY_MS  1000          /* pause after a batch that failed (map full, say) */

/* A spill in flight: its value follows. */
typedef struct t_spill {
    cd_tier_t *t;
    uint64_t len;
    uint32_t ns_id, kind; /* local namespace, cd_kind_t: for the flow counters */
} t_spill_t;

static const uint8_t t_ssd_kind[CD_KIND_COUNT] = {ST_SSD_KV, ST_SSD_IDX, ST_SSD_KDA, 0, 0};

/* ------------------------------------------------------------ helpers -- */

static void t_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void t_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint32_t t_get32(const uint8_t *p)
{
    uint32_t v = 0;

    for (int i = 3; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t t_get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t t_unix_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t t_mono_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

static st_ssd_key_t t_key(uint64_t wire, const st_hash_t *h, unsigned kind, unsigned layer)
{
    st_ssd_key_t k;

    memset(&k, 0, sizeof(k));
    k.ns = wire;
    k.id = *h;
    k.kind = (uint8_t)kind;
    k.layer = (uint16_t)layer;
    return k;
}

/* The value of a KV, IDX or KDA object: prefix, then the bytes. */
/* The tiered hint's token (store.h): nonzero, and it changes whenever
 * anything may have been removed from the tier (st_ssd_removals). */
static uint64_t t_token(cd_tier_t *t)
{
    return st_ssd_removals(t->ssd) + 1;
}

static void t_prefix(uint8_t *p, const st_hash_t *parent, uint32_t row_bytes)
{
    uint32_t rowb = row_bytes <= T_ROWB_MAX ? row_bytes : 0;

    t_put32(p, T_OBJ_MAGIC);
    t_put32(p + 4, (parent != NULL ? 1u : 0u) | rowb << T_ROWB_SHIFT);
    if (parent != NULL) {
        memcpy(p + 8, parent->b, ST_HASH_BYTES);
    } else {
        memset(p + 8, 0, ST_HASH_BYTES);
    }
}

/* Describes a failed write for a person, with the tier's numbers. */
static st_status_t t_write_err(cd_tier_t *t, cd_err_t *err, st_status_t st, const char *what,
                               uint64_t len)
{
    st_ssd_stats_t s;

    if (err == NULL) {
        return st;
    }
    st_ssd_stats(t->ssd, &s);
    if (st == ST_ERR_EXHAUSTED) {
        snprintf(err->msg, sizeof(err->msg),
                 "SSD tier full on node %s: %s of %llu bytes refused; ssd_map_size=%llu, "
                 "%llu bytes of the map in use (raise ssd_map_size or free disk space); reads "
                 "keep working",
                 t->d->cfg.node_id, what, (unsigned long long)len, (unsigned long long)s.map_size,
                 (unsigned long long)s.map_used);
    } else {
        snprintf(err->msg, sizeof(err->msg), "SSD tier on node %s: %s of %llu bytes failed: %s",
                 t->d->cfg.node_id, what, (unsigned long long)len, st_strerror(st));
    }
    return st;
}

/* -------------------------------------------------------- T2 index -- */

static size_t t2_slot(const cd_tier_t *t, uint64_t ns, const st_hash_t *h)
{
    uint64_t x;

    memcpy(&x, h->b, 8);
    x ^= ns * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (size_t)(x & (t->nbuckets - 1));
}

static t2_ent_t *t2_find(const cd_tier_t *t, uint64_t ns, const st_hash_t *h)
{
    t2_ent_t *e;

    if (t->nbuckets == 0) {
        return NULL;
    }
    for (e = t->buckets[t2_slot(t, ns, h)]; e != NULL; e = e->next) {
        if (e->ns == ns && memcmp(e->h.b, h->b, ST_HASH_BYTES) == 0) {
            return e;
        }
    }
    return NULL;
}

static int t2_grow(cd_tier_t *t)
{
    size_t n = t->nbuckets ? t->nbuckets * 2 : 1024;
    t2_ent_t **nb = calloc(n, sizeof(*nb));
    size_t old = t->nbuckets;
    t2_ent_t **ob = t->buckets;

    if (nb == NULL) {
        return -1;
    }
    t->buckets = nb;
    t->nbuckets = n;
    for (size_t i = 0; i < old; i++) {
        while (ob[i] != NULL) {
            t2_ent_t *e = ob[i];
            size_t s = t2_slot(t, e->ns, &e->h);

            ob[i] = e->next;
            e->next = nb[s];
            nb[s] = e;
        }
    }
    free(ob);
    return 0;
}

/* Finds or creates the block's entry. NULL: no memory. */
static t2_ent_t *t2_get(cd_tier_t *t, uint64_t ns, const st_hash_t *h)
{
    t2_ent_t *e = t2_find(t, ns, h);
    size_t s;

    if (e != NULL) {
        return e;
    }
    if (t->nblocks >= t->nbuckets && t2_grow(t) != 0) {
        return NULL;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return NULL;
    }
    e->ns = ns;
    e->h = *h;
    e->tags = e->inl;
    e->cap = 4;
    s = t2_slot(t, ns, h);
    e->next = t->buckets[s];
    t->buckets[s] = e;
    t->nblocks++;
    return e;
}

static void t2_unlink(cd_tier_t *t, t2_ent_t *e)
{
    t2_ent_t **pp = &t->buckets[t2_slot(t, e->ns, &e->h)];

    while (*pp != e) {
        pp = &(*pp)->next;
    }
    *pp = e->next;
    t->nblocks--;
    if (e->tags != e->inl) {
        free(e->tags);
    }
    free(e);
}

static void t2_maybe_free(cd_tier_t *t, t2_ent_t *e)
{
    if (e->n == 0 && e->pending == 0 && !e->promoting) {
        t2_unlink(t, e);
    }
}

static int t2_add_tag(cd_tier_t *t, t2_ent_t *e, uint16_t tag)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (e->tags[i] == tag) {
            return 0;
        }
    }
    if (e->n == e->cap) {
        uint32_t cap = e->cap * 2;
        uint16_t *nt = malloc(sizeof(*nt) * cap);

        if (nt == NULL) {
            return -1;
        }
        memcpy(nt, e->tags, sizeof(*nt) * e->n);
        if (e->tags != e->inl) {
            free(e->tags);
        }
        e->tags = nt;
        e->cap = cap;
    }
    e->tags[e->n++] = tag;
    t->nobjects++;
    return 0;
}

static void t2_del_tag(cd_tier_t *t, t2_ent_t *e, uint16_t tag)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (e->tags[i] == tag) {
            e->tags[i] = e->tags[--e->n];
            t->nobjects--;
            return;
        }
    }
}

/* Adds (ns, h, tag) to the index. Returns 0, or -1 for no memory. */
static int t2_add(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag, int pending)
{
    t2_ent_t *e;
    int rc = -1;

    pthread_mutex_lock(&t->lock);
    e = t2_get(t, ns, h);
    if (e != NULL) {
        rc = t2_add_tag(t, e, tag);
        if (rc == 0 && pending) {
            e->pending++;
        }
        if (rc != 0) {
            t2_maybe_free(t, e);
        }
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

/* Removes a tag (and, with pending, one queued spill). */
static void t2_remove(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag, int remove_tag,
                      int pending)
{
    t2_ent_t *e;

    pthread_mutex_lock(&t->lock);
    e = t2_find(t, ns, h);
    if (e != NULL) {
        if (remove_tag) {
            t2_del_tag(t, e, tag);
        }
        if (pending && e->pending > 0) {
            e->pending--;
        }
        t2_maybe_free(t, e);
    }
    pthread_mutex_unlock(&t->lock);
}

static uint16_t t_tag_of(const st_ssd_key_t *k)
{
    unsigned kind = k->kind == ST_SSD_KV    ? CD_KIND_KV
                    : k->kind == ST_SSD_IDX ? CD_KIND_IDX
                                            : CD_KIND_KDA;

    return (uint16_t)(kind << 8 | (k->layer & 0xff));
}

/* -------------------------------------------------- tier callbacks -- */

/* Writer thread: a queued spill finished. */
static void t_spill_done(void *arg, const st_ssd_key_t *key, st_status_t status)
{
    t_spill_t *sp = arg;
    cd_tier_t *t = sp->t;

    t2_remove(t, key->ns, &key->id, t_tag_of(key), status != ST_OK, 1);
    if (status == ST_OK && sp->ns_id <= CD_MAX_NS && sp->kind < 3) {
        atomic_fetch_add(&t->flow_spills[sp->ns_id][sp->kind], 1);
    }
    atomic_fetch_sub(&t->inflight, sp->len);
    free(sp);
}

/* The local namespace id of a wire id (0: none bound). Lock-free. */
static uint32_t t_local_of(cd_tier_t *t, uint64_t wire)
{
    for (uint32_t i = 1; i <= CD_MAX_NS; i++) {
        if (atomic_load_explicit(&t->wire[i], memory_order_relaxed) == wire) {
            return i;
        }
    }
    return 0;
}

/* Writer thread, after each commit: the bytes of KV, IDX and KDA objects the
 * tier holds, per tenant (the ssd quota; session and namespace records are
 * counted by the sessions and namespaces quotas instead). */
static void t_usage(void *arg, const st_ssd_key_t *key, int64_t delta)
{
    cd_tier_t *t = arg;
    uint32_t local;

    if (key->kind != ST_SSD_KV && key->kind != ST_SSD_IDX && key->kind != ST_SSD_KDA) {
        return;
    }
    local = t_local_of(t, key->ns);
    if (local != 0) {
        cd_store_tenant_ssd_add(t->d->store, local, delta);
    }
}

/* Writer thread: the spill budget evicted an object. */
static void t_budget_evicted(void *arg, const st_ssd_key_t *key, uint64_t length)
{
    (void)length;
    t2_remove(arg, key->ns, &key->id, t_tag_of(key), 1, 0);
}

/* ---------------------------------------------------- write-behind -- */

/*
 * Evictions take the coldest objects of a namespace; the ones the tier holds
 * no copy of are copied and queued for the writer on the evicting thread (a
 * put, or a promote making room). The write-behind thread writes the
 * coldest ssd_writeback bytes of each namespace's objects out ahead of
 * that, straight from DRAM (their blocks held meanwhile, the hold no
 * access), and marks them tiered, so that their eviction finds the copy
 * (st_ssd_contains) and writes nothing. It runs when evictions kick it.
 */

/* Writer thread: one write of the batch finished. */
static void t_wb_done(void *arg, const st_ssd_key_t *key, st_status_t status)
{
    t_wb_job_t *j = arg;
    cd_tier_t *t = j->t;

    (void)key;
    pthread_mutex_lock(&t->wb_lock);
    j->c->status = status;
    if (--t->wb_pending == 0) {
        pthread_cond_signal(&t->wb_done_cond);
    }
    pthread_mutex_unlock(&t->wb_lock);
}

/* Called by evictions (namespace lock held) of len bytes, clean (the tier
 * had the copy) or not: wakes the thread when the written part of the
 * window runs low, or at once when an eviction had to write. */
static void t_wb_kick(cd_tier_t *t, uint32_t ns_id, uint64_t len, int clean)
{
    if (!atomic_load_explicit(&t->wb_running, memory_order_relaxed)) {
        return;
    }
    if (clean && atomic_fetch_sub(&t->wb_clean[ns_id], (int64_t)len) - (int64_t)len >
                     (int64_t)(atomic_load(&t->wb_window[ns_id]) / 2)) {
        return;
    }
    if (atomic_load_explicit(&t->wb_want[ns_id], memory_order_relaxed)) {
        return;
    }
    atomic_store(&t->wb_want[ns_id], 1);
    pthread_mutex_lock(&t->wb_lock);
    pthread_cond_signal(&t->wb_cond);
    pthread_mutex_unlock(&t->wb_lock);
}

/*
 * Writes batches of namespace ns_id's coldest objects until none is left to
 * write in its window. Returns 0, or -1 after a batch with failed writes
 * (the thread then pauses: a full map would fail the next one too).
 */
static int t_wb_clean(cd_tier_t *t, uint32_t ns_id)
{
    cd_store_t *store = t->d->store;
    uint64_t wire = atomic_load(&t->wire[ns_id]);
    /* Held blocks are not evictable: a batch is a small part of the window. */
    uint64_t max_bytes =
        t->wb_ahead / 4 + 1 < T_WB_MAX_BYTES ? t->wb_ahead / 4 + 1 : T_WB_MAX_BYTES;
    size_t n;

    if (wire == 0 || store == NULL) {
        return 0;
    }
    for (;;) {
        uint64_t bytes = 0, failed = 0, window = 0, token;

        if (cd_store_clean_take(store, ns_id, 1u << CD_KIND_KV | 1u << CD_KIND_IDX, t->wb_ahead,
                                max_bytes, t->wb_items, T_WB_CAP, &n, &window) != ST_OK) {
            return 0;
        }
        if (n == 0) {
            atomic_store(&t->wb_window[ns_id], window);
            atomic_store(&t->wb_clean[ns_id], (int64_t)window);
            return 0;
        }
        pthread_mutex_lock(&t->wb_lock);
        t->wb_pending = (uint32_t)n;
        pthread_mutex_unlock(&t->wb_lock);
        token = t_token(t); /* before the writes: a removal after them changes it */
        for (size_t i = 0; i < n; i++) {
            cd_clean_t *c = &t->wb_items[i];
            uint8_t prefix[T_PREFIX];
            st_ssd_key_t k = t_key(wire, &c->key.hash, t_ssd_kind[c->key.kind], c->key.layer);
            st_status_t st;

            t_prefix(prefix, c->has_parent ? &c->parent : NULL, c->row_bytes);
            c->token = token;
            t->wb_jobs[i].t = t;
            t->wb_jobs[i].c = c;
            /* A tenant at its ssd quota is not written ahead (its eviction
             * then finds no copy and its spill is dropped). */
            st = cd_store_tenant_ssd_check(store, ns_id, T_PREFIX + c->len, NULL);
            /* Waits when the writer's queue is full: this thread may. */
            if (st == ST_OK) {
                st = st_ssd_spill_parts(t->ssd, &k, prefix, T_PREFIX, c->data, c->len, 0, t_wb_done,
                                        &t->wb_jobs[i]);
            }
            if (st != ST_OK) {
                pthread_mutex_lock(&t->wb_lock);
                c->status = st;
                t->wb_pending--;
                pthread_mutex_unlock(&t->wb_lock);
            }
        }
        pthread_mutex_lock(&t->wb_lock);
        while (t->wb_pending > 0) {
            pthread_cond_wait(&t->wb_done_cond, &t->wb_lock);
        }
        pthread_mutex_unlock(&t->wb_lock);
        for (size_t i = 0; i < n; i++) {
            if (t->wb_items[i].status == ST_OK) {
                bytes += t->wb_items[i].len;
                atomic_fetch_add(&t->flow_spills[ns_id][t->wb_items[i].key.kind], 1);
            } else {
                failed++;
            }
        }
        cd_store_clean_finish(store, ns_id, t->wb_items, n);
        atomic_fetch_add(&t->wb_objects, n - failed);
        atomic_fetch_add(&t->wb_bytes, bytes);
        if (failed > 0) {
            atomic_fetch_add(&t->wb_failed, failed);
            st_warn_ratelimited("ssd write-behind: %llu of %zu writes failed ns=%u; pausing",
                                (unsigned long long)failed, n, ns_id);
            return -1;
        }
        pthread_mutex_lock(&t->wb_lock);
        if (t->wb_stop) {
            pthread_mutex_unlock(&t->wb_lock);
            return 0;
        }
        pthread_mutex_unlock(&t->wb_lock);
    }
}

static void *t_wb_main(void *arg)
{
    cd_tier_t *t = arg;

    pthread_mutex_lock(&t->wb_lock);
    while (!t->wb_stop) {
        int any = 0, paused = 0;

        for (uint32_t id = 1; id <= CD_MAX_NS && !t->wb_stop; id++) {
            if (!atomic_exchange(&t->wb_want[id], 0)) {
                continue;
            }
            any = 1;
            pthread_mutex_unlock(&t->wb_lock);
            paused |= t_wb_clean(t, id) != 0;
            pthread_mutex_lock(&t->wb_lock);
        }
        if (paused) {
            /* Kicks wake the thread, but only the stop ends the pause. */
            struct timespec ts;

            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += T_WB_RETRY_MS / 1000;
            while (!t->wb_stop &&
                   pthread_cond_timedwait(&t->wb_cond, &t->wb_lock, &ts) != ETIMEDOUT) {
            }
        } else if (!any && !t->wb_stop) {
            pthread_cond_wait(&t->wb_cond, &t->wb_lock);
        }
    }
    pthread_mutex_unlock(&t->wb_lock);
    return NULL;
}

/* ------------------------------------------------------- lifecycle -- */

st_status_t cd_tier_open(cd_daemon_t *d, cd_tier_t **t_p)
{
    st_ssd_params_t p;
    cd_tier_t *t = calloc(1, sizeof(*t));
    st_status_t st;

    if (t == NULL) {
        return ST_ERR_NOMEM;
    }
    t->d = d;
    t->spill = d->cfg.ssd_spill;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->close_lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    pthread_mutex_init(&t->wb_lock, NULL);
    pthread_cond_init(&t->wb_cond, NULL);
    pthread_cond_init(&t->wb_done_cond, NULL);
    memset(&p, 0, sizeof(p));
    p.dir = d->cfg.data_dir;
    p.map_size = d->cfg.ssd_map_size;
    p.spill_budget = d->cfg.ssd_spill_budget;
    p.sync = d->cfg.ssd_sync == 1 ? ST_SSD_SYNC_NONE : ST_SSD_SYNC_DURABLE;
    p.on_evict = t_budget_evicted;
    p.evict_arg = t;
    p.on_usage = t_usage;
    p.usage_arg = t;
    st = st_ssd_open(&p, &t->ssd);
    if (st != ST_OK) {
        st_error("cannot open the SSD tier data_dir=%s ssd_map_size=%llu: %s", d->cfg.data_dir,
                 (unsigned long long)d->cfg.ssd_map_size, st_strerror(st));
        cd_tier_free(t);
        return st;
    }
    t->wb_ahead = t->spill ? d->cfg.ssd_writeback : 0;
    if (t->wb_ahead > 0) {
        t->wb_items = calloc(T_WB_CAP, sizeof(*t->wb_items));
        t->wb_jobs = calloc(T_WB_CAP, sizeof(*t->wb_jobs));
        if (t->wb_items == NULL || t->wb_jobs == NULL ||
            pthread_create(&t->wb_thread, NULL, t_wb_main, t) != 0) {
            st_error("cannot start the SSD tier's write-behind thread");
            cd_tier_free(t);
            return ST_ERR_NOMEM;
        }
        t->wb_running = 1;
    }
    *t_p = t;
    return ST_OK;
}

void cd_tier_shutdown(cd_tier_t *t)
{
    st_ssd_t *ssd;

    if (t == NULL || t->ssd == NULL) {
        return;
    }
    if (atomic_load(&t->wb_running)) {
        /* Its batch in flight finishes first: the writer still runs. */
        pthread_mutex_lock(&t->wb_lock);
        t->wb_stop = 1;
        pthread_cond_broadcast(&t->wb_cond);
        pthread_mutex_unlock(&t->wb_lock);
        pthread_join(t->wb_thread, NULL);
        t->wb_running = 0;
    }
    ssd = t->ssd;
    pthread_mutex_lock(&t->close_lock);
    st_ssd_close(ssd); /* runs the done callbacks of queued spills (they take only lock) */
    t->ssd = NULL;
    pthread_mutex_unlock(&t->close_lock);
}

void cd_tier_free(cd_tier_t *t)
{
    if (t == NULL) {
        return;
    }
    cd_tier_shutdown(t);
    for (size_t i = 0; i < t->nbuckets; i++) {
        while (t->buckets[i] != NULL) {
            t2_ent_t *e = t->buckets[i];

            t->buckets[i] = e->next;
            if (e->tags != e->inl) {
                free(e->tags);
            }
            free(e);
        }
    }
    free(t->buckets);
    free(t->wb_items);
    free(t->wb_jobs);
    pthread_mutex_destroy(&t->wb_lock);
    pthread_cond_destroy(&t->wb_cond);
    pthread_cond_destroy(&t->wb_done_cond);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->close_lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

void cd_tier_ns_bind(cd_tier_t *t, uint32_t local_id, uint64_t wire_id)
{
    if (t != NULL && local_id <= CD_MAX_NS) {
        atomic_store(&t->wire[local_id], wire_id);
    }
}

/* ------------------------------------------------------------ writes -- */

st_status_t cd_tier_ns_put(cd_tier_t *t, uint64_t wire_id, const char *tenant, const char *model,
                           uint32_t block_tokens, cd_err_t *err)
{
    size_t tl = strlen(tenant), ml = strlen(model);
    uint8_t buf[16 + 2 * CD_NAME_MAX];
    static const st_hash_t zero = {{0}};
    st_ssd_key_t k = t_key(wire_id, &zero, ST_SSD_SESSION, T_NS_LAYER);
    st_status_t st;

    if (t == NULL || t->recovering) {
        return ST_OK;
    }
    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    if (tl > CD_NAME_MAX || ml > CD_NAME_MAX) {
        return ST_ERR_INVALID;
    }
    t_put32(buf, T_NS_MAGIC);
    t_put32(buf + 4, block_tokens);
    t_put32(buf + 8, (uint32_t)tl);
    t_put32(buf + 12, (uint32_t)ml);
    memcpy(buf + 16, tenant, tl);
    memcpy(buf + 16 + tl, model, ml);
    st = st_ssd_put(t->ssd, &k, buf, 16 + tl + ml, ST_SSD_DURABLE, NULL, NULL);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "the namespace record", 16 + tl + ml);
}

st_status_t cd_tier_put_object(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key,
                               const st_hash_t *parent, const void *data, uint64_t len, int durable,
                               cd_err_t *err)
{
    st_ssd_key_t k;
    uint8_t *buf;
    st_status_t st;

    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    if (key->kind >= CD_KIND_COUNT || t_ssd_kind[key->kind] == 0) {
        return ST_ERR_INVALID;
    }
    k = t_key(wire_id, &key->hash, t_ssd_kind[key->kind], key->layer);
    st = cd_store_tenant_ssd_check(t->d->store, t_local_of(t, wire_id), T_PREFIX + len, err);
    if (st == ST_ERR_EXHAUSTED) {
        return st; /* the tenant's ssd quota: the message says so */
    }
    buf = malloc(T_PREFIX + len);
    if (buf == NULL) {
        return ST_ERR_NOMEM;
    }
    t_prefix(buf, parent, 0);
    memcpy(buf + T_PREFIX, data, len);
    if (key->kind == CD_KIND_KDA) {
        st = st_ssd_put(t->ssd, &k, buf, T_PREFIX + len, durable ? ST_SSD_DURABLE : 0, NULL, NULL);
    } else {
        st = st_ssd_spill(t->ssd, &k, buf, T_PREFIX + len, ST_SSD_NOWAIT, NULL, NULL);
    }
    free(buf);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a durable KDA put", len);
}

st_status_t cd_tier_session_put(cd_tier_t *t, uint64_t wire_id, const cd_session_t *rec,
                                int durable, cd_err_t *err)
{
    uint8_t buf[T_SESS_BYTES];
    st_ssd_key_t k = t_key(wire_id, &rec->id, ST_SSD_SESSION, 0);
    uint64_t now_store, now_unix = t_unix_ms();
    st_status_t st;

    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    now_store = cd_store_now(t->d->store);
    memset(buf, 0, sizeof(buf));
    t_put32(buf, T_SESS_MAGIC);
    memcpy(buf + 8, rec->head.b, ST_HASH_BYTES);
    t_put64(buf + 24, rec->length);
    t_put64(buf + 32, rec->version);
    t_put64(buf + 40, rec->ttl_ms);
    t_put64(buf + 48, now_unix - (now_store - rec->created_ms));
    t_put64(buf + 56, now_unix - (now_store - rec->updated_ms));
    st = st_ssd_put(t->ssd, &k, buf, sizeof(buf), durable ? ST_SSD_DURABLE : 0, NULL, NULL);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a session record", sizeof(buf));
}

void cd_tier_session_delete(cd_tier_t *t, uint64_t wire_id, const st_hash_t *id)
{
    st_ssd_key_t k = t_key(wire_id, id, ST_SSD_SESSION, 0);

    if (t->ssd != NULL) {
        (void)st_ssd_delete(t->ssd, &k, 0, NULL, NULL);
    }
}

void cd_tier_session_expired(void *ctx, uint32_t ns_id, const st_hash_t *id)
{
    cd_tier_t *t = ctx;
    uint64_t wire;
    st_ssd_key_t k;

    if (t->ssd == NULL || ns_id > CD_MAX_NS || (wire = atomic_load(&t->wire[ns_id])) == 0) {
        return;
    }
    k = t_key(wire, id, ST_SSD_SESSION, 0);
    /* Never waits under the namespace lock; a full queue leaves it to recovery. */
    (void)st_ssd_delete(t->ssd, &k, ST_SSD_NOWAIT, NULL, NULL);
}

void cd_tier_forget(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key)
{
    st_ssd_key_t k;

    if (t->ssd == NULL || key->kind >= CD_KIND_COUNT || t_ssd_kind[key->kind] == 0) {
        return;
    }
    k = t_key(wire_id, &key->hash, t_ssd_kind[key->kind], key->layer);
    t2_remove(t, wire_id, &key->hash, (uint16_t)(key->kind << 8 | key->layer), 1, 0);
    (void)st_ssd_delete(t->ssd, &k, 0, NULL, NULL);
}

/* -------------------------------------------------- spill, promote -- */

void cd_tier_evicted(void *ctx, uint32_t ns_id, const cd_key_t *key, const st_hash_t *parent,
                     const void *data, uint64_t len, uint64_t tiered, uint32_t row_bytes)
{
    cd_tier_t *t = ctx;
    uint64_t wire;
    uint16_t tag = (uint16_t)(key->kind << 8 | key->layer);
    t_spill_t *sp;
    st_ssd_key_t k;
    st_status_t st;

    if (t->ssd == NULL || ns_id > CD_MAX_NS || (wire = atomic_load(&t->wire[ns_id])) == 0) {
        return;
    }
    if (key->kind == CD_KIND_KDA) {
        /* Written through at put: the durable copy is there to promote. */
        (void)t2_add(t, wire, &key->hash, tag, 0);
        return;
    }
    if (!t->spill || (key->kind != CD_KIND_KV && key->kind != CD_KIND_IDX)) {
        return;
    }
    k = t_key(wire, &key->hash, t_ssd_kind[key->kind], key->layer);
    if (tiered != 0 && (tiered == t_token(t) || st_ssd_contains(t->ssd, &k))) {
        /* Promoted from the tier, whose copy stayed, or written ahead by
         * the write-behind (committed objects never change): evicting it
         * writes nothing. The token says whether anything was removed from
         * the tier since the copy was seen there (the spill budget may have
         * aged it out); if so, the copy is looked for. An object the tier
         * never had a copy of is not. */
        if (t2_add(t, wire, &key->hash, tag, 0) == 0) {
            atomic_fetch_add(&t->spill_clean, 1);
        }
        t_wb_kick(t, ns_id, len, 1);
        return;
    }
    t_wb_kick(t, ns_id, len, 0); /* the write-behind fell behind, or has not started */
    if (cd_store_tenant_ssd_check(t->d->store, ns_id, T_PREFIX + len, NULL) != ST_OK) {
        atomic_fetch_add(&t->spill_dropped, 1); /* the tenant is at its ssd quota */
        return;
    }
    if (atomic_load(&t->inflight) + len > T_INFLIGHT_MAX ||
        (sp = malloc(sizeof(*sp) + T_PREFIX + len)) == NULL) {
        atomic_fetch_add(&t->spill_dropped, 1);
        return;
    }
    sp->t = t;
    sp->len = T_PREFIX + len;
    sp->ns_id = ns_id;
    sp->kind = key->kind;
    t_prefix((uint8_t *)(sp + 1), parent, row_bytes);
    memcpy((uint8_t *)(sp + 1) + T_PREFIX, data, len);
    if (t2_add(t, wire, &key->hash, tag, 1) != 0) {
        free(sp);
        atomic_fetch_add(&t->spill_dropped, 1);
        return;
    }
    atomic_fetch_add(&t->inflight, sp->len);
    st = st_ssd_spill(t->ssd, &k, sp + 1, sp->len, ST_SSD_NOWAIT, t_spill_done, sp);
    if (st != ST_OK) {
        t2_remove(t, wire, &key->hash, tag, 1, 1);
        atomic_fetch_sub(&t->inflight, sp->len);
        free(sp);
        atomic_fetch_add(&t->spill_dropped, 1);
        return;
    }
    atomic_fetch_add(&t->spill_queued, 1);
}

/* A promote in progress: the object's bytes go straight into a begun store put. */
typedef struct t_fill {
    cd_tier_t *t;
    const cd_ns_entry_t *e;
    const cd_key_t *key;
    uint8_t prefix[T_PREFIX];
    cd_put_t put;
    int begun;
    st_status_t st; /* cd_store_put_begin's */
    cd_err_t err;
} t_fill_t;

/*
 * st_ssd_promote_split's allocator: the prefix, read already but verified
 * only with the rest, names the parent; the object's bytes go into the
 * extent of a begun put. A corrupt prefix costs no more than an aborted put.
 */
static void *t_fill_alloc(void *arg, size_t length, const st_ssd_meta_t *meta)
{
    t_fill_t *f = arg;
    st_hash_t parent;
    int has_parent = t_get32(f->prefix + 4) & 1u;

    (void)meta;
    memcpy(parent.b, f->prefix + 8, ST_HASH_BYTES);
    f->st = cd_store_put_begin(f->t->d->store, f->e->local_id, f->key, has_parent ? &parent : NULL,
                               length, &f->put, &f->err);
    if (f->st != ST_OK) {
        return NULL;
    }
    f->begun = 1;
    return f->put.pt_data;
}

/*
 * Reads one object back and puts it into DRAM, read straight from the SSD
 * into the new object's extent: the tier verifies the value's checksum
 * (prefix and bytes) and computes the bytes' XXH3-64 for the store in the
 * same pass; the object becomes visible only after that check. Returns 1
 * when it is in DRAM.
 */
static int t_promote_one(cd_tier_t *t, const cd_ns_entry_t *e, const st_hash_t *h, uint16_t tag)
{
    cd_key_t key = {*h, (uint32_t)(tag >> 8), (uint32_t)(tag & 0xff)};
    t_fill_t f;
    st_ssd_key_t k;
    st_ssd_meta_t meta;
    uint64_t sum = 0, token;
    cd_err_t err = {""};
    st_status_t st;

    if (key.kind >= CD_KIND_COUNT || t_ssd_kind[key.kind] == 0) {
        return 0;
    }
    memset(&f, 0, sizeof(f));
    f.t = t;
    f.e = e;
    f.key = &key;
    k = t_key(e->wire_id, h, t_ssd_kind[key.kind], key.layer);
    /* The tier keeps its copy (cd_tier_evicted finds it, and writes nothing
     * when the object is evicted again); its spill LRU ages it out. The
     * token is taken before the read: a removal after it changes it. */
    token = t_token(t);
    st = st_ssd_get_split(t->ssd, &k, f.prefix, T_PREFIX, t_fill_alloc, &f, &sum, &meta);
    if (st == ST_ERR_NOMEM && f.st == ST_ERR_EXISTS) {
        return 1; /* in DRAM already: nothing read, the tier's copy left as it is */
    }
    if (st == ST_ERR_NOMEM) {
        /* Did not fit in DRAM (or no memory to verify): nothing was read or
         * dropped, so the object is still in the tier as it was. */
        st_debug("promote did not fit ns=%u: %s", e->local_id,
                 f.st != ST_OK ? f.err.msg : "no memory");
        if (f.begun) {
            cd_store_put_abort(t->d->store, &f.put);
        }
        (void)t2_add(t, e->wire_id, h, tag, 0);
        return 0;
    }
    if (st != ST_OK || !f.begun || t_get32(f.prefix) != T_OBJ_MAGIC) {
        if (st == ST_OK) {
            st_warn_ratelimited(
                "ssd object without the daemon's prefix or bytes dropped ns=%llu kind=%s",
                (unsigned long long)e->wire_id, st_ssd_kind_name(k.kind));
        }
        if (f.begun) {
            cd_store_put_abort(t->d->store, &f.put); /* unverified bytes: never visible */
        }
        atomic_fetch_add(&t->promote_misses, 1);
        return 0;
    }
    f.put.pt_tiered = token; /* the tier kept its copy: see cd_tier_evicted */
    /* Its row sums, computed again from the bytes just verified. */
    f.put.pt_row_bytes = t_get32(f.prefix + 4) >> T_ROWB_SHIFT;
    st = cd_store_put_commit(t->d->store, &f.put, sum, &err);
    if (st == ST_OK) {
        atomic_fetch_add(&t->promoted, 1);
        if (e->local_id <= CD_MAX_NS) {
            atomic_fetch_add(&t->flow_promoted[e->local_id][key.kind], 1);
        }
        return 1;
    }
    /* Not in DRAM after all (no room left, or other bytes under the key):
     * the tier's copy is still there. */
    st_debug("promote did not fit ns=%u: %s", e->local_id, err.msg);
    cd_store_put_abort(t->d->store, &f.put);
    (void)t2_add(t, e->wire_id, h, tag, 0);
    return 0;
}

int cd_tier_promote(cd_tier_t *t, const cd_ns_entry_t *e, const st_hash_t *hash)
{
    uint16_t tags[3 * CD_LAYERS_MAX];
    uint32_t n = 0, pending;
    t2_ent_t *ent;
    int done = 0;

    if (t == NULL || t->ssd == NULL) {
        return 0;
    }
    pthread_mutex_lock(&t->lock);
    ent = t2_find(t, e->wire_id, hash);
    if (ent != NULL && ent->promoting) {
        /* Another call is promoting this block: wait, then ask again. */
        while ((ent = t2_find(t, e->wire_id, hash)) != NULL && ent->promoting) {
            pthread_cond_wait(&t->cond, &t->lock);
        }
        pthread_mutex_unlock(&t->lock);
        return 1;
    }
    if (ent == NULL || ent->n == 0) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    /* Take the tags: evictions meanwhile add new ones, which stay. */
    n = ent->n < 3 * CD_LAYERS_MAX ? ent->n : 3 * CD_LAYERS_MAX;
    memcpy(tags, ent->tags + (ent->n - n), sizeof(tags[0]) * n);
    ent->n -= n;
    t->nobjects -= n;
    pending = ent->pending;
    ent->promoting = 1;
    pthread_mutex_unlock(&t->lock);

    if (pending > 0) {
        (void)st_ssd_flush(t->ssd, 0); /* its spill may still be queued */
    }
    for (uint32_t i = 0; i < n; i++) {
        done += t_promote_one(t, e, hash, tags[i]);
    }

    pthread_mutex_lock(&t->lock);
    ent = t2_find(t, e->wire_id, hash);
    if (ent != NULL) {
        ent->promoting = 0;
        t2_maybe_free(t, ent);
    }
    atomic_fetch_add(&t->gen, 1);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return done;
}

/* ---------------------------------------------------------- recovery -- */

typedef struct t_rec_ctx {
    cd_tier_t *t;
    st_ssd_key_t *sess; /* SESSION-kind keys: namespace and session records */
    size_t n_sess, cap_sess;
    uint64_t objects;
    int nomem;
    /* Payload bytes of KV, IDX and KDA objects per wire namespace, charged to
     * the tenants once the namespaces are back (the ssd quota). */
    uint64_t wires[CD_MAX_NS], bytes[CD_MAX_NS];
    size_t n_wires;
} t_rec_ctx_t;

/* Adds an object's bytes to its wire namespace's sum (keys come grouped by
 * namespace: the last one is the usual match). */
static void t_rec_bytes(t_rec_ctx_t *r, uint64_t wire, uint64_t len)
{
    size_t i = r->n_wires;

    if (i > 0 && r->wires[i - 1] == wire) {
        r->bytes[i - 1] += len;
        return;
    }
    for (i = 0; i < r->n_wires && r->wires[i] != wire; i++) {
    }
    if (i == r->n_wires) {
        if (i == CD_MAX_NS) {
            return; /* more namespaces than a daemon has: not one of ours */
        }
        r->wires[i] = wire;
        r->bytes[i] = 0;
        r->n_wires++;
    }
    r->bytes[i] += len;
}

static int t_rec_visit(void *arg, const st_ssd_key_t *key, const st_ssd_meta_t *meta)
{
    t_rec_ctx_t *r = arg;

    if (key->kind == ST_SSD_SESSION) {
        if (r->n_sess == r->cap_sess) {
            size_t cap = r->cap_sess ? r->cap_sess * 2 : 256;
            st_ssd_key_t *nk = realloc(r->sess, sizeof(*nk) * cap);

            if (nk == NULL) {
                r->nomem = 1;
                return 1;
            }
            r->sess = nk;
            r->cap_sess = cap;
        }
        r->sess[r->n_sess++] = *key;
        return 0;
    }
    if (key->kind == ST_SSD_KV || key->kind == ST_SSD_IDX || key->kind == ST_SSD_KDA) {
        t2_ent_t *e;

        /* Recovery runs alone: the lock is taken once per object anyway, cheaply. */
        pthread_mutex_lock(&r->t->lock);
        e = t2_get(r->t, key->ns, &key->id);
        if (e == NULL || t2_add_tag(r->t, e, t_tag_of(key)) != 0) {
            pthread_mutex_unlock(&r->t->lock);
            r->nomem = 1;
            return 1;
        }
        pthread_mutex_unlock(&r->t->lock);
        r->objects++;
        t_rec_bytes(r, key->ns, meta->length);
    }
    return 0;
}

/* Re-creates the namespace of a namespace record. */
static void t_rec_ns(cd_tier_t *t, const st_ssd_key_t *k, uint32_t *n_ns)
{
    uint8_t buf[16 + 2 * CD_NAME_MAX];
    char tenant[CD_NAME_MAX + 1], model[CD_NAME_MAX + 1];
    size_t len = 0, tl, ml;
    cd_ns_entry_t *e;
    cd_err_t err = {""};
    st_status_t st;

    st = st_ssd_get_buf(t->ssd, k, buf, sizeof(buf), &len, NULL);
    if (st != ST_OK || len < 16 || t_get32(buf) != T_NS_MAGIC) {
        st_warn("ssd recovery: unreadable namespace record ns=%llu: %s", (unsigned long long)k->ns,
                st == ST_OK ? "bad format" : st_strerror(st));
        return;
    }
    tl = t_get32(buf + 8);
    ml = t_get32(buf + 12);
    if (tl == 0 || ml == 0 || tl > CD_NAME_MAX || ml > CD_NAME_MAX || 16 + tl + ml != len) {
        st_warn("ssd recovery: bad namespace record ns=%llu", (unsigned long long)k->ns);
        return;
    }
    memcpy(tenant, buf + 16, tl);
    tenant[tl] = '\0';
    memcpy(model, buf + 16 + tl, ml);
    model[ml] = '\0';
    if (cd_wire_ns_id(tenant, model) != k->ns) {
        st_warn("ssd recovery: namespace record ns=%llu names tenant=%s model=%s of another id",
                (unsigned long long)k->ns, tenant, model);
        return;
    }
    if (!cd_daemon_tenant_known(t->d, tenant)) {
        /* Not re-created, so it takes no room from the tenants of the file. */
        st_info("ssd recovery: namespace of a tenant the tenants_file no longer names is not "
                "served tenant=%s model=%s",
                tenant, model);
        return;
    }
    st = cd_daemon_ns_open(t->d, tenant, model, t_get32(buf + 4), &e, &err);
    if (st != ST_OK) {
        st_warn("ssd recovery: cannot re-create namespace tenant=%s model=%s: %s", tenant, model,
                err.msg);
        return;
    }
    (*n_ns)++;
}

/* Puts a session record back; deletes it when it expired meanwhile. */
static void t_rec_session(cd_tier_t *t, const st_ssd_key_t *k)
{
    uint8_t buf[T_SESS_BYTES];
    size_t len = 0;
    cd_ns_entry_t *e = cd_daemon_ns_find(t->d, k->ns);
    cd_session_t rec;
    cd_err_t err = {""};
    uint64_t now_unix = t_unix_ms(), now_store = cd_store_now(t->d->store), created, updated;
    st_status_t st;

    if (e == NULL) {
        st_warn("ssd recovery: session of an unknown namespace ns=%llu skipped",
                (unsigned long long)k->ns);
        return;
    }
    st = st_ssd_get_buf(t->ssd, k, buf, sizeof(buf), &len, NULL);
    if (st != ST_OK || len != T_SESS_BYTES || t_get32(buf) != T_SESS_MAGIC) {
        st_warn("ssd recovery: unreadable session record ns=%llu: %s", (unsigned long long)k->ns,
                st == ST_OK ? "bad format" : st_strerror(st));
        return;
    }
    memset(&rec, 0, sizeof(rec));
    rec.id = k->id;
    memcpy(rec.head.b, buf + 8, ST_HASH_BYTES);
    rec.length = t_get64(buf + 24);
    rec.version = t_get64(buf + 32);
    rec.ttl_ms = t_get64(buf + 40);
    created = t_get64(buf + 48);
    updated = t_get64(buf + 56);
    if (updated + rec.ttl_ms <= now_unix) {
        (void)st_ssd_delete(t->ssd, k, 0, NULL, NULL);
        return;
    }
    /* Wall-clock ages back onto the store's clock (clamped at its zero). */
    rec.created_ms = now_unix - created < now_store ? now_store - (now_unix - created) : 0;
    rec.updated_ms = now_unix - updated < now_store ? now_store - (now_unix - updated) : 0;
    if (updated > now_unix) {
        rec.updated_ms = now_store;
    }
    if (created > now_unix) {
        rec.created_ms = now_store;
    }
    st = cd_store_session_restore(t->d->store, e->local_id, &rec, &err);
    if (st != ST_OK) {
        st_warn("ssd recovery: session not restored ns=%llu: %s", (unsigned long long)k->ns,
                err.msg);
        return;
    }
    t->recovered_sessions++;
}

st_status_t cd_tier_recover(cd_tier_t *t)
{
    t_rec_ctx_t r;
    uint64_t t0 = t_mono_us(), count = 0, t_iter;
    uint32_t n_ns = 0;
    st_status_t st;

    memset(&r, 0, sizeof(r));
    r.t = t;
    t->recovering = 1;
    st = st_ssd_iterate(t->ssd, t_rec_visit, &r, &count);
    t_iter = t_mono_us();
    if (st == ST_OK && r.nomem) {
        st = ST_ERR_NOMEM;
    }
    if (st != ST_OK) {
        st_error("ssd recovery failed data_dir=%s: %s", t->d->cfg.data_dir, st_strerror(st));
        free(r.sess);
        t->recovering = 0;
        return st;
    }
    for (size_t i = 0; i < r.n_sess; i++) {
        if (r.sess[i].layer == T_NS_LAYER) {
            t_rec_ns(t, &r.sess[i], &n_ns);
        }
    }
    for (size_t i = 0; i < r.n_wires; i++) {
        uint32_t local = t_local_of(t, r.wires[i]);

        if (local != 0) {
            cd_store_tenant_ssd_add(t->d->store, local, (int64_t)r.bytes[i]);
        }
    }
    for (size_t i = 0; i < r.n_sess; i++) {
        if (r.sess[i].layer != T_NS_LAYER) {
            t_rec_session(t, &r.sess[i]);
        }
    }
    free(r.sess);
    t->recovering = 0;
    t->recovered_objects = r.objects;
    t->recovered_ms = (t_mono_us() - t0) / 1000;
    st_info("ssd recovery done data_dir=%s namespaces=%u sessions=%llu blocks=%zu objects=%llu "
            "iterate_ms=%llu total_ms=%llu",
            t->d->cfg.data_dir, n_ns, (unsigned long long)t->recovered_sessions, t->nblocks,
            (unsigned long long)r.objects, (unsigned long long)((t_iter - t0) / 1000),
            (unsigned long long)t->recovered_ms);
    return ST_OK;
}

uint64_t cd_tier_generation(cd_tier_t *t)
{
    return t != NULL ? atomic_load(&t->gen) : 0;
}

st_status_t cd_tier_flush(cd_tier_t *t)
{
    return t->ssd != NULL ? st_ssd_flush(t->ssd, 0) : ST_ERR_UNAVAILABLE;
}

void cd_tier_stats(cd_tier_t *t, st_ssd_stats_t *ssd, cd_tier_counters_t *c)
{
    if (ssd != NULL) {
        memset(ssd, 0, sizeof(*ssd));
        pthread_mutex_lock(&t->close_lock);
        if (t->ssd != NULL) {
            st_ssd_stats(t->ssd, ssd);
        }
        pthread_mutex_unlock(&t->close_lock);
    }
    if (c != NULL) {
        pthread_mutex_lock(&t->lock);
        c->t2_blocks = t->nblocks;
        c->t2_objects = t->nobjects;
        pthread_mutex_unlock(&t->lock);
        c->spill_queued = atomic_load(&t->spill_queued);
        c->spill_dropped = atomic_load(&t->spill_dropped);
        c->spill_clean = atomic_load(&t->spill_clean);
        c->writeback_objects = atomic_load(&t->wb_objects);
        c->writeback_bytes = atomic_load(&t->wb_bytes);
        c->writeback_failed = atomic_load(&t->wb_failed);
        c->promoted = atomic_load(&t->promoted);
        c->promote_misses = atomic_load(&t->promote_misses);
        c->recovered_ms = t->recovered_ms;
        c->recovered_sessions = t->recovered_sessions;
        c->recovered_objects = t->recovered_objects;
    }
}

void cd_tier_flows(cd_tier_t *t, uint32_t ns_id, uint64_t spills[3], uint64_t promoted[3])
{
    for (int k = 0; k < 3; k++) {
        spills[k] = ns_id <= CD_MAX_NS ? atomic_load(&t->flow_spills[ns_id][k]) : 0;
        promoted[k] = ns_id <= CD_MAX_NS ? atomic_load(&t->flow_promoted[ns_id][k]) : 0;
    }
}
