/*
 * tier.h - stratad's glue to the SSD tier (cached/ssd/ssd.h): one LMDB
 * environment per daemon, opened from the config table (data_dir, ssd_*).
 *
 * What goes to the tier (docs/tiers.md, "In stratad"):
 *   - KDA objects of Put, written through (durable when the call asks for it);
 *   - session records on every open and append, deleted on close;
 *   - one namespace record per namespace (tenant, model, block_tokens), so
 *     that recovery can re-create the namespace under the same wire id;
 *   - KV and IDX objects evicted from DRAM (ssd_spill), through the store's
 *     eviction hook.
 *
 * Every value the daemon stores for a KV, IDX or KDA object starts with a
 * 24-byte prefix holding the block's parent hash, so that a promoted block
 * goes back under its parent in the radix tree.
 *
 * The T2 index: an in-memory table of blocks (wire namespace id, block hash)
 * with objects on the tier but not (known to be) in DRAM, with their
 * (kind, layer) tags. Evictions add to it, promotions and the tier's budget
 * evictions take from it; recovery fills it from ssd_iterate without
 * reading payloads. A lookup, locate or get that misses in DRAM promotes
 * the blocks the index names and asks the store again.
 *
 * The tier sits below the daemon: it is given the settings, the store (at
 * recovery: the store's hooks point to the tier, so the store is made after
 * cd_tier_open) and a callback that re-creates a namespace, and it calls
 * nothing of the daemon's. The files: tier_internal.h.
 *
 * Thread safety: every function may be called from any thread after
 * cd_tier_open, until cd_tier_shutdown. The index has its own mutex, taken
 * after a namespace lock (the eviction hook) and never held across a store
 * or a blocking tier call.
 */
#ifndef STRATA_CACHED_TIER_H
#define STRATA_CACHED_TIER_H

#include <stdint.h>

#include "ssd.h"
#include "store.h"

/* Local namespace ids the tier knows (1..CD_TIER_NS_MAX): at least the
 * daemon's CD_MAX_NS. */
#define CD_TIER_NS_MAX 64

typedef struct cd_tier cd_tier_t;

/* What the namespace resolver did with a namespace record. */
typedef enum cd_tier_ns_result {
    CD_TIER_NS_OPENED,     /* the namespace exists (made now, or already) and is bound */
    CD_TIER_NS_OTHER_ID,   /* (tenant, model) is not the namespace of the record's wire id */
    CD_TIER_NS_NOT_SERVED, /* the tenant is not served any more (the tenants file) */
    CD_TIER_NS_FAILED      /* it could not be made: err says why */
} cd_tier_ns_result_t;

/*
 * The namespace resolver: at recovery, re-creates the namespace of a
 * namespace record (tenant, model, block_tokens) stored under wire_id, and
 * binds it (cd_tier_ns_bind) before it returns. The tier logs each outcome.
 */
typedef cd_tier_ns_result_t (*cd_tier_ns_open_fn)(void *arg, uint64_t wire_id, const char *tenant,
                                                  const char *model, uint32_t block_tokens,
                                                  cd_err_t *err);

/*
 * What recovery found of the durable objects that the daemon moves when
 * members change (rebalance.h), once their namespaces are back: a session
 * record (kind CD_KIND_SESSION, id the session id, parent and placement
 * NULL), or a KDA object whose placement record was written
 * (cd_tier_place_put: kind CD_KIND_KDA, its layer, parent NULL for a root).
 */
typedef void (*cd_tier_durable_fn)(void *arg, uint64_t wire_id, uint32_t kind, const st_hash_t *id,
                                   uint32_t layer, const st_hash_t *parent,
                                   const st_hash_t *placement);

/* What cd_tier_open needs; the strings must outlive the tier. */
typedef struct cd_tier_params {
    const char *dir;       /* the LMDB environment's directory (data_dir) */
    const char *node_id;   /* named in the messages of failed writes */
    uint64_t map_size;     /* ssd_map_size */
    uint64_t spill_budget; /* ssd_spill_budget (0: half the map) */
    int sync_none;         /* ssd_sync none: no fsync (SSD_SYNC_NONE) */
    int spill;             /* ssd_spill: spill evicted KV and IDX objects */
    uint64_t writeback;    /* ssd_writeback, bytes per namespace (only with spill; 0: off) */
    cd_tier_ns_open_fn ns_open;
    void *ns_arg;
    cd_tier_durable_fn durable_found; /* may be NULL; called with ns_arg */
} cd_tier_params_t;

