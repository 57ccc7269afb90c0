/*
 * store.h - the cache daemon's storage core: namespaces, the object store,
 * the prefix index, leases, pins, sessions and stats. This is the contract
 * the control-plane handlers (rpc/) call; nothing here does networking.
 *
 * Model (ARCHITECTURE §5, §7, §8, docs/daemon.md):
 *   - A namespace is (tenant, model, block size) with its own arena, slab
 *     allocator, object table, radix-tree index, leases and sessions.
 *   - An object is keyed by (block hash, kind, layer) inside a namespace.
 *     KV, IDX and KDA objects belong to the block of their hash, which sits in
 *     the tree under its parent block; VIS objects (keyed by an image's
 *     content hash) form blocks of their own at the root. SESSION records live
 *     in their own table (cd_store_session_*), not in the arena.
 *   - Committed objects are immutable and carry the XXH3-64 of their bytes
 *     (seed 0). Each allocation of an extent gets a fresh generation number.
 *   - A lease (lookup, locate) or a pin holds whole blocks: a held block is
 *     never evicted and its extents are never reused. Leases and pins both
 *     expire (pins after their TTL, at most max_pin_ms).
 *   - A tenant (the name namespaces carry) has one record for all its
 *     namespaces: its quotas (cd_store_tenant_set) and what it uses of them.
 *
 * Errors: every function returns st_status_t. Functions with a cd_err_t *err
 * parameter write a sentence for a person into err->msg (when err is not
 * NULL) on every error they return; it names the limit, key or numbers
 * involved, ready to go into a gRPC status message. Client errors are not
 * logged above debug level; exhaustion is logged rate-limited.
 *
 * Thread safety: every cd_store_* function may be called from any thread at
 * any time once cd_store_create() returned, except cd_store_destroy(), which
 * must run alone. Each namespace has one mutex; cd_store_x() takes it and
 * calls the internal do_x() that runs with it held (memcached's convention).
 * Calls on different namespaces run in parallel; the memory budget has its
 * own short lock. Namespaces are never destroyed before the store is.
 * Callbacks (region_added/removed) run with the namespace lock held and must
 * not call back into the store.
 *
 * Time: the store reads a millisecond clock (monotonic by default, or the
 * one in the config, for tests). cd_store_reap() takes the time explicitly.
 */
#ifndef STRATA_CACHED_STORE_H
#define STRATA_CACHED_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "radix.h"
#include "slab.h"
#include "strata/hash.h"
#include "strata/status.h"

#define CD_ERR_LEN       256
#define CD_LEASE_NONE    0   /* lease_ms argument: take no lease */
#define CD_LEASE_DEFAULT 1   /* lease_ms argument: the default duration (so a flag works) */
#define CD_NAME_MAX      128 /* tenant and model names, bytes */

typedef struct cd_err {
    char msg[CD_ERR_LEN];
} cd_err_t;

/* Limits checked before a request touches the index. */
typedef struct cd_limits {
    uint64_t max_object_bytes;   /* default 64 MiB; at most chunk_bytes */
    uint32_t max_hashes;         /* hashes per lookup, default 65536 */
    uint32_t max_batch;          /* objects per reserve/locate, segments per lookup; 4096 */
    uint32_t max_layers;         /* layers per kind, 1..128, default 128 */
    uint32_t max_namespaces;     /* default 64 */
    uint64_t max_sessions;       /* per namespace, default 1,000,000 */
    uint64_t lease_ms;           /* read lease, default 5000 */
    uint64_t max_lease_ms;       /* longest lease a caller may ask for, default 60000 */
    uint64_t reservation_ms;     /* reserve -> commit deadline, default 30000 */
    uint64_t session_ttl_ms;     /* default when Open gives 0: 86,400,000 (a day) */
    uint64_t session_ttl_max_ms; /* default 30 days */
    uint64_t max_pin_ms;         /* longest pin, and a pin's TTL when it asks for 0; 1 hour */
} cd_limits_t;

/* Called when a chunk of namespace ns_id's arena becomes a transport region
 * (added) or is about to stop being one (removed). */
struct cd_key;

typedef void (*cd_store_region_fn)(void *ctx, uint32_t ns_id, uint32_t region, void *base,
                                   size_t len);

