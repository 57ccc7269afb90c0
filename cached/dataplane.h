/*
 * dataplane.h - stratad's side of the one-sided data plane (ARCHITECTURE §8):
 * the transport, the arena chunks it allocates and registers, their remote
 * keys for Hello, and the progress thread.
 *
 * Each arena chunk of each namespace is allocated with
 * tp_mem_alloc() when the arena grows (registered once, never per
 * request) and deregistered when the arena gives it back; its packed remote
 * key reaches clients through Hello. A key covers one chunk of one
 * namespace's arena, nothing else.
 *
 * The progress thread drives the transport (sleeping on its event fd, or in
 * short sleeps where there is none), so targets that need the daemon's CPU
 * (UCX over TCP, libfabric tcp;ofi_rxm and shm) work without touching the
 * gRPC workers.
 *
 * Thread safety: every function may be called from any thread; one mutex
 * serialises the transport (it belongs to one thread at a time). The chunk
 * callbacks run with a namespace lock held and take only that mutex.
 */
#ifndef STRATA_CACHED_DATAPLANE_H
#define STRATA_CACHED_DATAPLANE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

typedef struct cd_dataplane cd_dataplane_t;

/*
 * Creates the data plane for kind "none", "ucx" or "libfabric" (provider:
 * the libfabric provider, "" or NULL for the first with RMA). "none" writes
 * NULL to *dp_p. When the transport cannot start, logs a warning and writes
 * NULL too (the daemon then serves inline Put/Get only).
 * Returns ST_OK, ST_ERR_INVALID (unknown kind), ST_ERR_NOMEM.
 */
st_status_t cd_dp_create(const char *kind, const char *provider, cd_dataplane_t **dp_p);

/* Stops the progress thread and destroys the transport. After the store
 * (whose chunks it frees) is gone. NULL is ignored. */
void cd_dp_destroy(cd_dataplane_t *dp);

/* The store's chunk allocator (cd_store_config_t.chunk_alloc/chunk_free),
 * ctx = the data plane. */
st_status_t cd_dp_chunk_alloc(void *ctx, uint32_t ns_id, uint32_t region, size_t len,
                              void **base_p);
void cd_dp_chunk_free(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len);

/*
 * Serves Locate, Release and Lookup that arrive over the transport
 * (docs/protocol.md, "Calls over the transport") with srv's handlers, on the
 * progress thread; srv NULL stops serving them (waits for a call being
 * served: call it before srv is destroyed). Returns 1 when calls are served
 * now, 0 when not (srv NULL, dp NULL, or a backend without messages).
 */
typedef struct srpc_server srpc_server_t;
int cd_dp_serve_calls(cd_dataplane_t *dp, srpc_server_t *srv);

/*
 * 1 while dp serves calls over the transport (Hello says so). key is unused
 * (NULL): every Hello draws its own key (auth.h, cd_au_key_issue); a call
 * presents it in its frame, the server's authenticate callback gets it as
 * the call's token (hex) and serves the call as the principal of that
 * Hello; an unknown key is refused with UNAUTHENTICATED.
 */
#define CD_DP_CALL_KEY 16
int cd_dp_serves_calls(cd_dataplane_t *dp, uint8_t *key);

/* The protocol's TransportKind of dp (0, TRANSPORT_NONE, for NULL). */
int cd_dp_kind(const cd_dataplane_t *dp);

/*
 * Copies the transport address into memory from alloc(actx, len). Returns
 * ST_OK, ST_ERR_NOT_FOUND (dp NULL), ST_ERR_NOMEM.
 */
st_status_t cd_dp_address(cd_dataplane_t *dp, void *(*alloc)(void *actx, size_t len), void *actx,
                          uint8_t **data_p, size_t *len_p);

/*
 * Copies the packed remote key of region of namespace ns_id into memory from
 * alloc(actx, len). Returns ST_OK, ST_ERR_NOT_FOUND (no such registered
 * region, or dp NULL), ST_ERR_NOMEM.
 */
st_status_t cd_dp_rkey(cd_dataplane_t *dp, uint32_t ns_id, uint32_t region,
                       void *(*alloc)(void *actx, size_t len), void *actx, uint8_t **data_p,
                       size_t *len_p);

/*
 * 1 when dp's transport refuses, at this daemon, writes through a read-only
 * key and through a revoked key (tp_enforces_access()): arena
 * chunks are then registered for remote read only, and each reservation's
 * extent gets its own write key (cd_dp_write_key()), revoked when the
 * reservation ends. 0 for NULL and for transports that enforce nothing
 * (UCX): chunks are registered read-write, clients write through the
 * region keys, and readers must verify checksums (Hello's
 * committed_read_only; docs/security.md).
 */
int cd_dp_committed_read_only(const cd_dataplane_t *dp);

/*
 * Registers the extent [offset, offset + len) of region of namespace ns_id
 * for remote write as reservation resv_id's write key, and copies its packed
 * remote key into memory from alloc(actx, len). The key lives until
 * cd_dp_resv_end() for the same reservation. Returns ST_OK;
 * ST_ERR_UNSUPPORTED when dp is NULL or does not enforce access (no write
 * keys: clients write through the region key); ST_ERR_INTERNAL (the extent
 * is not inside a registered region; logged); ST_ERR_NOMEM;
 * ST_ERR_TRANSPORT.
 */
st_status_t cd_dp_write_key(cd_dataplane_t *dp, uint32_t ns_id, uint64_t resv_id, uint32_t region,
                            uint64_t offset, uint64_t len, void *(*alloc)(void *actx, size_t len),
                            void *actx, uint8_t **data_p, size_t *len_p);

/*
 * The store's resv_end callback (ctx = the data plane): deregisters the
 * write key of reservation resv_id of ns_id, if it has one. Runs with the
 * namespace lock held, takes only dp's lock. The transport's progress runs
 * under the same lock, so when this returns the target refuses every later
 * write through the key (a fence, before the extent is checksummed or
 * reused). Unknown reservations are ignored.
 */
void cd_dp_resv_end(void *ctx, uint32_t ns_id, uint64_t resv_id);

/* The number of write keys alive (tests). 0 for NULL. */
size_t cd_dp_write_keys(cd_dataplane_t *dp);

#endif /* STRATA_CACHED_DATAPLANE_H */
