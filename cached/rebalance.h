/*
 * rebalance.h - moving durable objects when members change (issue #23;
 * docs/daemon.md "Membership changes").
 *
 * The rebalancer keeps a catalog of the durable objects this node holds: the
 * KDA objects whose writer named their placement (BlockLink.placement, the
 * hash the ring places their segment by) and the session records (placed by
 * their id). On every ring change (cd_members_apply) its worker thread walks
 * the catalog and, for each object, compares its replica set under the ring
 * of the last completed pass (old) with the one under the current ring
 * (new):
 *   - the pusher is the first member of the old set that is still a member
 *     (so a copy is sent once, not R times), or this node when it left the
 *     ring (a drain pushes everything itself);
 *   - the pusher sends a copy (Replicate, with the cluster credential: bytes,
 *     parent, placement and checksum; tenant and namespace kept) to each
 *     member of the new set that was not in the old one, and to every member
 *     of the new set when it is itself leaving the set;
 *   - a node that is not in the new set drops its copy only after every
 *     member of the new set acknowledged it (the pusher: its pushes; the
 *     others: a check_only Replicate that asks whether each is held);
 *   - failures are retried (every retry_ms) until the pass completes; only
 *     then does the new ring become the old one of the next pass.
 * Pushes are batched per target and namespace and paced to rate bytes/s.
 *
 * Thread safety: every function may be called from any thread; the catalog
 * has its own mutex (never held across a call to a peer or the store).
 */
#ifndef STRATA_CACHED_REBALANCE_H
#define STRATA_CACHED_REBALANCE_H

#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

struct cd_daemon;
typedef struct cd_rb cd_rb_t;

/* What the rebalancer did (metrics, Stats, `strata status`). */
typedef struct cd_rb_stats {
    uint64_t catalog;      /* durable objects this node holds and can move */
    uint64_t pending;      /* of those, still to be moved or acknowledged in this pass */
    uint64_t objects;      /* copies pushed and acknowledged, since start */
    uint64_t bytes;        /* their payload bytes */
    uint64_t failed;       /* pushes that failed (retried) */
    uint64_t dropped;      /* local copies dropped after the new replicas acknowledged */
    uint64_t passes;       /* passes completed */
    uint64_t epoch;        /* the ring epoch of the last completed pass */
    uint64_t last_pass_ms; /* how long the last completed pass took */
} cd_rb_stats_t;

/*
 * Creates the rebalancer of d and starts its worker, with the ring of d's
 * current view as the old ring. rate: bytes per second of pushes (0:
 * unbounded). Returns ST_OK, ST_ERR_NOMEM or ST_ERR_INTERNAL (no thread).
 */
st_status_t cd_rb_create(struct cd_daemon *d, uint64_t rate, cd_rb_t **rb_p);

/* Stops the worker (a push in flight finishes) and frees the catalog. NULL ok. */
void cd_rb_destroy(cd_rb_t *rb);

/* Tells the worker that the ring changed. NULL ok. */
void cd_rb_wake(cd_rb_t *rb);

/*
 * Records a durable object held here: a KDA object (kind CD_KIND_KDA, id its
 * block hash, layer its slot, parent its parent hash or NULL for a root,
 * placement its segment's first block hash) or a session record (kind
 * CD_KIND_SESSION, id the session id, placement NULL: the id). A second note
 * of the same object replaces the first. Returns ST_OK or ST_ERR_NOMEM
 * (logged: the object is stored but will not be moved).
 */
st_status_t cd_rb_note(cd_rb_t *rb, uint64_t wire_ns, uint32_t kind, const st_hash_t *id,
                       uint32_t layer, const st_hash_t *parent, const st_hash_t *placement);

/* Forgets an object (deleted, session closed). */
void cd_rb_forget(cd_rb_t *rb, uint64_t wire_ns, uint32_t kind, const st_hash_t *id,
                  uint32_t layer);

/* A snapshot of the counters. */
void cd_rb_stats(cd_rb_t *rb, cd_rb_stats_t *out);

/*
 * Waits until a pass over a ring of epoch at least `epoch` completed with
 * nothing pending, or timeout_ms passed. Returns ST_OK or ST_ERR_TIMEOUT.
 */
st_status_t cd_rb_wait(cd_rb_t *rb, uint64_t epoch, uint64_t timeout_ms);

#endif /* STRATA_CACHED_REBALANCE_H */