typedef struct cd_store_config {
    uint64_t memory_limit; /* bytes, process-wide; required (>= 2 chunks) */
    uint64_t meta_reserve; /* part of the limit the arenas leave to the index; 0: limit/16 */
    size_t chunk_bytes;    /* arena growth unit = region; default 64 MiB */
    size_t page_bytes;     /* slab page; default 2 MiB */
    size_t reserve_bytes;  /* address space per namespace; 0: memory_limit */
    cd_huge_mode_t huge;   /* default CD_HUGE_THP */
    uint32_t slab_min;     /* smallest class; default 64 */
    double slab_factor;    /* default 1.25 */
    cd_limits_t limits;
    const uint8_t *cluster_secret;   /* for namespace seeds; copied */
    size_t cluster_secret_len;       /* 16..256 bytes */
    uint64_t (*clock_ms)(void *ctx); /* NULL: CLOCK_MONOTONIC */
    void *clock_ctx;
    cd_store_region_fn region_added;   /* may be NULL */
    cd_store_region_fn region_removed; /* may be NULL */
    void *region_ctx;
    /* Where arena chunks come from (both or neither; NULL: the arena maps
     * them itself): the daemon's transport allocates registered memory.
     * Called with the namespace lock held; must not call the store. */
    st_status_t (*chunk_alloc)(void *ctx, uint32_t ns_id, uint32_t region, size_t len,
                               void **base_p);
    void (*chunk_free)(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len);
    void *chunk_ctx;
    /* Told (ctx chunk_ctx, namespace lock held, must not call the store)
     * that the one-sided writes of reservation resv_id must stop: at Commit
     * before its bytes are checksummed, and at Abort, expiry or any other
     * drop before its extent can be reused. The data plane revokes the
     * reservation's write key there (docs/daemon.md, "Fencing"). It may be
     * told twice about one reservation. NULL: nothing to revoke. */
    void (*resv_end)(void *ctx, uint32_t ns_id, uint64_t resv_id);
    /* Told about each committed object eviction takes from DRAM, before its
     * extent is freed: data (len bytes) is valid only during the call, parent
     * is the block's parent hash (NULL for a root), tiered the object's
     * hint that the tier holds a copy, 0 for none (the tier's nonzero token:
     * the put's pt_tiered, committed from a tier that kept its copy; or
     * cd_clean_t.token, written ahead by cd_store_clean_finish),
     * row_bytes the object's row size (0: none; the tier keeps it, so
     * that a promoted object gets its row sums again).
     * The SSD tier spills from here. Called with the namespace lock held;
     * must not call the store. May be NULL. */
    void (*evicted)(void *ctx, uint32_t ns_id, const struct cd_key *key, const st_hash_t *parent,
                    const void *data, uint64_t len, uint64_t tiered, uint32_t row_bytes);
    void *evicted_ctx;
    /* Told about each session the reaper expires (namespace lock held; must
     * not call the store). May be NULL. ctx is evicted_ctx. */
    void (*session_expired)(void *ctx, uint32_t ns_id, const st_hash_t *id);
} cd_store_config_t;

typedef struct cd_store cd_store_t;

/* An object key. layer < max_layers; KDA and VIS objects usually use 0. */
typedef struct cd_key {
    st_hash_t hash;
    uint32_t kind; /* cd_kind_t: KV, IDX, KDA or VIS */
    uint32_t layer;
} cd_key_t;

/* Where an object's bytes are, for a one-sided read or write. */
typedef struct cd_location {
    uint32_t region;     /* arena chunk = transport region */
    uint64_t offset;     /* byte offset inside the region */
    uint64_t length;     /* object bytes */
    uint64_t checksum;   /* XXH3-64 (0 for a reservation) */
    uint64_t generation; /* changes whenever the extent is reused */
    /* Row verification (committed row-major objects; all 0 otherwise): */
    uint32_t row_bytes;    /* bytes per row, as the writer gave it */
    uint32_t row_group;    /* rows per checksummed group (PR_ROW_GROUP) */
    uint64_t n_rowsum;     /* groups */
    const uint8_t *rowsum; /* their sums, packed (proto/rowsum.h); only from
                               cd_store_row_sums(), which copies them */
} cd_location_t;

typedef struct cd_resv_req {
    cd_key_t key;
    const st_hash_t *parent; /* the block's parent hash (h[i-1] or the seed); NULL: a root */
    uint64_t length;
    uint32_t row_bytes; /* bytes per row (KV, IDX): row sums are computed at commit; 0: none */
} cd_resv_req_t;

typedef struct cd_resv {
    st_status_t status;  /* ST_OK, or ST_ERR_EXISTS: already committed, nothing to write */
    uint64_t id;         /* reservation id (0 when status is not ST_OK) */
    uint64_t expires_ms; /* commit before this (store clock) */
    cd_location_t where; /* write length bytes here */
} cd_resv_t;

typedef struct cd_located {
    st_status_t status; /* ST_OK or ST_ERR_NOT_FOUND */
    cd_location_t where;
} cd_located_t;

