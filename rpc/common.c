/*
 * common.c - gRPC library references, its log bridge, and small helpers for
 * byte buffers, slices and deadlines shared by the server and the client, and
 * the per-thread buffers that keep large messages off fresh memory.
 */
#include "srpc_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>

#include "clock.h"
#include "log.h"

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
        lg_ratelimited(LG_WARN, "grpc: %s src=%s:%d", args->message, file, args->line);
        break;
    case GPR_LOG_SEVERITY_INFO:
        lg_debug("grpc: %s src=%s:%d", args->message, file, args->line);
        break;
    default: lg_trace("grpc: %s src=%s:%d", args->message, file, args->line); break;
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

static void srpc_tls_drop_cq(void);

void srpc_library_shutdown(void)
{
    srpc_tls_drop_cq(); /* the calling thread's queue holds a reference too */
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

void srpc_int_arg(grpc_arg *arg, const char *key, int value)
{
    arg->type = GRPC_ARG_INTEGER;
    arg->key = (char *)key;
    arg->value.integer = value;
}

void srpc_tcp_read_arg(grpc_arg *arg)
{
    /*
     * gRPC grows its TCP read buffers up to 4 MiB by default; blocks that
     * large come from mmap, so a large message paid a page fault per 4 KiB
     * received and a munmap afterwards. Reads of at most 64 KiB stay in
     * malloc's warm heap (measured: a 256 KiB request 1.4-1.5x faster).
     */
    srpc_int_arg(arg, GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, SRPC_TCP_MAX_READ_CHUNK);
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
    return cm_mono_ns();
}

/* ----------------------------------------------- per-thread buffers -- */

/*
 * Large messages used to cost far more than their bytes: every request and
 * answer went through fresh malloc'd blocks above glibc's mmap threshold, so
 * each call paid a page fault per 4 KiB (and the madvise/munmap to give them
 * back) on every copy. Each thread now keeps its buffers: a scratch block
 * for reading a message that arrived in several slices, one send buffer that
 * gRPC borrows through a slice with a release callback, and the server's
 * arena (server.c). Blocks above SRPC_KEEP_BYTES are not kept.
 */
#define SRPC_KEEP_BYTES       (8u << 20)
#define SRPC_SENDBUF_MIN_PACK 4096 /* smaller messages: a plain gRPC slice */

/* A send buffer: one reference for the thread that caches it, one per slice. */
typedef struct srpc_sendbuf {
    atomic_uint refs;
    size_t cap;
    max_align_t data[];
} srpc_sendbuf_t;

typedef struct srpc_tls {
    uint8_t *scratch;
    size_t scratch_cap;
    srpc_sendbuf_t *sendbuf;
    void *arena;
    size_t arena_cap;
    grpc_completion_queue *cq; /* the thread's pluck queue for client calls */
} srpc_tls_t;

static pthread_key_t srpc_tls_key;
static pthread_once_t srpc_tls_once = PTHREAD_ONCE_INIT;
static bool srpc_tls_ok;

static void srpc_sendbuf_unref(void *p)
{
    srpc_sendbuf_t *b = p;

    if (atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        free(b);
    }
}

static void srpc_tls_destroy(void *p)
{
    srpc_tls_t *t = p;

    free(t->scratch);
    free(t->arena);
    if (t->sendbuf != NULL) {
        srpc_sendbuf_unref(t->sendbuf);
    }
    if (t->cq != NULL) {
        grpc_completion_queue_shutdown(t->cq);
        grpc_completion_queue_destroy(t->cq);
        srpc_grpc_unref();
    }
    free(t);
}

static void srpc_tls_init(void)
{
    srpc_tls_ok = pthread_key_create(&srpc_tls_key, srpc_tls_destroy) == 0;
}

/* The calling thread's buffers, created on first use; NULL on ENOMEM. */
static srpc_tls_t *srpc_tls(void)
{
    srpc_tls_t *t;

    pthread_once(&srpc_tls_once, srpc_tls_init);
    if (!srpc_tls_ok) {
        return NULL;
    }
    t = pthread_getspecific(srpc_tls_key);
    if (t == NULL && (t = calloc(1, sizeof(*t))) != NULL &&
        pthread_setspecific(srpc_tls_key, t) != 0) {
        free(t);
        t = NULL;
    }
    return t;
}

grpc_completion_queue *srpc_thread_cq(void)
{
    srpc_tls_t *t = srpc_tls();

    if (t == NULL) {
        return NULL;
    }
    if (t->cq == NULL) {
        srpc_grpc_ref(); /* dropped when the thread exits */
        t->cq = grpc_completion_queue_create_for_pluck(NULL);
        if (t->cq == NULL) {
            srpc_grpc_unref();
        }
    }
    return t->cq;
}

void *srpc_arena_take(size_t *cap_p)
{
    srpc_tls_t *t = srpc_tls();
    void *block = NULL;

    *cap_p = 0;
    if (t != NULL && t->arena != NULL) {
        block = t->arena;
        *cap_p = t->arena_cap;
        t->arena = NULL;
        t->arena_cap = 0;
    }
    return block;
}

void srpc_arena_give(void *block, size_t cap)
{
    srpc_tls_t *t = srpc_tls();

    if (t == NULL || cap > SRPC_KEEP_BYTES || t->arena_cap >= cap) {
        free(block);
        return;
    }
    free(t->arena);
    t->arena = block;
    t->arena_cap = cap;
}

/* The bytes of bb when it is one uncompressed slice, else NULL. */
static const uint8_t *srpc_bb_single(grpc_byte_buffer *bb, size_t *len_p)
{
    if (bb->type != GRPC_BB_RAW || bb->data.raw.compression != GRPC_COMPRESS_NONE ||
        bb->data.raw.slice_buffer.count != 1) {
        return NULL;
    }
    *len_p = GRPC_SLICE_LENGTH(bb->data.raw.slice_buffer.slices[0]);
    return GRPC_SLICE_START_PTR(bb->data.raw.slice_buffer.slices[0]);
}

/* Copies every slice of bb into dst (room for len bytes); returns the bytes copied. */
static st_status_t srpc_bb_copy(grpc_byte_buffer *bb, uint8_t *dst, size_t cap, size_t *len_p)
{
    grpc_byte_buffer_reader reader;
    grpc_slice slice;
    size_t off = 0;

    if (!grpc_byte_buffer_reader_init(&reader, bb)) {
        return ST_ERR_PROTOCOL; /* undecompressable */
    }
    while (grpc_byte_buffer_reader_next(&reader, &slice)) {
        size_t n = GRPC_SLICE_LENGTH(slice);

        if (n > cap - off) { /* cannot happen; never overrun */
            n = cap - off;
        }
        memcpy(dst + off, GRPC_SLICE_START_PTR(slice), n);
        off += n;
        grpc_slice_unref(slice);
    }
    grpc_byte_buffer_reader_destroy(&reader);
    *len_p = off;
    return ST_OK;
}

st_status_t srpc_bb_view(grpc_byte_buffer *bb, const uint8_t **data_p, size_t *len_p)
{
    const uint8_t *one = srpc_bb_single(bb, len_p);
    srpc_tls_t *t;
    size_t len;

    if (one != NULL) {
        *data_p = one;
        return ST_OK;
    }
    len = bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE
              ? grpc_byte_buffer_length(bb)
              : SIZE_MAX;
    if (len == 0) {
        *data_p = (const uint8_t *)"";
        *len_p = 0;
        return ST_OK;
    }
    t = srpc_tls();
    if (len == SIZE_MAX || t == NULL) { /* compressed (length unknown) or no TLS */
        uint8_t *copy;
        st_status_t st = srpc_bb_read(bb, &copy, len_p);

        if (st != ST_OK) {
            return st;
        }
        if (t == NULL) {
            free(copy);
            return ST_ERR_NOMEM;
        }
        free(t->scratch);
        t->scratch = copy;
        t->scratch_cap = *len_p;
        *data_p = copy;
        return ST_OK;
    }
    if (t->scratch_cap < len) {
        uint8_t *grown = malloc(len);

        if (grown == NULL) {
            return ST_ERR_NOMEM;
        }
        free(t->scratch);
        t->scratch = grown;
        t->scratch_cap = len;
    }
    *data_p = t->scratch;
    return srpc_bb_copy(bb, t->scratch, len, len_p);
}

static void srpc_tls_drop_cq(void)
{
    srpc_tls_t *t = srpc_tls_ok ? pthread_getspecific(srpc_tls_key) : NULL;

    if (t != NULL && t->cq != NULL) {
        grpc_completion_queue_shutdown(t->cq);
        grpc_completion_queue_destroy(t->cq);
        t->cq = NULL;
        srpc_grpc_unref();
    }
}

void srpc_bb_view_done(void)
{
    srpc_tls_t *t = srpc_tls_ok ? pthread_getspecific(srpc_tls_key) : NULL;

    if (t != NULL && t->scratch_cap > SRPC_KEEP_BYTES) {
        free(t->scratch);
        t->scratch = NULL;
        t->scratch_cap = 0;
    }
}

st_status_t srpc_bb_read(grpc_byte_buffer *bb, uint8_t **data_p, size_t *len_p)
{
    grpc_byte_buffer_reader reader;
    const uint8_t *one;
    size_t len;
    uint8_t *data;
    st_status_t st;

    one = srpc_bb_single(bb, &len);
    if (one != NULL) {
        data = malloc(len ? len : 1);
        if (data == NULL) {
            return ST_ERR_NOMEM;
        }
        memcpy(data, one, len);
        *data_p = data;
        *len_p = len;
        return ST_OK;
    }
    if (!grpc_byte_buffer_reader_init(&reader, bb)) {
        return ST_ERR_PROTOCOL; /* undecompressable */
    }
    len = grpc_byte_buffer_length(reader.buffer_out);
    grpc_byte_buffer_reader_destroy(&reader);
    data = malloc(len ? len : 1);
    if (data == NULL) {
        return ST_ERR_NOMEM;
    }
    st = srpc_bb_copy(bb, data, len, len_p);
    if (st != ST_OK) {
        free(data);
        return st;
    }
    *data_p = data;
    return ST_OK;
}

/*
 * A send buffer of at least len bytes holding a reference for the caller:
 * the thread's cached one when gRPC has released it, else a new one (which
 * becomes the cached one when it is not too large).
 */
static srpc_sendbuf_t *srpc_sendbuf_get(size_t len)
{
    srpc_tls_t *t = srpc_tls();
    srpc_sendbuf_t *b;

    if (t != NULL && t->sendbuf != NULL && t->sendbuf->cap >= len &&
        atomic_load_explicit(&t->sendbuf->refs, memory_order_acquire) == 1) {
        atomic_fetch_add_explicit(&t->sendbuf->refs, 1, memory_order_relaxed);
        return t->sendbuf;
    }
    b = malloc(sizeof(*b) + len);
    if (b == NULL) {
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->cap = len;
    if (t != NULL && len <= SRPC_KEEP_BYTES &&
        (t->sendbuf == NULL || atomic_load(&t->sendbuf->refs) == 1)) {
        if (t->sendbuf != NULL) {
            srpc_sendbuf_unref(t->sendbuf);
        }
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
        t->sendbuf = b;
    }
    return b;
}

st_status_t srpc_bb_pack(const ProtobufCMessage *msg, grpc_byte_buffer **bb_p)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice;
    grpc_byte_buffer *bb;

    if (len >= SRPC_SENDBUF_MIN_PACK) {
        /* Packed straight into a warm buffer that gRPC borrows (no copy). */
        srpc_sendbuf_t *b = srpc_sendbuf_get(len);

        if (b == NULL) {
            return ST_ERR_NOMEM;
        }
        protobuf_c_message_pack(msg, (uint8_t *)b->data);
        slice = grpc_slice_new_with_user_data(b->data, len, srpc_sendbuf_unref, b);
    } else {
        slice = grpc_slice_malloc(len);
        protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    }
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

/* ---------------------------------------- retry hint and ring epoch -- */

/* 1 to max_digits decimal digits into *v_p: 1, or 0 (anything else). */
static int srpc_digits(const char *value, size_t len, size_t max_digits, uint64_t *v_p)
{
    uint64_t v = 0;

    if (value == NULL || len == 0 || len > max_digits) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (value[i] < '0' || value[i] > '9') {
            return 0;
        }
        v = v * 10 + (uint64_t)(value[i] - '0');
    }
    *v_p = v;
    return 1;
}

int srpc_retry_hint_parse(const char *value, size_t len, uint32_t *ms_p)
{
    uint64_t ms = 0;

    if (!srpc_digits(value, len, 9, &ms) || ms == 0) {
        return 0;
    }
    *ms_p = (uint32_t)ms;
    return 1;
}

int srpc_ring_epoch_parse(const char *value, size_t len, uint64_t *epoch_p)
{
    return srpc_digits(value, len, 19, epoch_p);
}

/* The value of trailing metadata key in md: 1 with *value_p and *len_p set, or 0. */
static int srpc_trailer_find(const grpc_metadata_array *md, const char *key, const char **value_p,
                             size_t *len_p)
{
    size_t klen = strlen(key);

    for (size_t i = 0; i < md->count; i++) {
        const grpc_slice *k = &md->metadata[i].key;

        if (GRPC_SLICE_LENGTH(*k) == klen && memcmp(GRPC_SLICE_START_PTR(*k), key, klen) == 0) {
            *value_p = (const char *)GRPC_SLICE_START_PTR(md->metadata[i].value);
            *len_p = GRPC_SLICE_LENGTH(md->metadata[i].value);
            return 1;
        }
    }
    return 0;
}

uint64_t srpc_ring_epoch_find(const grpc_metadata_array *md)
{
    const char *v;
    size_t len;
    uint64_t e = 0;

    return srpc_trailer_find(md, SRPC_RING_EPOCH_KEY, &v, &len) && srpc_ring_epoch_parse(v, len, &e)
               ? e
               : 0;
}

int srpc_retry_hint_find(const grpc_metadata_array *md, uint32_t *ms_p)
{
    const char *v;
    size_t len;

    return srpc_trailer_find(md, SRPC_RETRY_AFTER_KEY, &v, &len) &&
           srpc_retry_hint_parse(v, len, ms_p);
}
