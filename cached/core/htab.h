/*
 * htab.h - the daemon's open-addressing hash table, keyed by a 16-byte hash
 * plus a 32-bit tag, mapping to a pointer.
 *
 * One implementation serves every index of a namespace: block hash -> block,
 * (block hash, kind, layer) -> object, lease id -> lease, session id ->
 * session. The tag keeps key spaces apart when they share a table.
 *
 * Linear probing over a power-of-two array, at most 3/4 full; deletion
 * shifts the following entries back, so there are no tombstones and a probe
 * stops at the first empty slot. The table grows by doubling; growth is the
 * only allocation and happens in cd_htab_reserve(), so that a caller can make
 * room (and evict if the memory budget says no) before it touches its index,
 * and cd_htab_insert() after a successful reserve never allocates.
 *
 * Memory is charged to the budget given at init (see arena.h).
 *
 * Thread safety: none; the owner (a namespace) serialises every call.
 */
#ifndef STRATA_CACHED_HTAB_H
#define STRATA_CACHED_HTAB_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

struct cd_budget;

typedef struct cd_htab_entry {
    st_hash_t key;
    uint32_t tag;
    uint32_t used; /* 1 when the slot holds an entry */
    void *value;
} cd_htab_entry_t;

typedef struct cd_htab {
    cd_htab_entry_t *ht_slots;
    size_t ht_cap; /* a power of two, or 0 before the first reserve */
    size_t ht_count;
    struct cd_budget *ht_budget; /* may be NULL: nothing is charged */
} cd_htab_t;

/* Makes an empty table that allocates nothing yet. budget may be NULL. */
void cd_htab_init(cd_htab_t *t, struct cd_budget *budget);

/* Frees the slots (not the values) and uncharges the budget. */
void cd_htab_destroy(cd_htab_t *t);

/*
 * Ensures that n more entries can be inserted without allocating.
 * Returns ST_OK, ST_ERR_EXHAUSTED when the budget refuses the bigger array,
 * or ST_ERR_NOMEM when malloc fails; the table is unchanged on error.
 */
st_status_t cd_htab_reserve(cd_htab_t *t, size_t n);

/* Returns the value stored under (key, tag), or NULL. */
void *cd_htab_find(const cd_htab_t *t, const st_hash_t *key, uint32_t tag);

/*
 * Inserts (key, tag) -> value. The key must not be present. Returns ST_OK,
 * or what cd_htab_reserve(t, 1) returns when the table is full (never
 * allocates after a successful reserve covering this insert).
 */
st_status_t cd_htab_insert(cd_htab_t *t, const st_hash_t *key, uint32_t tag, void *value);

/* Removes (key, tag) and returns its value, or NULL if absent. */
void *cd_htab_remove(cd_htab_t *t, const st_hash_t *key, uint32_t tag);

/* Bytes the table holds (the slot array). */
size_t cd_htab_bytes(const cd_htab_t *t);

/* Makes a key from a 64-bit id (lease, reservation, session ids). */
static inline st_hash_t cd_htab_id_key(uint64_t id)
{
    st_hash_t k = {{0}};

    for (int i = 0; i < 8; i++) {
        k.b[i] = (uint8_t)(id >> (8 * i));
    }
    return k;
}

#endif /* STRATA_CACHED_HTAB_H */