typedef struct cd_session {
    st_hash_t id; /* 16 bytes, chosen by the client (or by Open) */
    uint32_t ns_id;
    st_hash_t head;   /* hash of the chain's last block h[n]; zero before the first append */
    uint64_t length;  /* tokens */
    uint64_t version; /* 0 at open, +1 per append */
    uint64_t created_ms, updated_ms, ttl_ms;
} cd_session_t;

typedef struct cd_ns_info {
    uint32_t id;
    char tenant[CD_NAME_MAX + 1];
    char model[CD_NAME_MAX + 1];
    uint32_t block_tokens;
    st_hash_t seed;
} cd_ns_info_t;

typedef struct cd_stats {
    uint32_t namespaces;
    uint64_t objects[CD_KIND_COUNT]; /* committed objects per kind (SESSION: sessions) */
    uint64_t bytes[CD_KIND_COUNT];   /* their lengths */
    uint64_t blocks, nodes, splits;
    uint64_t puts, gets, get_misses, corrupt;
    uint64_t lookups, lookup_hits;      /* requests, and requests with any matched block */
    uint64_t lookup_tokens, hit_tokens; /* token hit rate = hit_tokens / lookup_tokens */
    uint64_t locates, locate_keys, locate_hits;
    uint64_t evicted_blocks, evicted_objects, evicted_bytes;
    uint64_t leases_active, leases_granted, leases_released, leases_expired;
    uint64_t pins_active;
    uint64_t reservations_active, reservations_granted, reservations_committed,
        reservations_aborted, reservations_expired, reserved_bytes;
    uint64_t sessions_active, sessions_expired;
    uint64_t exhausted;       /* allocations refused for memory */
    uint64_t reclaims;        /* chunks of budget taken back from other namespaces */
    uint64_t arena_committed; /* bytes of committed chunks */
    uint64_t arena_used;      /* bytes of live extents */
    uint64_t memory_used;     /* process: arenas + index (global) */
    uint64_t memory_limit;
} cd_stats_t;

/* Fills cfg with the defaults (memory_limit 1 GiB, no secret). */
void cd_store_config_defaults(cd_store_config_t *cfg);

/*
 * Derives a namespace seed: the first 16 bytes of
 *   HMAC-SHA-256(secret, "strata-ns-v1" || u32 len(tenant) || tenant
 *                        || u32 len(model) || model)   (lengths little-endian)
 * Returns ST_OK; ST_ERR_INVALID (NULL, empty or too long names or secret);
 * ST_ERR_INTERNAL when OpenSSL fails (logged).
 * Pure; thread-safe.
 */
st_status_t cd_ns_seed(const uint8_t *secret, size_t secret_len, const char *tenant,
                       const char *model, st_hash_t *seed_p);

/*
 * Creates the store. Returns ST_OK; ST_ERR_INVALID (with err) for a config
 * that does not hold together; ST_ERR_NOMEM. *store_p is written on success.
 */
st_status_t cd_store_create(const cd_store_config_t *cfg, cd_store_t **store_p, cd_err_t *err);

/* Frees everything, namespaces included. Must not race with any call. */
void cd_store_destroy(cd_store_t *s);

/*
 * Creates (or finds) the namespace of (tenant, model). If it exists with the
 * same block_tokens its id is returned (ST_OK); with another, ST_ERR_EXISTS.
 * block_tokens: a multiple of 16 in 16..4096. Returns also ST_ERR_INVALID,
 * ST_ERR_EXHAUSTED (max_namespaces, or the budget for its page tables),
 * ST_ERR_NOMEM, ST_ERR_IO (mmap).
 */
st_status_t cd_store_ns_create(cd_store_t *s, const char *tenant, const char *model,
                               uint32_t block_tokens, uint32_t *ns_id_p, cd_err_t *err);

/* Copies a namespace's description, seed included. ST_ERR_NOT_FOUND. */
st_status_t cd_store_ns_info(cd_store_t *s, uint32_t ns_id, cd_ns_info_t *info_p);

/*
 * Stores an object given inline: copies len bytes, computes the checksum
 * and commits. parent is the parent block's hash for KV, IDX and KDA (the
 * seed for block 0; NULL makes the block a root); ignored for VIS.
 * A duplicate put of a committed key succeeds without change if the bytes
 * have the same checksum, else returns ST_ERR_EXISTS (objects are immutable).
 * Returns ST_OK, ST_ERR_NOT_FOUND (namespace), ST_ERR_INVALID (kind, layer,
 * length 0 or above max_object_bytes), ST_ERR_EXISTS, ST_ERR_EXHAUSTED,
 * ST_ERR_NOMEM.
 */
st_status_t cd_store_put(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                         const st_hash_t *parent, const void *data, uint64_t len, cd_err_t *err);

