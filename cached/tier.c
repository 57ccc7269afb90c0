/*
 * tier.c - stratad and the SSD tier: the life cycle, write-through of KDA
 * objects, session and namespace records, spill on eviction, promote on a
 * miss. The T2 index is in tier_index.c, the write-behind in tier_wb.c,
 * recovery in tier_recover.c, the values' formats in tier_format.c.
 * See tier.h and docs/tiers.md ("In stratad").
 */
#include "tier_internal.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"

#define T_INFLIGHT_MAX (256ull << 20)

/* A spill in flight: its value follows. */
typedef struct t_spill {
    cd_tier_t *t;
    uint64_t len;
    uint32_t ns_id, kind; /* local namespace, cd_kind_t: for the flow counters */
} t_spill_t;

const uint8_t cd_tier_ssd_kind[CD_KIND_COUNT] = {SSD_KV, SSD_IDX, SSD_KDA, 0, 0};

/* ------------------------------------------------------------ helpers -- */

ssd_key_t cd_tier_key(uint64_t wire, const st_hash_t *h, unsigned kind, unsigned layer)
{
    ssd_key_t k;

    memset(&k, 0, sizeof(k));
    k.ns = wire;
    k.id = *h;
    k.kind = (uint8_t)kind;
    k.layer = (uint16_t)layer;
    return k;
}

uint64_t cd_tier_token(cd_tier_t *t)
{
    return ssd_removals(t->ssd) + 1;
}

uint32_t cd_tier_local_of(cd_tier_t *t, uint64_t wire)
{
    for (uint32_t i = 1; i <= CD_TIER_NS_MAX; i++) {
        if (atomic_load_explicit(&t->wire[i], memory_order_relaxed) == wire) {
            return i;
        }
    }
    return 0;
}

/* Describes a failed write for a person, with the tier's numbers. */
static st_status_t t_write_err(cd_tier_t *t, cd_err_t *err, st_status_t st, const char *what,
                               uint64_t len)
{
    ssd_stats_t s;

    if (err == NULL) {
        return st;
    }
    ssd_stats(t->ssd, &s);
    if (st == ST_ERR_EXHAUSTED) {
        snprintf(err->msg, sizeof(err->msg),
                 "SSD tier full on node %s: %s of %llu bytes refused; ssd_map_size=%llu, "
                 "%llu bytes of the map in use (raise ssd_map_size or free disk space); reads "
                 "keep working",
                 t->p.node_id, what, (unsigned long long)len, (unsigned long long)s.map_size,
                 (unsigned long long)s.map_used);
    } else {
        snprintf(err->msg, sizeof(err->msg), "SSD tier on node %s: %s of %llu bytes failed: %s",
                 t->p.node_id, what, (unsigned long long)len, st_strerror(st));
    }
    return st;
}

/* -------------------------------------------------- tier callbacks -- */

/* Writer thread: a queued spill finished. */
static void t_spill_done(void *arg, const ssd_key_t *key, st_status_t status)
{
    t_spill_t *sp = arg;
    cd_tier_t *t = sp->t;

    cd_tier_index_remove(t, key->ns, &key->id, cd_tier_tag_of(key), status != ST_OK, 1);
    if (status == ST_OK && sp->ns_id <= CD_TIER_NS_MAX && sp->kind < 3) {
        atomic_fetch_add(&t->flow_spills[sp->ns_id][sp->kind], 1);
    }
    atomic_fetch_sub(&t->inflight, sp->len);
    free(sp);
}

/* Writer thread, after each commit: the bytes of KV, IDX and KDA objects the
 * tier holds, per tenant (the ssd quota; session and namespace records are
 * counted by the sessions and namespaces quotas instead). */
static void t_usage(void *arg, const ssd_key_t *key, int64_t delta)
{
    cd_tier_t *t = arg;
    uint32_t local;

    if (key->kind != SSD_KV && key->kind != SSD_IDX && key->kind != SSD_KDA) {
        return;
    }
    local = cd_tier_local_of(t, key->ns);
    if (local != 0 && t->store != NULL) { /* a namespace is bound only once there is a store */
        cd_store_tenant_ssd_add(t->store, local, delta);
    }
}

