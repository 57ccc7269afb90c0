/*
 * store_internal.h - what the files of the storage core share: the
 * namespace, object, lease and session records. Not for other modules.
 *
 * Locking: every do_*() function and every field of cd_ns_t below ns_lock
 * needs ns_lock held. cd_store_t's namespace array is written under
 * ss_ns_lock and read without it (a slot is published once, never changed).
 */
#ifndef STRATA_CACHED_STORE_INTERNAL_H
#define STRATA_CACHED_STORE_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "store.h"

/* Tags of the per-namespace id table. */
#define ID_RESV    1u
#define ID_LEASE   2u
#define ID_SESSION 3u
#define ID_PIN     4u /* keyed by the block hash */

/* A tenant's resources, in cd_tenant_quota_t's field order. */
enum {
    CD_RES_MEMORY,
    CD_RES_SSD,
    CD_RES_SESSIONS,
    CD_RES_PINS,
    CD_RES_LEASES,
    CD_RES_RESERVATIONS,
    CD_RES_NAMESPACES,
    CD_RES_COUNT
};

/* One tenant's record (quota.c): shared by its namespaces, so the counters
 * are atomics changed under whichever namespace lock is held. Never freed
 * before the store. tn_quota[r] 0: no limit. */
typedef struct cd_tenant {
    char tn_name[CD_NAME_MAX + 1];
    _Atomic uint64_t tn_quota[CD_RES_COUNT];
    _Atomic uint64_t tn_used[CD_RES_COUNT];
} cd_tenant_t;

enum { OBJ_RESERVED = 1, OBJ_COMMITTED = 2 };

typedef struct cd_obj {
    cd_key_t ob_key;
    cd_extent_t ob_ext;
    uint64_t ob_len;
    uint64_t ob_checksum;
    uint64_t ob_created;
    int ob_state;
    cd_block_t *ob_block;             /* committed: its block */
    struct cd_obj *ob_next, *ob_prev; /* block's objects, or the reservation FIFO */
    uint64_t ob_resv_id;              /* reserved only */
    uint64_t ob_expires;
    int ob_has_parent;
    uint64_t ob_tiered; /* the SSD tier holds a copy (a hint, the tier's token; 0: none):
                           committed from it (kept) or written ahead of eviction */
    st_hash_t ob_parent;
    cd_block_t *ob_held[2]; /* while being written: its parent block and its own block,
                               held so that eviction cannot take them meanwhile */
    uint32_t ob_row_bytes;  /* row-major objects: bytes per row (0: none) */
    uint64_t ob_n_rowsum;   /* committed: row groups with a sum in ob_rowsum */
    uint8_t *ob_rowsum;     /* their sums, packed (proto/rowsum.h); NULL: none */
} cd_obj_t;

typedef struct cd_lease {
    uint64_t ls_id;
    uint64_t ls_expires;
    size_t ls_n;
    size_t ls_cap;
    cd_block_t **ls_blocks;
    struct cd_lease *ls_next, *ls_prev; /* expiry FIFO (one TTL per namespace) */
} cd_lease_t;

/* The pins of one block: how many, and when the last of them ends. */
typedef struct cd_pin {
    st_hash_t pn_hash;
    cd_block_t *pn_block;
    uint32_t pn_count;
    uint64_t pn_expires;
    struct cd_pin *pn_next, *pn_prev; /* expiry order */
} cd_pin_t;

typedef struct cd_sess {
    cd_session_t se_rec;
    struct cd_sess *se_next, *se_prev;
} cd_sess_t;

typedef struct cd_ns {
    struct cd_store *ns_store;
    uint32_t ns_id;
    char ns_tenant[CD_NAME_MAX + 1];
    char ns_model[CD_NAME_MAX + 1];
    uint32_t ns_block_tokens;
    st_hash_t ns_seed;
    cd_tenant_t *ns_tn; /* its tenant's record */
    pthread_mutex_t ns_lock;
    /* everything below needs ns_lock */
    cd_slab_t ns_slab;
    cd_radix_t ns_radix;
    cd_htab_t ns_objs; /* (hash, kind << 8 | layer) -> committed object */
    cd_htab_t ns_ids;  /* (id, ID_*) -> reservation, lease, session */
    cd_obj_t *ns_resv_head, *ns_resv_tail;
    cd_lease_t *ns_lease_head, *ns_lease_tail;
    cd_pin_t *ns_pin_head, *ns_pin_tail;
    cd_sess_t *ns_sess;
    uint64_t ns_next_id;
    cd_stats_t ns_st; /* counters kept live; derived fields filled at snapshot */
} cd_ns_t;