/*
 * cd_store_put of a row-major object: with row_bytes > 0 the store also
 * computes a checksum per row group (proto/rowsum.h) and keeps it with the
 * object, for cd_store_row_sums(). Same statuses as cd_store_put.
 */
st_status_t cd_store_put_rows(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                              const st_hash_t *parent, const void *data, uint64_t len,
                              uint32_t row_bytes, cd_err_t *err);

/*
 * Copies the row sums of located objects out, for a Locate answer: for each
 * i with out[i].status ST_OK and out[i].where.n_rowsum > 0 whose object is
 * still the one located (same generation), its sums go to the next
 * 8 * n_rowsum bytes of buf and out[i].where.rowsum points there; an entry
 * whose object went meanwhile, or that no longer fits in cap bytes, is left
 * without sums (row_group, n_rowsum 0: its rows cannot be verified, and the
 * reader reads them otherwise). Takes the namespace lock once. Returns ST_OK
 * or ST_ERR_NOT_FOUND (namespace).
 */
st_status_t cd_store_row_sums(cd_store_t *s, uint32_t ns_id, const cd_key_t *keys,
                              cd_located_t *out, size_t n, uint8_t *buf, size_t cap);

/*
 * Copies rows rows[0..n_rows) of a row-major object into buf, in that
 * order, each checked against its row sum (an inline Get with a row
 * selection). *len_p receives the bytes they take (n_rows x row_bytes; also
 * when buf is too small, then ST_ERR_INVALID; 0 on the other errors).
 * where_p (may be NULL) receives the object's location and row size. Counts
 * as an access. Returns ST_OK; ST_ERR_NOT_FOUND; ST_ERR_UNSUPPORTED (the
 * object has no row sums: get it whole); ST_ERR_INVALID (a row past the
 * object's rows, or buf too small); ST_ERR_CORRUPT (a row fails its sum:
 * logged, never served).
 */
st_status_t cd_store_get_rows(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                              const uint32_t *rows, size_t n_rows, void *buf, uint64_t cap,
                              uint64_t *len_p, cd_location_t *where_p, cd_err_t *err);

/* A put whose bytes the caller writes itself: cd_store_put_begin() .. _commit() or _abort(). */
typedef struct cd_put {
    uint32_t pt_ns_id;
    void *pt_obj;          /* the object, invisible until committed */
    void *pt_data;         /* where its len bytes go */
    uint64_t pt_tiered;    /* set by the caller before the commit: nonzero when the bytes
                           came from a tier that keeps its copy (a token of the tier's,
                           passed to the evicted hook) */
    uint32_t pt_row_bytes; /* set by the caller before the commit: bytes per row (row sums
                              are computed at the commit); 0: none */
} cd_put_t;

/*
 * cd_store_put in two steps, for a caller that has the bytes elsewhere and
 * can write them straight into the object (the SSD tier's promote reads them
 * from disk into it). Allocates an object of len bytes as cd_store_put does
 * (evicting when memory is short; the parent block and the object's own
 * block are held until the commit or the abort) and fills *put: its bytes go
 * to put->pt_data, outside any lock. The object stays invisible, and takes
 * no part in eviction, reservations or the reaper, until
 * cd_store_put_commit(); the caller must end every begun put with one of
 * commit or abort, before the namespace or the store goes.
 * Returns ST_OK (*put written); ST_ERR_EXISTS when an object is committed
 * under the key already (nothing allocated: it is in DRAM); and as
 * cd_store_put otherwise (ST_ERR_EXHAUSTED: no room).
 */
st_status_t cd_store_put_begin(cd_store_t *s, uint32_t ns_id, const cd_key_t *key,
                               const st_hash_t *parent, uint64_t len, cd_put_t *put, cd_err_t *err);

/*
 * Makes a begun put visible with checksum as the object's XXH3-64. The store
 * does not hash the bytes again: the caller vouches that checksum is the
 * XXH3-64 of the len bytes now at put->pt_data, computed over those bytes
 * after it wrote them (the tier computes it in the pass that verifies them
 * against the SSD checksum). ST_OK ends the put. If an object was committed
 * under the key meanwhile: ST_OK (and this one is freed) when it has the
 * same length and checksum, else ST_ERR_EXISTS. Returns also
 * ST_ERR_EXHAUSTED or ST_ERR_NOMEM (no room left in the index). On an error
 * the put is still begun, its bytes still at put->pt_data: the caller may
 * copy them elsewhere, then must call cd_store_put_abort().
 */
st_status_t cd_store_put_commit(cd_store_t *s, cd_put_t *put, uint64_t checksum, cd_err_t *err);

/* Ends a begun put without making it visible, and frees its memory. */
void cd_store_put_abort(cd_store_t *s, cd_put_t *put);