/* Writer thread: the spill budget evicted an object. */
static void t_budget_evicted(void *arg, const ssd_key_t *key, uint64_t length)
{
    (void)length;
    cd_tier_index_remove(arg, key->ns, &key->id, cd_tier_tag_of(key), 1, 0);
}

/* ------------------------------------------------------- lifecycle -- */

st_status_t cd_tier_open(const cd_tier_params_t *params, cd_tier_t **t_p)
{
    ssd_params_t p;
    cd_tier_t *t = calloc(1, sizeof(*t));
    st_status_t st;

    if (t == NULL) {
        return ST_ERR_NOMEM;
    }
    t->p = *params;
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->close_lock, NULL);
    pthread_cond_init(&t->cond, NULL);
    cd_tier_wb_init(t);
    cd_htab_init(&t->index, NULL);
    memset(&p, 0, sizeof(p));
    p.dir = params->dir;
    p.map_size = params->map_size;
    p.spill_budget = params->spill_budget;
    p.sync = params->sync_none ? SSD_SYNC_NONE : SSD_SYNC_DURABLE;
    p.on_evict = t_budget_evicted;
    p.evict_arg = t;
    p.on_usage = t_usage;
    p.usage_arg = t;
    st = ssd_open(&p, &t->ssd);
    if (st != ST_OK) {
        lg_error("cannot open the SSD tier data_dir=%s ssd_map_size=%llu: %s", params->dir,
                 (unsigned long long)params->map_size, st_strerror(st));
        cd_tier_free(t);
        return st;
    }
    t->wb_ahead = params->spill ? params->writeback : 0;
    st = cd_tier_wb_start(t);
    if (st != ST_OK) {
        cd_tier_free(t);
        return st;
    }
    *t_p = t;
    return ST_OK;
}

void cd_tier_shutdown(cd_tier_t *t)
{
    ssd_t *ssd;

    if (t == NULL || t->ssd == NULL) {
        return;
    }
    cd_tier_wb_stop(t);
    ssd = t->ssd;
    pthread_mutex_lock(&t->close_lock);
    ssd_close(ssd); /* runs the done callbacks of queued spills (they take only lock) */
    t->ssd = NULL;
    pthread_mutex_unlock(&t->close_lock);
}

void cd_tier_free(cd_tier_t *t)
{
    if (t == NULL) {
        return;
    }
    cd_tier_shutdown(t);
    cd_tier_index_destroy(t);
    cd_tier_wb_destroy(t);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->close_lock);
    pthread_cond_destroy(&t->cond);
    free(t);
}

void cd_tier_ns_bind(cd_tier_t *t, uint32_t local_id, uint64_t wire_id)
{
    if (t != NULL && local_id <= CD_TIER_NS_MAX) {
        atomic_store(&t->wire[local_id], wire_id);
    }
}

/* ------------------------------------------------------------ writes -- */

st_status_t cd_tier_ns_put(cd_tier_t *t, uint64_t wire_id, const char *tenant, const char *model,
                           uint32_t block_tokens, cd_err_t *err)
{
    uint8_t buf[CD_TIER_NS_BYTES];
    static const st_hash_t zero = {{0}};
    ssd_key_t k = cd_tier_key(wire_id, &zero, SSD_SESSION, CD_TIER_NS_LAYER);
    size_t len;
    st_status_t st;

    if (t == NULL || t->recovering) {
        return ST_OK;
    }
    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    len = cd_tier_ns_encode(buf, tenant, model, block_tokens);
    if (len == 0) {
        return ST_ERR_INVALID;
    }
    st = ssd_put(t->ssd, &k, buf, len, SSD_DURABLE, NULL, NULL);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "the namespace record", len);
}

