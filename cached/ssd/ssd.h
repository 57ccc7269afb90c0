/*
 * ssd.h - the SSD tier (T2) of the cache daemon, on LMDB.
 *
 * One environment per daemon: a directory holding LMDB's data.mdb and
 * lock.mdb. It stores four kinds of object under a fixed binary key
 * (namespace, block hash or session id, kind, layer):
 *
 *   - KDA and SESSION objects are written through: ssd_put() with
 *     SSD_DURABLE returns only after the LMDB commit is on disk; without
 *     it the put is queued and committed in a batch with others.
 *   - KV and IDX objects spill here when the daemon evicts them from DRAM
 *     (ssd_spill(), queued and batched). Spilled objects live under their
 *     own byte budget with their own LRU; the oldest are evicted when a batch
 *     takes the total over the budget. ssd_promote() reads a spilled
 *     object back and removes it from the tier (it lives in DRAM again).
 *
 * Every stored value carries a header with an XXH3-64 checksum of the
 * payload. ssd_get() verifies it; a corrupt value is logged (rate-limited),
 * counted, deleted, and reported as ST_ERR_NOT_FOUND: wrong bytes are never
 * returned. docs/tiers.md describes the on-disk format, the sync modes and
 * recovery.
 *
 * Threads. One writer thread per environment owns every write transaction;
 * every function below may be called from any thread unless it says
 * otherwise. Reads use short read-only transactions of their own (the
 * environment is opened with MDB_NOTLS). Completion and eviction callbacks
 * run on the writer thread: they must be quick and must not call the
 * blocking functions of this header (ssd_put with SSD_DURABLE,
 * ssd_flush, ssd_close), which would wait for the writer itself.
 *
 * Processes. LMDB forbids using an environment across fork(): open it after
 * the daemon has daemonised, and in a program that forks children, open it
 * in the child only. A call made in a process other than the one that
 * opened the environment returns ST_ERR_INVALID.
 */
#ifndef STRATA_SSD_H
#define STRATA_SSD_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The object kinds the tier stores (values match the key's kind byte). */
typedef enum ssd_kind {
    SSD_KV = 1,      /* latent KV rows of one block and layer; spilled */
    SSD_IDX = 2,     /* indexer key rows of one block and layer; spilled */
    SSD_KDA = 3,     /* KDA states at a checkpoint; written through */
    SSD_SESSION = 4, /* a session record; written through */
    SSD_KIND_MAX_ = 5
} ssd_kind_t;

/*
 * The key of a stored object. On disk it is SSD_KEY_BYTES bytes:
 * ns (u64 big-endian) | id (16 bytes) | kind (u8) | layer (u16 big-endian),
 * so LMDB's byte order keeps a namespace, then a block, together.
 */
typedef struct ssd_key {
    uint64_t ns;    /* namespace id */
    st_hash_t id;   /* block hash h[i] (KV, IDX, KDA) or session id (SESSION) */
    uint8_t kind;   /* an ssd_kind_t */
    uint16_t layer; /* DSA layer (KV, IDX), checkpoint slot (KDA), 0 otherwise */
} ssd_key_t;

#define SSD_KEY_BYTES 27

/* What the tier knows about a stored object without reading its payload. */
typedef struct ssd_meta {
    uint64_t length;     /* payload bytes */
    uint64_t checksum;   /* XXH3-64 of the payload (the data plane's checksum) */
    uint64_t seq;        /* write sequence: unique and increasing per environment */
    uint64_t created_us; /* wall-clock time of the write, microseconds since 1970 */
    uint16_t flags;      /* SSD_DURABLE if it was written durably */
} ssd_meta_t;

/* Flags of ssd_put, ssd_spill and ssd_delete. */
#define SSD_DURABLE 0x1u /* put: return after the commit is on disk */
#define SSD_NOWAIT  0x2u /* queued calls: fail with ST_ERR_BUSY, not wait, if the queue is full */