/*
 * Write-behind (the SSD tier's cleaner, docs/tiers.md): the committed
 * objects near the cold end of a namespace's LRU that the tier holds no copy
 * of yet, so that it can write them out before eviction needs their room.
 */
typedef struct cd_clean {
    cd_key_t key;
    int has_parent;
    st_hash_t parent;
    const void *data; /* the object's bytes, valid until cd_store_clean_finish */
    uint64_t len;
    uint64_t checksum;  /* XXH3-64 of the bytes, as committed */
    uint32_t row_bytes; /* the object's row size (0: none) */
    st_status_t status; /* set by the caller: ST_OK once the tier holds the copy */
    uint64_t token;     /* set by the caller with ST_OK: the tiered hint, nonzero */
    void *obj_;         /* private */
    int held_;          /* private: this entry holds its block */
} cd_clean_t;

/*
 * Walks the coldest `ahead` bytes of namespace ns_id's objects (its
 * evictable blocks, in the order eviction would take them; at most
 * CD_CLEAN_WALK_MAX blocks, so the namespace lock is held briefly), and
 * returns in out (up to cap entries, and up to about max_bytes of object
 * bytes, at most an eighth of the namespace's, but at least one object)
 * the objects of the kinds in kinds (a
 * mask of 1 << cd_kind_t) whose tiered hint is clear. Their blocks are held
 * until cd_store_clean_finish: not evicted (eviction passes over them), not
 * deleted (ST_ERR_BUSY), their extents not reused; the hold is no access and
 * leaves them where they are in the LRU. *n_p = 0 when there is nothing
 * to write; *window_p (may be NULL) is the bytes walked: with *n_p = 0, the
 * window whose every object is tiered (or held elsewhere).
 * Returns ST_OK or ST_ERR_NOT_FOUND (no such namespace).
 */
#define CD_CLEAN_WALK_MAX 16384

st_status_t cd_store_clean_take(cd_store_t *s, uint32_t ns_id, uint32_t kinds, uint64_t ahead,
                                uint64_t max_bytes, cd_clean_t *out, size_t cap, size_t *n_p,
                                uint64_t *window_p);

/*
 * Ends a take: entries with status ST_OK get their token as the tiered hint
 * (their eviction then hands it to the tier, which writes nothing if it
 * still has the copy), and the blocks are released.
 */
void cd_store_clean_finish(cd_store_t *s, uint32_t ns_id, cd_clean_t *items, size_t n);

/*
 * Copies an object out after checking its checksum. *len_p receives the
 * object's length (also when buf is too small). where_p (may be NULL)
 * receives its location. Counts as an access for the LRU.
 * Returns ST_OK; ST_ERR_NOT_FOUND; ST_ERR_INVALID when cap < length;
 * ST_ERR_CORRUPT when the bytes no longer match the checksum (logged; the
 * object is then treated as a miss by the caller, never served).
 */
st_status_t cd_store_get(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, void *buf,
                         uint64_t cap, uint64_t *len_p, cd_location_t *where_p, cd_err_t *err);

/*
 * Reserves extents for n objects a remote writer will fill with one-sided
 * writes. Items already committed get status ST_ERR_EXISTS and no
 * reservation. Otherwise all-or-nothing: on error nothing stays reserved.
 * Reserved objects are invisible until committed and expire after
 * reservation_ms. While a reservation is outstanding, the parent block and
 * the object's own block (when present) are held like a lease, so the write
 * never loses its parent to eviction (a put holds them the same way while it
 * allocates). Returns ST_OK; ST_ERR_INVALID (n above max_batch, a bad
 * key or length); ST_ERR_EXHAUSTED; ST_ERR_NOMEM; ST_ERR_NOT_FOUND (ns).
 */
st_status_t cd_store_reserve(cd_store_t *s, uint32_t ns_id, const cd_resv_req_t *reqs, size_t n,
                             cd_resv_t *out, cd_err_t *err);

/*
 * Commits a reservation: computes the XXH3-64 of the bytes now in the extent
 * and compares it with the checksum the client claims. On a match the object
 * becomes visible. Returns ST_OK; ST_ERR_NOT_FOUND (unknown or expired
 * reservation); ST_ERR_CORRUPT (mismatch: nothing becomes visible, the
 * reservation stays until it expires, so the client may write again and
 * retry); ST_ERR_EXISTS (another writer committed different bytes under the
 * key first; the reservation is dropped). If another writer committed the
 * same bytes first, ST_OK and the reservation is dropped.
 */
st_status_t cd_store_commit(cd_store_t *s, uint32_t ns_id, uint64_t resv_id, uint64_t checksum,
                            cd_err_t *err);