st_status_t cd_tier_put_object(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key,
                               const st_hash_t *parent, const void *data, uint64_t len, int durable,
                               cd_err_t *err)
{
    ssd_key_t k;
    uint8_t *buf;
    st_status_t st;

    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    if (key->kind >= CD_KIND_COUNT || cd_tier_ssd_kind[key->kind] == 0) {
        return ST_ERR_INVALID;
    }
    k = cd_tier_key(wire_id, &key->hash, cd_tier_ssd_kind[key->kind], key->layer);
    st = cd_store_tenant_ssd_check(t->store, cd_tier_local_of(t, wire_id), CD_TIER_PREFIX + len,
                                   err);
    if (st == ST_ERR_EXHAUSTED) {
        return st; /* the tenant's ssd quota: the message says so */
    }
    if (key->kind == CD_KIND_KDA && !durable) {
        uint8_t head[CD_TIER_PREFIX];

        /* Queued: the prefix and the bytes copied into the queue once. */
        cd_tier_prefix_put(head, parent, 0);
        st = ssd_put_parts(t->ssd, &k, head, sizeof(head), data, len, 0);
        return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a KDA put", len);
    }
    buf = malloc(CD_TIER_PREFIX + len);
    if (buf == NULL) {
        return ST_ERR_NOMEM;
    }
    cd_tier_prefix_put(buf, parent, 0);
    memcpy(buf + CD_TIER_PREFIX, data, len);
    if (key->kind == CD_KIND_KDA) {
        st = ssd_put(t->ssd, &k, buf, CD_TIER_PREFIX + len, durable ? SSD_DURABLE : 0, NULL, NULL);
    } else {
        st = ssd_spill(t->ssd, &k, buf, CD_TIER_PREFIX + len, SSD_NOWAIT, NULL, NULL);
    }
    free(buf);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a durable KDA put", len);
}

st_status_t cd_tier_session_put(cd_tier_t *t, uint64_t wire_id, const cd_session_t *rec,
                                int durable, cd_err_t *err)
{
    uint8_t buf[CD_TIER_SESS_BYTES];
    ssd_key_t k = cd_tier_key(wire_id, &rec->id, SSD_SESSION, 0);
    uint64_t now_store, now_unix = cd_tier_unix_ms();
    st_status_t st;

    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    now_store = cd_store_now(t->store);
    cd_tier_session_encode(buf, rec, now_unix, now_store);
    st = ssd_put(t->ssd, &k, buf, sizeof(buf), durable ? SSD_DURABLE : 0, NULL, NULL);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a session record", sizeof(buf));
}