/* How commits reach the disk (docs/tiers.md, "Sync modes"). */
typedef enum ssd_sync {
    /*
     * Default. Every commit writes its data pages with one fdatasync (LMDB's
     * MDB_NOMETASYNC); a batch that holds a durable put also syncs the meta
     * page before any durable put of it returns. Acknowledged durable writes
     * survive a power loss; queued ones survive a process crash once their
     * batch committed; the file is never left inconsistent.
     */
    SSD_SYNC_DURABLE = 0,
    /*
     * No fsync at all (MDB_NOSYNC). Writes survive a process crash (kill -9)
     * once committed, durable ones included, but a power loss may lose them
     * or damage the file. For tests and scratch disks only.
     */
    SSD_SYNC_NONE = 1
} ssd_sync_t;

/* Called on the writer thread when a queued operation has finished. */
typedef void (*ssd_done_fn)(void *arg, const ssd_key_t *key, st_status_t status);

/* Called on the writer thread, after the commit, for each spilled object evicted. */
typedef void (*ssd_evict_fn)(void *arg, const ssd_key_t *key, uint64_t length);

/* Called on the writer thread, after each commit, for every object of every
 * kind the commit wrote (delta: +its payload bytes) or removed (-: replaced,
 * deleted, evicted by the budget or to make room, dropped as corrupt), in
 * the order they happened. Must not call the tier. */
typedef void (*ssd_usage_fn)(void *arg, const ssd_key_t *key, int64_t delta);

/*
 * Returns memory for a payload of length bytes, or NULL to refuse (the read
 * then fails with ST_ERR_NOMEM). Called at most once per read.
 */
typedef void *(*ssd_alloc_fn)(void *arg, size_t length, const ssd_meta_t *meta);

/* Parameters of ssd_open. Zero means "the default" for every number. */
typedef struct ssd_params {
    const char *dir;          /* data directory; created (one level) if missing */
    uint64_t map_size;        /* LMDB map size in bytes; default 64 GiB; bounds the data file */
    uint64_t spill_budget;    /* bytes of spilled KV and IDX payload kept; default map_size / 2 */
    ssd_sync_t sync;          /* SSD_SYNC_DURABLE (default) or SSD_SYNC_NONE */
    uint32_t max_readers;     /* concurrent read transactions; default 256 */
    uint32_t queue_max;       /* queued operations before callers wait; default 65536 */
    uint64_t queue_bytes;     /* bytes of copied payload queued before callers wait; 256 MiB */
    uint64_t batch_bytes;     /* payload bytes per write transaction at most; default 64 MiB */
    uint32_t batch_max;       /* operations per write transaction at most; default 4096 */
    uint32_t reader_check_ms; /* period of the stale-reader check; default 10000 */
    uint32_t linger_ms;       /* a batch of only queued writes waits this long for more
                                 (group commit); durable puts and flushes never wait; 5 */
    ssd_evict_fn on_evict;    /* optional: told about each budget eviction */
    void *evict_arg;
    ssd_usage_fn on_usage; /* optional: told the bytes every commit changed (per key) */
    void *usage_arg;
} ssd_params_t;

/* Counters; a snapshot from ssd_stats. */
typedef struct ssd_stats {
    uint64_t objects[SSD_KIND_MAX_]; /* stored objects, indexed by kind */
    uint64_t bytes[SSD_KIND_MAX_];   /* stored payload bytes, indexed by kind */
    uint64_t spill_bytes;            /* bytes[KV] + bytes[IDX] */
    uint64_t spill_budget;
    uint64_t map_size; /* bytes */
    uint64_t map_used; /* bytes of the map in use (last page used x page size) */
    uint64_t puts;     /* committed puts (KDA, SESSION) */
    uint64_t durable_puts;
    uint64_t spills;       /* committed spills */
    uint64_t spill_failed; /* spills refused (queue full) or failed */
    uint64_t promotions;   /* successful promotes */
    uint64_t gets;         /* ssd_get and ssd_promote calls */
    uint64_t misses;       /* of those, not found (corrupt values included) */
    uint64_t evictions;    /* spilled objects evicted by the budget */
    uint64_t evicted_bytes;
    uint64_t deletes;
    uint64_t corrupt;       /* corrupt values detected */
    uint64_t write_errors;  /* operations that failed in the writer */
    uint64_t map_full;      /* MDB_MAP_FULL events */
    uint64_t txns;          /* write transactions committed */
    uint64_t stale_readers; /* stale reader slots cleared */
} ssd_stats_t;

