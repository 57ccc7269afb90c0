/*
 * tier.h - stratad's glue to the SSD tier (cached/ssd/st_ssd.h): one LMDB
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
 * evictions take from it; recovery fills it from st_ssd_iterate without
 * reading payloads. A lookup, locate or get that misses in DRAM promotes
 * the blocks the index names and asks the store again.
 *
 * Thread safety: every function may be called from any thread after
 * cd_tier_open, until cd_tier_shutdown. The index has its own mutex, taken
 * after a namespace lock (the eviction hook) and never held across a store
 * or a blocking tier call.
 */
#ifndef STRATA_CACHED_TIER_H
#define STRATA_CACHED_TIER_H

#include <stdint.h>

#include "st_ssd.h"
#include "store.h"

struct cd_daemon;
struct cd_ns_entry;
typedef struct cd_tier cd_tier_t;

/* Daemon-side counters of the tier (the library's are in st_ssd_stats). */
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

/* Opens the environment in d->cfg.data_dir with the ssd_* settings.
 * Returns ST_OK or st_ssd_open's status (logged). */
st_status_t cd_tier_open(struct cd_daemon *d, cd_tier_t **t_p);

/* Rebuilds namespaces, sessions and the T2 index from the tier; logs counts
 * and time. Call after the store and the metrics exist, before serving. */
st_status_t cd_tier_recover(cd_tier_t *t);

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

/* Writes a session record (durable or queued); statuses as above. */
st_status_t cd_tier_session_put(cd_tier_t *t, uint64_t wire_id, const cd_session_t *rec,
                                int durable, cd_err_t *err);

/* Deletes a session record (queued). */
void cd_tier_session_delete(cd_tier_t *t, uint64_t wire_id, const st_hash_t *id);

/* Deletes an object from the tier and the T2 index (queued). */
void cd_tier_forget(cd_tier_t *t, uint64_t wire_id, const cd_key_t *key);

/*
 * Promotes the objects of block hash that the T2 index names into DRAM
 * (under the parent stored with them). Returns the number promoted; when
 * another thread is promoting the same block, waits for it and returns 1
 * (the caller asks the store again); 0 when the index names nothing.
 */
int cd_tier_promote(cd_tier_t *t, const struct cd_ns_entry *e, const st_hash_t *hash);

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
void cd_tier_stats(cd_tier_t *t, st_ssd_stats_t *ssd, cd_tier_counters_t *c);

#endif /* STRATA_CACHED_TIER_H */
