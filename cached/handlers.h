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

#endif /* STRATA_CACHED_HANDLERS_H */