/*
 * cd_store_commit that also tells which key the reservation was for (and its
 * block's parent: *has_parent_p 0 for a root), whenever the reservation was
 * found (on ST_OK, ST_ERR_CORRUPT and ST_ERR_EXISTS), so the daemon can write
 * a committed KDA object through to the SSD tier. Same statuses, and
 * ST_ERR_INVALID for a NULL output.
 */
st_status_t cd_store_commit_key(cd_store_t *s, uint32_t ns_id, uint64_t resv_id, uint64_t checksum,
                                cd_key_t *key_p, st_hash_t *parent_p, int *has_parent_p,
                                cd_err_t *err);

/* Drops a reservation and frees its extent. ST_OK or ST_ERR_NOT_FOUND. */
st_status_t cd_store_abort(cd_store_t *s, uint32_t ns_id, uint64_t resv_id);

/*
 * Deletes one committed object. Returns ST_OK, ST_ERR_NOT_FOUND, or
 * ST_ERR_BUSY when its block is leased or pinned. A block left without
 * objects leaves the tree when it is a leaf; otherwise it stays as an empty
 * link of the chain (it satisfies no requirement) until it is evicted.
 */
st_status_t cd_store_delete(cd_store_t *s, uint32_t ns_id, const cd_key_t *key, cd_err_t *err);

/*
 * Answers a chain lookup, segment by segment: for each, how many leading
 * blocks are present with everything req asks for, and the chain indices of
 * the KDA checkpoints among them (kda, room for kda_cap; *kda_n is set).
 * Matched blocks are touched. With lease_ms != CD_LEASE_NONE, one lease
 * holding every matched block is granted for lease_ms (CD_LEASE_DEFAULT, 1,
 * asks for the configured lease_ms: a 1 ms lease is of no use, and this
 * way a boolean "lease or not" passes as is); *lease_id_p receives its id (0 when nothing matched)
 * and *lease_expires_p (may be NULL) its expiry.
 * Returns ST_OK; ST_ERR_INVALID (no segments, more than max_batch segments,
 * more than max_hashes hashes, NULL hashes, lease_ms above max_lease_ms);
 * ST_ERR_EXHAUSTED/NOMEM (the lease record); ST_ERR_NOT_FOUND (ns).
 */
st_status_t cd_store_lookup(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs, size_t nseg,
                            const cd_require_t *req, uint64_t lease_ms, cd_seg_answer_t *answers,
                            uint64_t *kda, size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err);

/*
 * cd_store_lookup() with compact segments: where probes (may be NULL) has
 * offsets for segment i, segs[i] is in the compact form of radix.h
 * (cd_radix_lookup_compact(): answered from the index's parent links, and
 * answers[i].unresolved may leave blocks undecided). A compact segment counts
 * its n blocks toward max_hashes and takes no lease. Returns as
 * cd_store_lookup(), and ST_ERR_INVALID for offsets that do not rise from 0
 * to n - 1 or a lease asked with a compact segment.
 */
st_status_t cd_store_lookup_probes(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs,
                                   const cd_probes_t *probes, size_t nseg, const cd_require_t *req,
                                   uint64_t lease_ms, cd_seg_answer_t *answers, uint64_t *kda,
                                   size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                                   uint64_t *lease_expires_p, cd_err_t *err);

/*
 * Locates n objects for one-sided reads: out[i] gets ST_OK and the location,
 * or ST_ERR_NOT_FOUND. With lease_ms != CD_LEASE_NONE the blocks of the
 * found objects are leased under one id (*lease_id_p; 0 if none found), as
 * for cd_store_lookup().
 * Returns ST_OK; ST_ERR_INVALID (n is 0 or above max_batch, lease_ms above
 * max_lease_ms); ST_ERR_EXHAUSTED/NOMEM (the lease); ST_ERR_NOT_FOUND (ns).
 */
st_status_t cd_store_locate(cd_store_t *s, uint32_t ns_id, const cd_key_t *keys, size_t n,
                            uint64_t lease_ms, cd_located_t *out, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err);

/* Releases a lease before it expires. ST_OK or ST_ERR_NOT_FOUND (unknown or
 * already expired). */
st_status_t cd_store_release(cd_store_t *s, uint32_t ns_id, uint64_t lease_id);

/* Pins the block of hash (all its objects, and so its ancestors) until
 * unpinned or for max_pin_ms, whichever comes first; pins count (an unpin
 * drops one). ST_OK, ST_ERR_NOT_FOUND; ST_ERR_EXHAUSTED (the tenant's pins
 * quota, or memory for the pin record); unpin of a block that is not pinned
 * is ST_ERR_INVALID. */
st_status_t cd_store_pin(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash);
st_status_t cd_store_unpin(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash);

