/*
 * srpc_internal.h - what the files of rpc/ share and nobody else uses.
 */
#ifndef STRATA_SRPC_INTERNAL_H
#define STRATA_SRPC_INTERNAL_H

#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "srpc.h"

/* grpc_init() plus, on the first call, strata's gRPC log bridge. */
void srpc_grpc_ref(void);

/* grpc_shutdown(): one per srpc_grpc_ref(). */
void srpc_grpc_unref(void);

/* The largest TCP read buffer gRPC may allocate (servers and channels). */
#define SRPC_TCP_MAX_READ_CHUNK (64 * 1024)

/* Sets *arg to the channel argument that caps gRPC's TCP read buffers. */
void srpc_tcp_read_arg(grpc_arg *arg);

/* Sets *arg to the integer channel argument key = value (key: a GRPC_ARG_* constant). */
void srpc_int_arg(grpc_arg *arg, const char *key, int value);

/* Returns a monotonic gRPC deadline timeout_ms from now (<= 0: infinite). */
gpr_timespec srpc_deadline_from_ms(int timeout_ms);

/* Monotonic nanoseconds. */
uint64_t srpc_now_ns(void);

/* Copies the bytes of a byte buffer into one malloc'd block (NULL on ENOMEM). */
st_status_t srpc_bb_read(grpc_byte_buffer *bb, uint8_t **data_p, size_t *len_p);

/*
 * Sets *data_p to the bytes of bb in one piece without allocating: the slice
 * itself when bb is one slice, else a copy in the calling thread's scratch
 * block. Valid until the next srpc_bb_view() on this thread or until bb is
 * destroyed. Call srpc_bb_view_done() when done (it drops an oversized
 * scratch block). ST_ERR_PROTOCOL when bb does not decompress; ST_ERR_NOMEM.
 */
st_status_t srpc_bb_view(grpc_byte_buffer *bb, const uint8_t **data_p, size_t *len_p);
void srpc_bb_view_done(void);

/*
 * The calling thread's pluck completion queue for its client calls, created
 * on first use (holding a gRPC reference) and destroyed when the thread
 * exits; NULL on ENOMEM. Only this thread may pluck it; every call it starts
 * there must be plucked before the thread starts waiting on another.
 */
grpc_completion_queue *srpc_thread_cq(void);

/*
 * The calling thread's retained arena block (NULL, *cap_p 0 when none); the
 * thread holds none until srpc_arena_give() hands one back (kept when no
 * larger than the keep limit, else freed).
 */
void *srpc_arena_take(size_t *cap_p);
void srpc_arena_give(void *block, size_t cap);

/*
 * Packs msg into a new byte buffer (*bb_p): messages of 4 KiB and more go
 * into the calling thread's send buffer, which gRPC borrows until it has sent
 * them. ST_ERR_NOMEM on failure.
 */
st_status_t srpc_bb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **bb_p);

/* Copies a slice into dst[0..cap) NUL-terminated (truncating). */
void srpc_slice_to_str(grpc_slice slice, char *dst, size_t cap);

/*
 * tls.c: checks PEM material with OpenSSL (every certificate parses, the key
 * parses and matches the first certificate; any argument may be NULL) and
 * logs what is wrong. ST_ERR_INVALID.
 */
st_status_t srpc_tls_check(const char *cert_pem, const char *key_pem, const char *ca_pem);

/* tls.c: a channel's credentials, insecure or TLS from cfg (may be NULL). */
st_status_t srpc_tls_channel_creds(const char *target, const srpc_channel_config_t *cfg,
                                   grpc_channel_credentials **creds_p);

/* client.c: the gRPC channel under ch (stream.c opens its calls on it). */
grpc_channel *srpc_channel_grpc(srpc_channel_t *ch);

/* Latency bucket of a duration in microseconds. */
unsigned srpc_latency_bucket(uint64_t us);

/* Finds a valid SRPC_RETRY_AFTER_KEY among md: 1 with *ms_p set, else 0. */
int srpc_retry_hint_find(const grpc_metadata_array *md, uint32_t *ms_p);
/* The value of strata-ring-epoch in md (decimal, at most 19 digits); 0 when absent or not one. */
uint64_t srpc_ring_epoch_find(const grpc_metadata_array *md);

#endif /* STRATA_SRPC_INTERNAL_H */
