/*
 * common.c - gRPC library references, its log bridge, and small helpers for
 * byte buffers, slices and deadlines shared by the server and the client.
 */
#include "srpc_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>

#include "st_log.h"

const uint64_t srpc_latency_bounds_us[SRPC_LATENCY_BUCKETS - 1] = {
    10,    25,    50,    100,    250,    500,    1000,    2500,    5000,
    10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000,
};

static pthread_once_t srpc_log_once = PTHREAD_ONCE_INIT;

/* gRPC's own log lines go through strata's logger, one level quieter. */
static void srpc_gpr_log(gpr_log_func_args *args)
{
    const char *file = args->file ? strrchr(args->file, '/') : NULL;

    file = file ? file + 1 : (args->file ? args->file : "?");
    switch (args->severity) {
    case GPR_LOG_SEVERITY_ERROR:
        st_log_ratelimited(ST_LOG_WARN, "grpc: %s src=%s:%d", args->message, file, args->line);
        break;
    case GPR_LOG_SEVERITY_INFO:
        st_debug("grpc: %s src=%s:%d", args->message, file, args->line);
        break;
    default: st_trace("grpc: %s src=%s:%d", args->message, file, args->line); break;
    }
}

static atomic_bool srpc_process_ref;

/*
 * The first use takes a reference on gRPC for the life of the process, on top
 * of the reference each server and channel holds: gRPC's full clean-up, run
 * when the last reference goes, can block for seconds (observed: 10 s under
 * ASan), and a client that closes its last channel and opens another must
 * not pay for it. srpc_library_shutdown() drops it.
 */
static void srpc_log_setup(void)
{
    gpr_set_log_function(srpc_gpr_log);
    grpc_init();
    atomic_store(&srpc_process_ref, true);
}

void srpc_library_shutdown(void)
{
    if (atomic_exchange(&srpc_process_ref, false)) {
        grpc_shutdown();
    }
}

void srpc_grpc_ref(void)
{
    pthread_once(&srpc_log_once, srpc_log_setup);
    grpc_init();
}

void srpc_grpc_unref(void)
{
    grpc_shutdown();
}

gpr_timespec srpc_deadline_from_ms(int timeout_ms)
{
    if (timeout_ms <= 0) {
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    }
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

uint64_t srpc_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

st_status_t srpc_bb_read(grpc_byte_buffer *bb, uint8_t **data_p, size_t *len_p)
{
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    size_t len, off = 0;
    uint8_t *data;

    if (!grpc_byte_buffer_reader_init(&reader, bb)) {
        return ST_ERR_PROTOCOL; /* undecompressable */
    }
    len = grpc_byte_buffer_length(reader.buffer_out);
    data = malloc(len ? len : 1);
    if (data == NULL) {
        grpc_byte_buffer_reader_destroy(&reader);
        return ST_ERR_NOMEM;
    }
    while (grpc_byte_buffer_reader_next(&reader, &slice)) {
        size_t n = GRPC_SLICE_LENGTH(slice);

        if (off + n > len) { /* cannot happen; never overrun */
            n = len - off;
        }
        memcpy(data + off, GRPC_SLICE_START_PTR(slice), n);
        off += n;
        grpc_slice_unref(slice);
    }
    grpc_byte_buffer_reader_destroy(&reader);
    *data_p = data;
    *len_p = off;
    return ST_OK;
}

st_status_t srpc_bb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **bb_p)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(len);
    grpc_byte_buffer *bb;

    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    if (bb == NULL) {
        return ST_ERR_NOMEM;
    }
    *bb_p = bb;
    return ST_OK;
}

void srpc_slice_to_str(grpc_slice slice, char *dst, size_t cap)
{
    size_t n = GRPC_SLICE_LENGTH(slice);

    if (cap == 0) {
        return;
    }
    if (n >= cap) {
        n = cap - 1;
    }
    memcpy(dst, GRPC_SLICE_START_PTR(slice), n);
    dst[n] = '\0';
}

unsigned srpc_latency_bucket(uint64_t us)
{
    unsigned i;

    for (i = 0; i < SRPC_LATENCY_BUCKETS - 1; i++) {
        if (us <= srpc_latency_bounds_us[i]) {
            return i;
        }
    }
    return SRPC_LATENCY_BUCKETS - 1;
}