/*
 * cd_store_pin with a time to live: the pin ends by itself ttl_ms from now
 * (0: max_pin_ms), unless an unpin ends it first. Pinning a pinned block
 * again adds a pin and moves the block's expiry to the later of the two.
 * Returns ST_OK; ST_ERR_NOT_FOUND (namespace or block); ST_ERR_INVALID
 * (ttl_ms above max_pin_ms); ST_ERR_EXHAUSTED (the tenant's pins quota,
 * message with the numbers; or memory); ST_ERR_NOMEM.
 */
st_status_t cd_store_pin_ttl(cd_store_t *s, uint32_t ns_id, const st_hash_t *hash, uint64_t ttl_ms,
                             cd_err_t *err);

/*
 * Tenants and their quotas (docs/daemon.md, "Quotas"). A tenant's record is
 * shared by every namespace created with its name; it exists from its first
 * namespace or its first cd_store_tenant_set, and lives as long as the store.
 * Each field is a limit on the tenant as a whole, 0 for none:
 *   memory_bytes  DRAM extent bytes of its namespaces: committed objects,
 *                 reservations and puts being written. A put or reserve that
 *                 would pass it first evicts the tenant's own least recently
 *                 used blocks; eviction for the process-wide limit takes from
 *                 tenants above their quota before anyone else.
 *   ssd_bytes     bytes the SSD tier holds for it (spilled and durable).
 *   sessions      open sessions.
 *   pins          pins in force (every pin call counts, until unpin or TTL).
 *   leases        read leases in flight.
 *   reservations  reserved objects not yet committed, aborted or expired.
 *   namespaces    its namespaces.
 * Because a tenant's pinned, leased and reserved blocks are its own bytes,
 * its memory quota bounds them too: with quotas that add up to no more than
 * the process-wide limit, one tenant's holds never make another's put fail.
 * An exceeded quota is ST_ERR_EXHAUSTED with a message naming the tenant, the
 * quota and the numbers ("tenant acme: memory quota 64.0 GiB, in use
 * 63.9 GiB, asked 42.0 KiB").
 */
typedef struct cd_tenant_quota {
    uint64_t memory_bytes, ssd_bytes, sessions, pins, leases, reservations, namespaces;
} cd_tenant_quota_t;

/* The resources of cd_tenant_quota_t in field order, as metrics name them. */
#define CD_TENANT_RESOURCES 7
extern const char *const cd_tenant_resource_names[CD_TENANT_RESOURCES];

typedef struct cd_tenant_usage {
    char tenant[CD_NAME_MAX + 1];
    cd_tenant_quota_t quota; /* the limits (0: none) */
    cd_tenant_quota_t used;  /* what the tenant uses of each, now */
} cd_tenant_usage_t;

/*
 * Sets (replaces) the quotas of tenant, creating its record if it has none
 * yet. May be called at any time (a reload of the tenants file): a lower
 * quota refuses new use above it at once, and the tenant's DRAM above a
 * lowered memory quota is the first that eviction takes. Nothing already
 * held is taken away otherwise. Returns ST_OK; ST_ERR_INVALID (tenant NULL,
 * empty or above CD_NAME_MAX bytes, or q NULL); ST_ERR_NOMEM.
 * Thread-safe.
 */
st_status_t cd_store_tenant_set(cd_store_t *s, const char *tenant, const cd_tenant_quota_t *q,
                                cd_err_t *err);

/*
 * Parses quota fields as a tenants-file line carries them, separated by
 * spaces (or commas): memory=<size> ssd=<size> sessions=<n> pins=<n> leases=<n>
 * reservations=<n> namespaces=<n> (sizes with K, M, G, T: binary); fields
 * left out are 0 (no limit). *q is written on success only. Returns ST_OK or
 * ST_ERR_INVALID with a message naming the field. Pure; thread-safe.
 */
st_status_t cd_tenant_quota_parse(const char *fields, cd_tenant_quota_t *q, cd_err_t *err);

/* Copies tenant's quotas and use into *out. ST_OK or ST_ERR_NOT_FOUND (no
 * record: no namespace and no quota yet). Thread-safe. */
st_status_t cd_store_tenant_usage(cd_store_t *s, const char *tenant, cd_tenant_usage_t *out);

/* Copies up to cap tenants' records into out, in the order they were made,
 * and returns how many there are (call with cap 0 to size). Thread-safe. */
size_t cd_store_tenants(cd_store_t *s, cd_tenant_usage_t *out, size_t cap);