st_status_t cd_tier_place_put(cd_tier_t *t, uint64_t wire_id, const st_hash_t *hash,
                              const st_hash_t *parent, const st_hash_t *placement, int durable,
                              cd_err_t *err)
{
    uint8_t buf[CD_TIER_PLACE_BYTES];
    ssd_key_t k = cd_tier_key(wire_id, hash, SSD_SESSION, CD_TIER_PLACE_LAYER);
    st_status_t st;

    if (t == NULL || t->recovering) {
        return ST_OK;
    }
    if (t->ssd == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    cd_tier_place_encode(buf, parent, placement);
    st = ssd_put(t->ssd, &k, buf, sizeof(buf), durable ? SSD_DURABLE : 0, NULL, NULL);
    return st == ST_OK ? ST_OK : t_write_err(t, err, st, "a KDA placement record", sizeof(buf));
}

void cd_tier_session_delete(cd_tier_t *t, uint64_t wire_id, const st_hash_t *id)
{
    ssd_key_t k = cd_tier_key(wire_id, id, SSD_SESSION, 0);

    if (t->ssd != NULL) {
        (void)ssd_delete(t->ssd, &k, 0, NULL, NULL);
    }
}

void cd_tier_session_expired(void *ctx, uint32_t ns_id, const st_hash_t *id)
{
    cd_tier_t *t = ctx;
    uint64_t wire;
    ssd_key_t k;

    if (t->ssd == NULL || ns_id > CD_TIER_NS_MAX || (wire = atomic_load(&t->wire[ns_id])) == 0) {
        return;
    }
    k = cd_tier_key(wire, id, SSD_SESSION, 0);
    /* Never waits under the namespace lock; a full queue leaves it to recovery. */
    (void)ssd_delete(t->ssd, &k, SSD_NOWAIT, NULL, NULL);
}

void cd_tier_forget(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key)
{
    ssd_key_t k;

    if (t->ssd == NULL || key->kind >= CD_KIND_COUNT || cd_tier_ssd_kind[key->kind] == 0) {
        return;
    }
    k = cd_tier_key(wire_id, &key->hash, cd_tier_ssd_kind[key->kind], key->layer);
    cd_tier_index_remove(t, wire_id, &key->hash, (uint16_t)(key->kind << 8 | key->layer), 1, 0);
    (void)ssd_delete(t->ssd, &k, 0, NULL, NULL);
}

/* -------------------------------------------------- spill, promote -- */

/*
 * Names in the index a copy the tier was seen to hold (seen: the token when
 * it was seen there), if it still holds it. The token says whether anything
 * was removed from the tier since (the spill budget may have aged the copy
 * out); if so, the copy is looked for. Both under t->lock: the budget's
 * removal reports itself (t_budget_evicted) after its commit and takes the
 * lock, so it either comes after the entry is added, and removes it, or the
 * copy is already gone when it is looked for. Checked and added without the
 * lock, a removal in between left an entry naming a copy that was gone (a
 * promote miss). Returns 0 when added, 1 when the copy is gone, -1 when the
 * index has no room.
 */
static int t_index_add_kept(cd_tier_t *t, uint64_t wire, const st_hash_t *h, uint16_t tag,
                            uint64_t seen, const ssd_key_t *k)
{
    int rc = 1;

    pthread_mutex_lock(&t->lock);
    if (seen == cd_tier_token(t) || ssd_contains(t->ssd, k)) {
        rc = cd_tier_index_add_locked(t, wire, h, tag, 0) == 0 ? 0 : -1;
    }
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void cd_tier_evicted(void *ctx, uint32_t ns_id, const cd_key_t *key, const st_hash_t *parent,
                     const void *data, uint64_t len, uint64_t tiered, uint32_t row_bytes)
{
    cd_tier_t *t = ctx;
    uint64_t wire;
    uint16_t tag = (uint16_t)(key->kind << 8 | key->layer);
    t_spill_t *sp;
    ssd_key_t k;
    st_status_t st;
    int rc;

    if (t->ssd == NULL || ns_id > CD_TIER_NS_MAX || (wire = atomic_load(&t->wire[ns_id])) == 0) {
        return;
    }
    if (key->kind == CD_KIND_KDA) {
        /* Written through at put: the durable copy is there to promote. */
        (void)cd_tier_index_add(t, wire, &key->hash, tag, 0);
        return;
    }
    if (!t->p.spill || (key->kind != CD_KIND_KV && key->kind != CD_KIND_IDX)) {
        return;
    }
    k = cd_tier_key(wire, &key->hash, cd_tier_ssd_kind[key->kind], key->layer);
    /* Promoted from the tier, whose copy stayed, or written ahead by the
     * write-behind (committed objects never change): evicting it writes
     * nothing. An object the tier never had a copy of is not looked for. */
    if (tiered != 0 && (rc = t_index_add_kept(t, wire, &key->hash, tag, tiered, &k)) != 1) {
        if (rc == 0) {
            atomic_fetch_add(&t->spill_clean, 1);
        }
        cd_tier_wb_kick(t, ns_id, len, 1);
        return;
    }
    cd_tier_wb_kick(t, ns_id, len, 0); /* the write-behind fell behind, or has not started */
    if (cd_store_tenant_ssd_check(t->store, ns_id, CD_TIER_PREFIX + len, NULL) != ST_OK) {
        atomic_fetch_add(&t->spill_dropped, 1); /* the tenant is at its ssd quota */
        return;
    }
    if (atomic_load(&t->inflight) + len > T_INFLIGHT_MAX ||
        (sp = malloc(sizeof(*sp) + CD_TIER_PREFIX + len)) == NULL) {
        atomic_fetch_add(&t->spill_dropped, 1);
        return;
    }
    sp->t = t;
    sp->len = CD_TIER_PREFIX + len;
    sp->ns_id = ns_id;
    sp->kind = key->kind;
    cd_tier_prefix_put((uint8_t *)(sp + 1), parent, row_bytes);
    memcpy((uint8_t *)(sp + 1) + CD_TIER_PREFIX, data, len);
    if (cd_tier_index_add(t, wire, &key->hash, tag, 1) != 0) {
        free(sp);
        atomic_fetch_add(&t->spill_dropped, 1);
        return;
    }
    atomic_fetch_add(&t->inflight, sp->len);
    st = ssd_spill(t->ssd, &k, sp + 1, sp->len, SSD_NOWAIT, t_spill_done, sp);
    if (st != ST_OK) {
        cd_tier_index_remove(t, wire, &key->hash, tag, 1, 1);
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
    uint32_t ns_id;
    const cd_key_t *key;
    uint8_t prefix[CD_TIER_PREFIX];
    cd_put_t put;
    int begun;
    st_status_t st; /* cd_store_put_begin's */
    cd_err_t err;
} t_fill_t;

/*
 * ssd_promote_split's allocator: the prefix, read already but verified
 * only with the rest, names the parent; the object's bytes go into the
 * extent of a begun put. A corrupt prefix costs no more than an aborted put.
 */
static void *t_fill_alloc(void *arg, size_t length, const ssd_meta_t *meta)
{
    t_fill_t *f = arg;
    st_hash_t parent;
    int has_parent = 0;

    (void)meta;
    (void)cd_tier_prefix_get(f->prefix, &has_parent, &parent,
                             NULL); /* the magic: after the check */
    f->st = cd_store_put_begin(f->t->store, f->ns_id, f->key, has_parent ? &parent : NULL, length,
                               &f->put, &f->err);
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
static int t_promote_one(cd_tier_t *t, uint32_t ns_id, uint64_t wire, const st_hash_t *h,
                         uint16_t tag)
{
    cd_key_t key = {*h, (uint32_t)(tag >> 8), (uint32_t)(tag & 0xff)};
    t_fill_t f;
    ssd_key_t k;
    ssd_meta_t meta;
    uint64_t sum = 0, token;
    uint32_t row_bytes = 0;
    cd_err_t err = {""};
    st_status_t st;

    if (key.kind >= CD_KIND_COUNT || cd_tier_ssd_kind[key.kind] == 0) {
        return 0;
    }
    memset(&f, 0, sizeof(f));
    f.t = t;
    f.ns_id = ns_id;
    f.key = &key;
    k = cd_tier_key(wire, h, cd_tier_ssd_kind[key.kind], key.layer);
    /* The tier keeps its copy (cd_tier_evicted finds it, and writes nothing
     * when the object is evicted again); its spill LRU ages it out. The
     * token is taken before the read: a removal after it changes it. */
    token = cd_tier_token(t);
    st = ssd_get_split(t->ssd, &k, f.prefix, CD_TIER_PREFIX, t_fill_alloc, &f, &sum, &meta);
    if (st == ST_ERR_NOMEM && f.st == ST_ERR_EXISTS) {
        return 1; /* in DRAM already: nothing read, the tier's copy left as it is */
    }
    if (st == ST_ERR_NOMEM) {
        /* Did not fit in DRAM (or no memory to verify): nothing was read or
         * dropped, so the object is still in the tier as it was. */
        lg_debug("promote did not fit ns=%u: %s", ns_id, f.st != ST_OK ? f.err.msg : "no memory");
        if (f.begun) {
            cd_store_put_abort(t->store, &f.put);
        }
        (void)t_index_add_kept(t, wire, h, tag, token, &k);
        return 0;
    }
    if (st != ST_OK || !f.begun || cd_tier_prefix_get(f.prefix, NULL, NULL, &row_bytes) != 0) {
        if (st == ST_OK) {
            lg_warn_ratelimited(
                "ssd object without the daemon's prefix or bytes dropped ns=%llu kind=%s",
                (unsigned long long)wire, ssd_kind_name(k.kind));
        }
        if (f.begun) {
            cd_store_put_abort(t->store, &f.put); /* unverified bytes: never visible */
        }
        atomic_fetch_add(&t->promote_misses, 1);
        return 0;
    }
    f.put.pt_tiered = token; /* the tier kept its copy: see cd_tier_evicted */
    /* Its row sums, computed again from the bytes just verified. */
    f.put.pt_row_bytes = row_bytes;
    st = cd_store_put_commit(t->store, &f.put, sum, &err);
    if (st == ST_OK) {
        atomic_fetch_add(&t->promoted, 1);
        if (ns_id <= CD_TIER_NS_MAX) {
            atomic_fetch_add(&t->flow_promoted[ns_id][key.kind], 1);
        }
        return 1;
    }
    /* Not in DRAM after all (no room left, or other bytes under the key):
     * the tier's copy is still there. */
    lg_debug("promote did not fit ns=%u: %s", ns_id, err.msg);
    cd_store_put_abort(t->store, &f.put);
    (void)t_index_add_kept(t, wire, h, tag, token, &k);
    return 0;
}

int cd_tier_promote(cd_tier_t *t, uint32_t ns_id, const st_hash_t *hash)
{
    uint16_t tags[3 * CD_LAYERS_MAX];
    uint32_t n = 0, pending;
    cd_tier_block_t *ent;
    uint64_t wire;
    int done = 0;

    if (t == NULL || t->ssd == NULL || ns_id > CD_TIER_NS_MAX) {
        return 0;
    }
    wire = atomic_load(&t->wire[ns_id]);
    pthread_mutex_lock(&t->lock);
    ent = cd_tier_index_find(t, wire, hash);
    if (ent != NULL && ent->promoting) {
        /* Another call is promoting this block: wait, then ask again. */
        while ((ent = cd_tier_index_find(t, wire, hash)) != NULL && ent->promoting) {
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
        (void)ssd_flush(t->ssd, 0); /* its spill may still be queued */
    }
    for (uint32_t i = 0; i < n; i++) {
        done += t_promote_one(t, ns_id, wire, hash, tags[i]);
    }

    pthread_mutex_lock(&t->lock);
    ent = cd_tier_index_find(t, wire, hash);
    if (ent != NULL) {
        ent->promoting = 0;
        cd_tier_index_maybe_free(t, wire, hash, ent);
    }
    atomic_fetch_add(&t->gen, 1);
    pthread_cond_broadcast(&t->cond);
    pthread_mutex_unlock(&t->lock);
    return done;
}

uint64_t cd_tier_generation(cd_tier_t *t)
{
    return t != NULL ? atomic_load(&t->gen) : 0;
}

st_status_t cd_tier_flush(cd_tier_t *t)
{
    return t->ssd != NULL ? ssd_flush(t->ssd, 0) : ST_ERR_UNAVAILABLE;
}

void cd_tier_stats(cd_tier_t *t, ssd_stats_t *ssd, cd_tier_counters_t *c)
{
    if (ssd != NULL) {
        memset(ssd, 0, sizeof(*ssd));
        pthread_mutex_lock(&t->close_lock);
        if (t->ssd != NULL) {
            ssd_stats(t->ssd, ssd);
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
        spills[k] = ns_id <= CD_TIER_NS_MAX ? atomic_load(&t->flow_spills[ns_id][k]) : 0;
        promoted[k] = ns_id <= CD_TIER_NS_MAX ? atomic_load(&t->flow_promoted[ns_id][k]) : 0;
    }
}