typedef struct ssd ssd_t;

/*
 * Opens (creating if needed) the environment in params->dir, clears stale
 * reader slots, and starts the writer thread.
 *
 * @param[in]  params  see ssd_params_t; only dir is required. Copied.
 * @param[out] ssd_p   the environment, written only on success.
 *
 * Returns ST_OK; ST_ERR_INVALID for a NULL or empty dir, or numbers out of
 * range (map_size below 1 MiB); ST_ERR_IO naming the path when the
 * directory or the files cannot be created, opened or mapped, or the file
 * is not an LMDB environment of this format; ST_ERR_CORRUPT when the
 * stored format record is unreadable; ST_ERR_NOMEM. Logs the error.
 */
st_status_t ssd_open(const ssd_params_t *params, ssd_t **ssd_p);

/*
 * Commits everything queued, stops the writer thread and closes the
 * environment. ssd may be NULL. Callers must have stopped calling the
 * other functions; the done callbacks of queued operations run before it
 * returns.
 */
void ssd_close(ssd_t *ssd);

/*
 * Stores a KDA or SESSION object, replacing one with the same key.
 *
 * With SSD_DURABLE, returns after the commit and the sync: the write
 * survives kill -9 (and power loss in SSD_SYNC_DURABLE); data is not
 * copied and done is not called. Without it, the payload is queued: if done is NULL it is copied
 * and data may be reused at once; otherwise it is not copied, and data must
 * stay valid and unchanged until done(done_arg, key, status) runs.
 *
 * @param[in] key    kind SSD_KDA or SSD_SESSION.
 * @param[in] data   length bytes (may be NULL when length is 0).
 * @param[in] flags  SSD_DURABLE, SSD_NOWAIT.
 *
 * Returns (durable: the outcome; queued: whether it was queued) ST_OK;
 * ST_ERR_INVALID for another kind or a NULL key; ST_ERR_EXHAUSTED when the
 * map (or the disk) is full, with nothing written; ST_ERR_IO for a disk
 * error (when the final sync of a durable put fails, the commit happened
 * but its durability is unknown); ST_ERR_BUSY with SSD_NOWAIT and a full queue; ST_ERR_NOMEM;
 * ST_ERR_UNAVAILABLE while closing. A queued put's own outcome goes to done.
 */
st_status_t ssd_put(ssd_t *ssd, const ssd_key_t *key, const void *data, size_t length,
                    unsigned flags, ssd_done_fn done, void *done_arg);

/*
 * Queues a KV or IDX object evicted from DRAM, replacing one with the same
 * key; it becomes the newest entry of the spill LRU. Payload ownership as
 * for a queued ssd_put (copied when done is NULL). When the batch takes
 * the spilled bytes over spill_budget, the oldest spilled objects are
 * deleted in the same transaction and reported to params.on_evict.
 *
 * Until the batch commits, a get of the key may miss: the daemon should
 * keep serving from DRAM until done reports ST_OK.
 *
 * Returns ST_OK (queued); ST_ERR_INVALID for another kind; ST_ERR_BUSY
 * with SSD_NOWAIT and a full queue; ST_ERR_EXHAUSTED when the payload
 * alone is over the budget; ST_ERR_NOMEM; ST_ERR_UNAVAILABLE while closing.
 * done receives ST_OK, ST_ERR_EXHAUSTED (map or disk full) or ST_ERR_IO.
 */
st_status_t ssd_spill(ssd_t *ssd, const ssd_key_t *key, const void *data, size_t length,
                      unsigned flags, ssd_done_fn done, void *done_arg);

/*
 * ssd_spill of the payload head || data without assembling it: head
 * (1..SSD_HEAD_MAX bytes) is copied, data is not and must stay valid and
 * unchanged until done (required) runs. Stored, checksummed and read back
 * exactly as ssd_spill of the two parts in one buffer. The daemon's
 * write-behind spills objects from DRAM this way, with its 24-byte prefix.
 * Returns as ssd_spill; ST_ERR_INVALID also for a missing head or done.
 */
st_status_t ssd_spill_parts(ssd_t *ssd, const ssd_key_t *key, const void *head, size_t head_len,
                            const void *data, size_t length, unsigned flags, ssd_done_fn done,
                            void *done_arg);

