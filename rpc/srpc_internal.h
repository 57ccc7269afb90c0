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

/* Returns a monotonic gRPC deadline timeout_ms from now (<= 0: infinite). */
gpr_timespec srpc_deadline_from_ms(int timeout_ms);

/* Monotonic nanoseconds. */
uint64_t srpc_now_ns(void);

/* Copies the bytes of a byte buffer into one malloc'd block (NULL on ENOMEM). */
st_status_t srpc_bb_read(grpc_byte_buffer *bb, uint8_t **data_p, size_t *len_p);

/* Packs msg into a new byte buffer (*bb_p). ST_ERR_NOMEM on failure. */
st_status_t srpc_bb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **bb_p);

/* Copies a slice into dst[0..cap) NUL-terminated (truncating). */
void srpc_slice_to_str(grpc_slice slice, char *dst, size_t cap);

/* Latency bucket of a duration in microseconds. */
unsigned srpc_latency_bucket(uint64_t us);

#endif /* STRATA_SRPC_INTERNAL_H */