/* Daemon-side counters of the tier (the library's are in ssd_stats). */
typedef struct cd_tier_counters {
    uint64_t t2_blocks;     /* blocks in the T2 index */
    uint64_t t2_objects;    /* objects in the T2 index */
    uint64_t spill_queued;  /* spills handed to the tier */
    uint64_t spill_dropped; /* evictions not spilled (queue or in-flight cap full) */
    uint64_t spill_clean;   /* evictions that wrote nothing: the tier held a copy */
    uint64_t writeback_objects, writeback_bytes; /* written ahead of eviction (write-behind) */
    uint64_t writeback_failed; /* write-behind writes that failed (map full, say) */
    uint64_t promoted;         /* objects promoted back into DRAM */
    uint64_t promote_misses;   /* indexed objects the tier no longer had (or corrupt) */
    uint64_t recovered_ms;     /* how long recovery took */
    uint64_t recovered_sessions;
    uint64_t recovered_objects;
} cd_tier_counters_t;

/* Opens the environment in p->dir with p's settings and starts the
 * write-behind. Returns ST_OK, ssd_open's status or ST_ERR_NOMEM (logged). */
st_status_t cd_tier_open(const cd_tier_params_t *p, cd_tier_t **t_p);

/* Hands the tier the store it serves, then rebuilds namespaces (through
 * p->ns_open), sessions and the T2 index from the tier; logs counts and
 * time. Call after the store and the metrics exist, before serving.
 * Returns ST_OK, or the iteration's status or ST_ERR_NOMEM (logged). */
st_status_t cd_tier_recover(cd_tier_t *t, cd_store_t *store);

/* Commits what is queued and closes the environment (after the server
 * drained). Later calls of the other functions do nothing or return
 * ST_ERR_UNAVAILABLE. */
void cd_tier_shutdown(cd_tier_t *t);

/* Frees the index. After the store is destroyed. t may be NULL. */
void cd_tier_free(cd_tier_t *t);

/* The store's eviction hook (cd_store_config_t.evicted); ctx is the tier. */
void cd_tier_evicted(void *ctx, uint32_t ns_id, const cd_key_t *key, const st_hash_t *parent,
                     const void *data, uint64_t len, uint64_t tiered, uint32_t row_bytes);

/* The store's session_expired hook: queues the record's deletion. */
void cd_tier_session_expired(void *ctx, uint32_t ns_id, const st_hash_t *id);

/* Tells the tier the wire id of a local namespace (before it holds objects). */
void cd_tier_ns_bind(cd_tier_t *t, uint32_t local_id, uint64_t wire_id);

/* Stores the namespace record (durably). Skipped during recovery. */
st_status_t cd_tier_ns_put(cd_tier_t *t, uint64_t wire_id, const char *tenant, const char *model,
                           uint32_t block_tokens, cd_err_t *err);

/* Writes a KDA object through: durable waits for the commit. Returns ST_OK,
 * ST_ERR_EXHAUSTED (map or disk full; err names the numbers), ST_ERR_IO,
 * ST_ERR_BUSY, ST_ERR_NOMEM, ST_ERR_UNAVAILABLE. */
st_status_t cd_tier_put_object(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key,
                               const st_hash_t *parent, const void *data, uint64_t len, int durable,
                               cd_err_t *err);

/* Writes the placement record of KDA block hash (its parent, NULL for a
 * root, and the hash the ring places it by), so that recovery can report it
 * (durable_found); durable or queued, statuses as above. */
st_status_t cd_tier_place_put(cd_tier_t *t, uint64_t wire_id, const st_hash_t *hash,
                              const st_hash_t *parent, const st_hash_t *placement, int durable,
                              cd_err_t *err);

/* Writes a session record (durable or queued); statuses as above. */
st_status_t cd_tier_session_put(cd_tier_t *t, uint64_t wire_id, const cd_session_t *rec,
                                int durable, cd_err_t *err);

/* Deletes a session record (queued). */
void cd_tier_session_delete(cd_tier_t *t, uint64_t wire_id, const st_hash_t *id);

/* Deletes an object from the tier and the T2 index (queued). */
void cd_tier_forget(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key);

/*
 * Promotes the objects of block hash of local namespace ns_id that the T2
 * index names into DRAM (under the parent stored with them). Returns the
 * number promoted; when another thread is promoting the same block, waits
 * for it and returns 1 (the caller asks the store again); 0 when the index
 * names nothing (or t is NULL).
 */
int cd_tier_promote(cd_tier_t *t, uint32_t ns_id, const st_hash_t *hash);

/* A counter that moves whenever a promotion finished. A caller that read it
 * before asking the store, and finds cd_tier_promote returned 0, asks the
 * store again if it moved: another call may have promoted the block. */
uint64_t cd_tier_generation(cd_tier_t *t);

/* Namespace ns_id's objects written to the tier from DRAM (spills and the
 * write-behind's writes) and promoted, since start, by cd_kind_t (KV, IDX,
 * KDA); for the metrics. */
void cd_tier_flows(cd_tier_t *t, uint32_t ns_id, uint64_t spills[3], uint64_t promoted[3]);

/* Waits until every queued write (spills included) is committed. */
st_status_t cd_tier_flush(cd_tier_t *t);

/* Snapshots of the counters. */
void cd_tier_stats(cd_tier_t *t, ssd_stats_t *ssd, cd_tier_counters_t *c);

#endif /* STRATA_CACHED_TIER_H */