/*
 * ssd_put (queued: not SSD_DURABLE) of the payload head || data without
 * assembling it: head (1..SSD_HEAD_MAX bytes) and data are both copied into
 * the queue at the call, so the caller may reuse them at once. Stored,
 * checksummed and read back exactly as ssd_put of the two parts in one
 * buffer. The daemon queues the KDA copies a Replicate brings this way, with
 * its 24-byte prefix, and commits them with ssd_flush before it answers.
 * Returns as ssd_put; ST_ERR_INVALID also for a missing or oversized head,
 * or SSD_DURABLE in flags.
 */
st_status_t ssd_put_parts(ssd_t *ssd, const ssd_key_t *key, const void *head, size_t head_len,
                          const void *data, size_t length, unsigned flags);

/*
 * Reads an object and verifies its checksum, in a short read transaction.
 * alloc(alloc_arg, length, meta) gives the destination; the payload is
 * copied there and verified in place. When it returns non-NULL and the read
 * then fails, the memory is still the caller's and holds no valid data.
 *
 * @param[out] meta_p  the object's metadata on ST_OK; may be NULL.
 *
 * Returns ST_OK; ST_ERR_NOT_FOUND when absent, or when the stored value is
 * corrupt (then logged, counted in stats.corrupt and queued for deletion);
 * ST_ERR_NOMEM when alloc returned NULL; ST_ERR_INVALID; ST_ERR_IO.
 */
st_status_t ssd_get(ssd_t *ssd, const ssd_key_t *key, ssd_alloc_fn alloc, void *alloc_arg,
                    ssd_meta_t *meta_p);

/*
 * ssd_get into a caller buffer of cap bytes. *length_p receives the
 * payload length on ST_OK, and on ST_ERR_EXHAUSTED, which means cap was too
 * small (nothing copied). Other statuses as ssd_get.
 */
st_status_t ssd_get_buf(ssd_t *ssd, const ssd_key_t *key, void *buf, size_t cap, size_t *length_p,
                        ssd_meta_t *meta_p);

/*
 * A lookup hit on a spilled object: ssd_get, then (for KV and IDX) the
 * object is removed from the tier by a queued delete, since it lives in
 * DRAM again; the daemon spills it anew when it evicts it again. For KDA
 * and SESSION it is ssd_get (the durable copy stays). Same statuses.
 */
st_status_t ssd_promote(ssd_t *ssd, const ssd_key_t *key, ssd_alloc_fn alloc, void *alloc_arg,
                        ssd_meta_t *meta_p);

/*
 * ssd_promote_split without the promote's deletion: the value stays on
 * SSD (the daemon keeps the copy of a promoted KV or IDX object, so that
 * evicting it again costs no write: ssd_contains()). Same statuses.
 */
st_status_t ssd_get_split(ssd_t *ssd, const ssd_key_t *key, void *head, size_t head_len,
                          ssd_alloc_fn alloc, void *alloc_arg, uint64_t *tail_sum_p,
                          ssd_meta_t *meta_p);

/*
 * A count that grows whenever a stored value may have been removed (deleted,
 * replaced, evicted by the spill budget or to make room, dropped as corrupt;
 * it may also grow for a removal whose transaction then failed). A caller
 * that saw a value committed and reads the same count later knows the value
 * is still there: the daemon skips ssd_contains that way. Never 0 after a
 * removal; starts at 0.
 */
uint64_t ssd_removals(ssd_t *ssd);

/*
 * 1 when a value is stored under key (committed; neither read nor verified:
 * a later read still checks it), else 0, also on any error. One short read
 * transaction.
 */
int ssd_contains(ssd_t *ssd, const ssd_key_t *key);

/* The longest head ssd_promote_split() takes apart (and ssd_spill_parts() puts in front). */
#define SSD_HEAD_MAX 256

