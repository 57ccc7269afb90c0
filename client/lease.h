/*
 * lease.h - the lease cache of the client's data plane: where an object
 * lies on its owner (region, offset, length), under a lease that this
 * client's clock bounds, so that later reads of it go straight to one-sided
 * gets without a Locate (client/dp_get.c).
 *
 * The cache is n_sets sets of SC_LC_WAYS entries, found by the object's
 * block hash, kind and layer; a full set replaces the entry whose lease
 * ends first. An entry keeps the object's row sums (malloc'd, owned by its
 * slot) so that rows read under it can be verified. Every function takes
 * the cache's lock: the cache is shared by the batches of every thread.
 */
#ifndef STRATA_CLIENT_LEASE_H
#define STRATA_CLIENT_LEASE_H

#include <pthread.h>
#include <stdint.h>

#include "strata/strata.h"

#define SC_LC_WAYS     8u
#define SC_LC_SETS     4096u         /* the data plane's cache */
#define SC_LC_MIN_LEFT 1000000000ull /* ns of lease a cached entry must have left */
/* A worker's row read locates again an entry with less than SC_LC_MIN_LEFT +
 * SC_LC_REFRESH left (taking a new lease), so that a periodic large batch
 * (the engine's warm-up) renews entries before reads on the calling thread
 * lose them. */
#define SC_LC_REFRESH  2000000000ull

typedef struct sc_lc_ent {
    st_hash_t hash;
    uint64_t gen; /* the node's generation when cached; 0: empty */
    uint64_t epoch, offset, length, expiry_ns;
    uint32_t node, region_id;
    uint16_t layer;
    uint8_t kind;
    uint32_t row_bytes; /* rows: the object's row size, which its sums are of */
    uint64_t n_sums;    /* rows: its row sums (group PR_ROW_GROUP), packed */
    uint8_t *sums;      /* malloc'd, owned by the slot; NULL: whole objects */
} sc_lc_ent_t;

typedef struct sc_lc {
    pthread_mutex_t lock;
    uint32_t n_sets;
    sc_lc_ent_t *ent; /* n_sets * SC_LC_WAYS */
} sc_lc_t;

/* Makes lc an empty cache of n_sets sets (at least 1). ST_ERR_NOMEM. */
st_status_t sc_lc_init(sc_lc_t *lc, uint32_t n_sets);
/* Frees lc's entries and their sums. */
void sc_lc_destroy(sc_lc_t *lc);

/*
 * The entry of the object (h, kind, layer) at node whose lease ends after
 * now + SC_LC_MIN_LEFT, copied into *out (out->sums is NULL: the slot keeps
 * its sums). With rows (a row read: rows->n_rows > 0), the entry is a hit
 * only if its sums cover those rows: their sums go into rsum (room for one
 * per row). Returns 1 on a hit, 0 otherwise.
 */
int sc_lc_find(sc_lc_t *lc, uint32_t node, const st_hash_t *h, uint8_t kind, uint16_t layer,
               uint64_t now, const st_get_op_t *rows, uint64_t *rsum, sc_lc_ent_t *out);

/* Stores *v: into the object's own entry, else an empty one, else the one
 * whose lease ends first. The cache takes v->sums (malloc'd or NULL). */
void sc_lc_put(sc_lc_t *lc, const sc_lc_ent_t *v);

/* Forgets the object's entry, if any. */
void sc_lc_drop(sc_lc_t *lc, const st_hash_t *h, uint8_t kind, uint16_t layer);

/* The sums of op's rows from an object's packed row sums, into rsum (room
 * for one per row of op); 0 when the sums do not cover them (another row
 * size, a row past them) or there is no room. */
int sc_rows_sums(const st_get_op_t *op, uint32_t row_bytes, const uint8_t *sums, uint64_t n_sums,
                 uint64_t *rsum);

#endif /* STRATA_CLIENT_LEASE_H */