/*
 * The SSD tier's accounting of the ssd quota. Check: whether bytes more for
 * namespace ns_id's tenant fit its ssd quota: ST_OK, or ST_ERR_EXHAUSTED with
 * the quota message (nothing is charged either way); ST_ERR_NOT_FOUND for an
 * unknown namespace. Add: what the tier now holds for the namespace changed
 * by delta bytes (written +, removed -; the total never goes below 0).
 * Thread-safe and lock-free: the store's evicted hook and the tier's writer
 * thread may call them.
 */
st_status_t cd_store_tenant_ssd_check(cd_store_t *s, uint32_t ns_id, uint64_t bytes, cd_err_t *err);
void cd_store_tenant_ssd_add(cd_store_t *s, uint32_t ns_id, int64_t delta);

/*
 * Sessions, named by a 16-byte id. Open creates the record (id NULL: the
 * store picks an id) with length 0, or reopens an existing one, restarting
 * its TTL (and setting it, when ttl_ms is not 0); *out gets the record.
 * A TTL of 0 means the default; above session_ttl_max_ms is ST_ERR_INVALID.
 * Append moves the head and the length (which may not shrink:
 * ST_ERR_INVALID), bumps the version and restarts the TTL; with
 * expected_version != 0 it first checks the version (ST_ERR_BUSY on a
 * mismatch, so two writers cannot both extend the same turn). Get copies the
 * record; Close deletes it. The reaper deletes records not updated for their
 * TTL. Returns ST_OK, ST_ERR_NOT_FOUND (ns or id), ST_ERR_INVALID,
 * ST_ERR_BUSY, ST_ERR_EXHAUSTED (max_sessions or memory), ST_ERR_NOMEM.
 */
st_status_t cd_store_session_open(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                  uint64_t ttl_ms, cd_session_t *out, cd_err_t *err);
st_status_t cd_store_session_append(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                    const st_hash_t *head, uint64_t length,
                                    uint64_t expected_version, cd_session_t *out, cd_err_t *err);
st_status_t cd_store_session_get(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                 cd_session_t *out);
st_status_t cd_store_session_close(cd_store_t *s, uint32_t ns_id, const st_hash_t *id);

/*
 * Recovery: puts a session record back as it was stored (id, head, length,
 * version, ttl, created and updated times on the store's clock), replacing
 * one with the same id. rec->ns_id is ignored. Returns ST_OK,
 * ST_ERR_NOT_FOUND (ns), ST_ERR_INVALID, ST_ERR_EXHAUSTED, ST_ERR_NOMEM.
 */
st_status_t cd_store_session_restore(cd_store_t *s, uint32_t ns_id, const cd_session_t *rec,
                                     cd_err_t *err);

/* What one cd_store_reap() pass did. */
typedef struct cd_reaped {
    uint64_t reservations, leases, sessions, trimmed_bytes, pins;
} cd_reaped_t;

/*
 * Expires reservations (freeing their extents), leases, pins and sessions whose
 * time is at or before now_ms, and gives back arena chunks that are wholly
 * free (keeping one free chunk per namespace), in every namespace. Call it periodically (every 100 ms or so) from
 * one thread. out may be NULL.
 */
void cd_store_reap(cd_store_t *s, uint64_t now_ms, cd_reaped_t *out);

/* Calls fn for every region (committed chunk) of namespace ns_id, in
 * region order, with the namespace lock held (fn must not call the store):
 * what a Hello answer lists. Regions added later are announced through
 * region_added. Does nothing for an unknown namespace. */
void cd_store_regions(cd_store_t *s, uint32_t ns_id, cd_store_region_fn fn, void *ctx);

/* One size class of a namespace's slab allocator (size 0: large extents,
 * counted in pages and extents). */
typedef struct cd_class_stats {
    uint32_t size;   /* bytes per extent; 0 for large extents */
    uint64_t pages;  /* pages the class holds */
    uint64_t used;   /* extents in use */
    uint64_t allocs; /* over the namespace's life (large: not counted) */
    uint64_t frees;
} cd_class_stats_t;

/* Copies up to cap class records of namespace ns_id into out (the classes in
 * size order, then the large extents) and returns how many there are in all
 * (call with cap 0 to size the array); 0 for an unknown namespace. */
size_t cd_store_class_stats(cd_store_t *s, uint32_t ns_id, cd_class_stats_t *out, size_t cap);

/* Snapshot of the counters of one namespace (ns_id != 0) or of all
 * (ns_id == 0). Returns ST_OK or ST_ERR_NOT_FOUND. */
st_status_t cd_store_stats(cd_store_t *s, uint32_t ns_id, cd_stats_t *out);

/* The store's clock, in ms. */
uint64_t cd_store_now(const cd_store_t *s);

/* XXH3-64 of bytes, as objects use it. */
uint64_t cd_checksum(const void *data, size_t len);

#endif /* STRATA_CACHED_STORE_H */