/*
 * ssd_promote for a caller that keeps the first head_len bytes of a value
 * apart from the rest (the daemon: its prefix, then the object's bytes, read
 * straight into an arena extent). The head is copied into head first; then
 * alloc(alloc_arg, length - head_len, meta) gives the destination of the rest
 * (meta describes the whole value, and the head it may look at is not yet
 * verified). After the read transaction ended, one pass over head and rest
 * checks the stored checksum of the whole value and computes *tail_sum_p, the
 * XXH3-64 of the rest alone (what the daemon's store keeps), so the caller
 * need not hash the bytes again. On any status but ST_OK, head and the
 * memory alloc gave hold no valid data and *tail_sum_p is not written.
 *
 * @param[in]  head_len    1..SSD_HEAD_MAX.
 * @param[out] head        head_len bytes.
 * @param[out] tail_sum_p  may be NULL.
 * @param[out] meta_p      the whole value's metadata on ST_OK; may be NULL.
 *
 * Returns as ssd_promote (a corrupt value is ST_ERR_NOT_FOUND, and is
 * dropped; when alloc returned NULL, ST_ERR_NOMEM and the object stays in
 * the tier untouched), and ST_ERR_INVALID for a head_len out of range or a
 * value shorter than head_len (logged; the object stays).
 */
st_status_t ssd_promote_split(ssd_t *ssd, const ssd_key_t *key, void *head, size_t head_len,
                              ssd_alloc_fn alloc, void *alloc_arg, uint64_t *tail_sum_p,
                              ssd_meta_t *meta_p);

/*
 * Deletes an object. With SSD_DURABLE waits for the commit and returns
 * ST_OK or ST_ERR_NOT_FOUND; otherwise queues it (done as for ssd_put,
 * may be NULL) and returns ST_OK. ST_ERR_INVALID, ST_ERR_BUSY,
 * ST_ERR_UNAVAILABLE as above.
 */
st_status_t ssd_delete(ssd_t *ssd, const ssd_key_t *key, unsigned flags, ssd_done_fn done,
                       void *done_arg);

/*
 * Waits until everything queued before the call has been committed (and,
 * with durable non-zero, synced to disk). Returns ST_OK, ST_ERR_IO if the
 * sync failed, ST_ERR_UNAVAILABLE while closing.
 */
st_status_t ssd_flush(ssd_t *ssd, int durable);

/*
 * Holds (paused non-zero) or releases the writer between batches: queued
 * operations accumulate and are committed together on release. For
 * maintenance and tests; durable puts wait while the writer is held.
 */
void ssd_pause(ssd_t *ssd, int paused);

/* Called once per stored object by ssd_iterate. Non-zero stops. */
typedef int (*ssd_iter_fn)(void *arg, const ssd_key_t *key, const ssd_meta_t *meta);

/*
 * Recovery: calls fn for every stored object of every kind, in key order
 * (grouped by namespace, then block), from the compact metadata table,
 * without reading payloads. Runs in a series of short read transactions;
 * meant to run at start, before the daemon serves. A metadata entry that
 * fails its check is logged, counted as corrupt, skipped, and its object
 * deleted. A completed pass logs the object count and how long it took.
 * One million objects take 0.2 - 0.5 s with a warm page cache and 0.9 - 1.5 s
 * cold on the development machine (docs/performance.md).
 *
 * @param[out] count_p  objects reported; may be NULL.
 *
 * Returns ST_OK (also when fn stopped early), ST_ERR_IO, ST_ERR_INVALID.
 */
st_status_t ssd_iterate(ssd_t *ssd, ssd_iter_fn fn, void *arg, uint64_t *count_p);

/* Fills *stats with the counters. Thread-safe, does not block on the writer. */
void ssd_stats(ssd_t *ssd, ssd_stats_t *stats);

/* Clears stale reader slots now (also done at open and periodically). */
st_status_t ssd_reader_check(ssd_t *ssd, int *cleared_p);

/* Returns "KV", "IDX", "KDA", "SESSION" or "?". */
const char *ssd_kind_name(unsigned kind);

/*
 * Encodes key into SSD_KEY_BYTES bytes / decodes it back. Decoding
 * returns ST_ERR_INVALID for a kind byte that is not an ssd_kind_t.
 */
void ssd_key_encode(const ssd_key_t *key, uint8_t out[SSD_KEY_BYTES]);
st_status_t ssd_key_decode(const uint8_t in[SSD_KEY_BYTES], ssd_key_t *key);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_SSD_H */
