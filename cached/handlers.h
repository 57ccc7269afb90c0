/*
 * handlers.h - helpers shared by the strata.v1.Cache handlers: the daemon of
 * a call, authentication, namespace resolution, key and status conversion,
 * and arena-backed response building.
 */
#ifndef STRATA_CACHED_HANDLERS_H
#define STRATA_CACHED_HANDLERS_H

#include "daemon.h"
#include "strata.pb-c.h"

/* The daemon serving this call. */
static inline cd_daemon_t *cd_h_daemon(srpc_ctx_t *ctx)
{
    return srpc_ctx_server_arg(ctx);
}

/* Checks a batch size against max_batch (ST_ERR_INVALID, message set). */
static inline st_status_t cd_h_batch_limit(srpc_ctx_t *ctx, cd_daemon_t *d, size_t n,
                                           const char *what)
{
    if (n > (size_t)d->cfg.max_batch) {
        srpc_ctx_set_error(ctx, "%zu %s exceed max_batch=%lld", n, what,
                           (long long)d->cfg.max_batch);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* The cost of one key of a Get or Put besides its bytes, for cd_h_slice(). */
#define CD_H_KEY_COST 512

/*
 * Bounded slices (docs/daemon.md, "Fairness and admission"): counts bytes of work done by a
 * long call into *done; past slice_bytes, lets one waiting call of another flow run
 * (srpc_ctx_yield) and starts the next slice. Call it between keys, holding no lock.
 */
static inline void cd_h_slice(srpc_ctx_t *ctx, const cd_daemon_t *d, uint64_t *done, uint64_t bytes)
{
    *done += bytes + CD_H_KEY_COST;
    if (d->cfg.slice_bytes != 0 && *done >= d->cfg.slice_bytes) {
        *done = 0;
        (void)srpc_ctx_yield(ctx);
    }
}

/*
 * Checks the caller: with an auth_token configured, the call must carry it;
 * without one, protected mode refuses callers that are not on loopback.
 * Returns ST_OK or ST_ERR_PERMISSION (message set).
 */
st_status_t cd_h_auth(srpc_ctx_t *ctx, cd_daemon_t *d);

/* Auth + the namespace of wire id; ST_ERR_NOT_FOUND names the id. */
st_status_t cd_h_ns(srpc_ctx_t *ctx, cd_daemon_t *d, uint64_t wire_id, cd_ns_entry_t **e_p);

/* Maps a protocol ObjectKind to the store's kind; -1 for an invalid one. */
int cd_h_kind(Strata__V1__ObjectKind kind);

/* Converts a key; returns ST_ERR_INVALID for a bad hash length, kind or layer. */
st_status_t cd_h_key(const Strata__V1__ObjectKey *k, cd_key_t *out);

/* Appends the cells of a grid to keys[*n..cap); ST_ERR_INVALID on a bad grid. */
st_status_t cd_h_grid(srpc_ctx_t *ctx, const Strata__V1__KeyGrid *g, cd_key_t *keys, size_t *n,
                      size_t cap);

/* Reads a request's keys, then its grid's cells, into keys (room for cap;
 * *n_p: how many). A bad key is ST_ERR_INVALID naming it (detailed: with
 * what a key must be); a bad grid as cd_h_grid (handlers_data.c). */
st_status_t cd_h_read_keys(srpc_ctx_t *ctx, Strata__V1__ObjectKey *const *in, size_t n_in,
                           const Strata__V1__KeyGrid *grid, int detailed, cd_key_t *keys,
                           size_t cap, size_t *n_p);

/* Number of cells of a grid (0 for NULL). */
size_t cd_h_grid_cells(const Strata__V1__KeyGrid *g);

/* Maps a store status to a per-key status. */
Strata__V1__KeyStatus cd_h_key_status(st_status_t status);

/* Allocates an initialised Locations with n entries in every column. NULL: no memory. */
Strata__V1__Locations *cd_h_locations(srpc_ctx_t *ctx, size_t n);

/* Fills entry i of a Locations table. */
void cd_h_location_set(Strata__V1__Locations *l, size_t i, Strata__V1__ObjectState state,
                       const cd_location_t *where);

/* Parses packed hashes (n x 16 bytes); NULL with a message for a bad length. */
const st_hash_t *cd_h_hashes(srpc_ctx_t *ctx, const ProtobufCBinaryData *b, size_t *n_p,
                             const char *field);

/*
 * Checks what a Lookup or ClusterLookup asks of the blocks: layers each below
 * CD_LAYERS_MAX and none twice (a location per block x kind x layer is
 * answered), layers given when locations of KV or IDX are wanted, lease_ms
 * within max_lease. Returns ST_OK or ST_ERR_INVALID with the message set.
 */
st_status_t cd_h_lookup_check(srpc_ctx_t *ctx, cd_daemon_t *d, const uint32_t *layers,
                              size_t n_layers, uint32_t kinds_mask, int want_loc,
                              uint32_t lease_ms);

/* Returns the handler's error for a store failure, with the store's message. */
st_status_t cd_h_fail(srpc_ctx_t *ctx, st_status_t status, const cd_err_t *err);

/*
 * The store asked with the SSD tier behind it (handlers_promote.c;
 * docs/tiers.md, "In stratad", Promote). ask(arg) asks the store and
 * returns its status. After an answer (ST_OK, or ST_ERR_NOT_FOUND for a
 * one-key ask), promote(arg, status) promotes what it missed that the tier
 * may hold (cd_tier_promote) and returns how many objects came back. The
 * store is asked again while something came back or a promotion finished
 * meanwhile (cd_tier_generation moved: another call's, or one of this
 * call's that did not fit in DRAM and left its object in the tier), at most
 * CD_H_PROMOTE_ROUNDS times: a chain may alternate between the tiers, as
 * promotions into a full DRAM evict. An ask that repeats must release what
 * the one before took (a lease). Without a tier the store is asked once.
 * Returns the last ask's status.
 */
#define CD_H_PROMOTE_ROUNDS 16

typedef struct cd_h_ask {
    st_status_t (*ask)(void *arg);
    int (*promote)(void *arg, st_status_t asked);
    void *arg;
} cd_h_ask_t;

st_status_t cd_h_ask_promoting(cd_daemon_t *d, const cd_h_ask_t *a);

/* Handlers of strata.v1.Cache (handlers_*.c). */
st_status_t cd_h_hello(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_lookup(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_locate(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_reserve(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_commit(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_abort(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_release(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_put(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_get(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_delete(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_pin(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_unpin(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_session_open(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_session_append(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_session_get(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_session_close(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_stats(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_cluster_lookup(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_score(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_replicate(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);
st_status_t cd_h_drain(srpc_ctx_t *, const ProtobufCMessage *, ProtobufCMessage *, void *);

/* The rebalancer's catalog (handlers_rebal.c): a KDA object stored with its
 * link (moved when members change if the link names its placement), a
 * session record stored. */
void cd_h_note_kda(cd_daemon_t *d, const cd_ns_entry_t *e, const cd_key_t *key,
                   const Strata__V1__BlockLink *link);
void cd_h_note_session(cd_daemon_t *d, const cd_ns_entry_t *e, const st_hash_t *id);

#endif /* STRATA_CACHED_HANDLERS_H */