struct cd_store {
    cd_store_config_t ss_cfg;
    uint8_t ss_secret[256];
    cd_budget_t ss_budget;
    pthread_mutex_t ss_ns_lock;
    cd_ns_t **ss_ns; /* [max_namespaces], slot id-1 */
    _Atomic uint32_t ss_n_ns;
    pthread_mutex_t ss_tn_lock; /* the tenant array */
    cd_tenant_t **ss_tn;
    size_t ss_n_tn, ss_cap_tn;
};

/* The namespace of id, or NULL. */
cd_ns_t *cd_ns_get(cd_store_t *s, uint32_t ns_id);

/* Writes a message into err (if not NULL). Returns st. */
st_status_t cd_errf(cd_err_t *err, st_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Makes room for ns: evicts its least recently used evictable block, or,
 * when it has none, reclaims a chunk's worth of budget from another
 * namespace (do_reclaim_other). Returns 1 if anything was freed, else 0. */
int do_evict_one(cd_ns_t *ns);

/* Evicts ns's least recently used evictable block. Returns 1 if it did. */
int do_evict_local(cd_ns_t *ns);

/* --- tenants (quota.c) --- */

/* The record of tenant, made if there is none. NULL when out of memory.
 * Takes ss_tn_lock; call with no namespace lock held or with one. */
cd_tenant_t *cd_tenant_get(cd_store_t *s, const char *tenant, int create);

/* Charges n of resource r to t, or refuses with ST_ERR_EXHAUSTED and the
 * message when that would pass its quota (nothing charged). */
st_status_t cd_tenant_charge(cd_tenant_t *t, int r, uint64_t n, cd_err_t *err);
void cd_tenant_release(cd_tenant_t *t, int r, uint64_t n);

/* The quota message for t's resource r, asked n more. Returns ST_ERR_EXHAUSTED. */
st_status_t cd_tenant_exceeded(cd_tenant_t *t, int r, uint64_t n, cd_err_t *err);

/* Whether t uses more DRAM than its memory quota (a lowered one). */
int cd_tenant_over_memory(cd_tenant_t *t);

/* Makes room inside ns's tenant's memory quota for len more bytes, evicting
 * the tenant's own blocks (ns's first, then its other namespaces'). ns
 * locked. Returns ST_OK or ST_ERR_EXHAUSTED with the quota message. */
st_status_t do_tenant_room(cd_ns_t *ns, uint64_t len, cd_err_t *err);

/* Frees DRAM budget for ns from a namespace whose tenant is above its
 * memory quota (trylock, as do_evict_one's reclaim). ns locked. Returns 1 if
 * budget was freed. */
int do_reclaim_over_quota(cd_ns_t *ns);

/* Ends pins whose time is at or before now. Returns how many. */
uint64_t do_reap_pins(cd_ns_t *ns, uint64_t now);
void do_pins_destroy(cd_ns_t *ns);

/* Retries expr while it fails for memory and eviction frees something. */
#define CD_WITH_EVICTION(ns, st, expr)                           \
    do {                                                         \
        for (;;) {                                               \
            (st) = (expr);                                       \
            if ((st) != ST_ERR_EXHAUSTED || !do_evict_one(ns)) { \
                break;                                           \
            }                                                    \
        }                                                        \
    } while (0)

/* Exhaustion message with the numbers. */
st_status_t do_exhausted(cd_ns_t *ns, cd_err_t *err, const char *what, uint64_t requested);

/* Finds the record of id (tag ID_RESV, ID_LEASE) in namespace ns_id and
 * ends it with end(), under the namespace lock. Returns ST_OK, or
 * ST_ERR_NOT_FOUND for an unknown namespace or id. */
st_status_t cd_store_end_id(cd_store_t *s, uint32_t ns_id, uint64_t id, uint32_t tag,
                            void (*end)(cd_ns_t *ns, void *rec));

/* A new id for a reservation, lease or session (never 0). */
uint64_t do_next_id(cd_ns_t *ns);

/* Grants the lease over its ls_n blocks for lease_ms (CD_LEASE_DEFAULT: the
 * namespace default) from now, and files it in expiry order. */
void do_lease_grant(cd_ns_t *ns, cd_lease_t *lease, uint64_t now, uint64_t lease_ms);

/* Allocates a zeroed record of size bytes that will go into the id table:
 * makes room for it there and charges bytes of metadata to the budget,
 * evicting when memory is short. On failure gives back the one unit of the
 * tenant's resource r that the caller charged, and says what was refused
 * ("a lease", "a pin", "a session"). */
st_status_t do_record_alloc(cd_ns_t *ns, size_t size, uint64_t bytes, int r, const char *what,
                            void **rec_p, cd_err_t *err);

/* Allocates an empty lease record with room for cap blocks and reserves its
 * table slot, evicting if memory is short. */
st_status_t do_lease_alloc(cd_ns_t *ns, size_t cap, cd_lease_t **lease_p, cd_err_t *err);
void do_lease_free(cd_ns_t *ns, cd_lease_t *lease);

/* Computes a committing object's row sums (when it has ob_row_bytes) from
 * its ob_len bytes at src (NULL: its extent), and returns the XXH3-64 of
 * the same bytes, read once (cached/core/rowsum.c): a commit that compares that
 * with the client's checksum knows the sums are of the bytes it accepted,
 * even if a late write changes the extent meanwhile. An object left without
 * sums (no memory) is still served whole; its rows are read inline. */
uint64_t do_rowsum_compute(cd_ns_t *ns, cd_obj_t *o, const void *src);
void do_rowsum_free(cd_ns_t *ns, cd_obj_t *o);

/* --- objects (object.c), used by reserve.c and locate.c --- */

/* The name of an object kind (KV, IDX, KDA, SESSION, VIS); kind < CD_KIND_COUNT. */
const char *cd_kind_name(uint32_t kind);

/* The namespace of id, or ST_ERR_NOT_FOUND with the message. */
st_status_t cd_ns_find(cd_store_t *s, uint32_t ns_id, cd_ns_t **ns_p, cd_err_t *err);

/* cd_ns_find() for a call of n items ("keys in one locate"): ST_ERR_INVALID
 * with the message when its arrays are not given, or n is 0 or above
 * max_batch. */
st_status_t cd_ns_find_batch(cd_store_t *s, uint32_t ns_id, int given, size_t n, const char *what,
                             cd_ns_t **ns_p, cd_err_t *err);

/* Checks a key (kind, layer) and an object length against the limits;
 * ST_ERR_INVALID with the message. */
st_status_t cd_obj_check_key(const cd_ns_t *ns, const cd_key_t *key, cd_err_t *err);
st_status_t cd_obj_check_len(const cd_ns_t *ns, uint64_t len, cd_err_t *err);

/* Where o's bytes are, as Reserve and Locate answer (no row sums attached). */
void cd_obj_location(const cd_ns_t *ns, const cd_obj_t *o, cd_location_t *w);

/* Allocates an object record and its extent, evicting when memory is short,
 * and makes room in the object table and the tree for one insert; holds its
 * parent block and its own block meanwhile (ob_held, dropped by
 * do_obj_unhold). */
st_status_t do_obj_new(cd_ns_t *ns, const cd_key_t *key, const st_hash_t *parent, uint64_t len,
                       cd_obj_t **obj_p, cd_err_t *err);

/* Drops the holds of do_obj_new() and forgets them. */
void do_obj_unhold(cd_ns_t *ns, cd_block_t *held[2]);

/* Makes a committed object visible (its block, the object table, the
 * counters); room was made by do_obj_new() or again by the caller. */
void do_obj_attach(cd_ns_t *ns, cd_obj_t *o, uint64_t now);

/* Frees a committed object's extent and record (already out of every list). */
void do_obj_free(cd_ns_t *ns, cd_obj_t *o);

/* Expires reservations up to now. Returns how many. */
uint64_t do_reap_reservations(cd_ns_t *ns, uint64_t now);
uint64_t do_reap_sessions(cd_ns_t *ns, uint64_t now);
void do_sessions_destroy(cd_ns_t *ns);
void do_reservations_destroy(cd_ns_t *ns);

static inline uint32_t cd_obj_tag(const cd_key_t *k)
{
    return (k->kind << 8) | k->layer;
}

#endif /* STRATA_CACHED_STORE_INTERNAL_H */
