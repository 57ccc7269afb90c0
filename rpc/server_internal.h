/*
 * server_internal.h - the server's state and its calls' records, shared by
 * server.c, server_call.c, health.c and stats.c.
 */
#ifndef STRATA_SRPC_SERVER_INTERNAL_H
#define STRATA_SRPC_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc_security.h>

#include "srpc_internal.h"

typedef struct srpc_tls_state srpc_tls_state_t; /* tls.c */

#define SRPC_MAX_HEALTH      32
#define SRPC_MAX_SERVICE_LEN 127

/* The counters of one method, updated with relaxed atomics. */
typedef struct srpc_counters {
    _Atomic uint64_t calls;
    _Atomic uint64_t by_code[SRPC_GRPC_CODES];
    _Atomic uint64_t latency[SRPC_LATENCY_BUCKETS];
    _Atomic uint64_t latency_sum_us;
    _Atomic uint64_t overloaded; /* refused by admission control */
} srpc_counters_t;

/* A method the server serves. */
typedef struct srpc_smethod {
    const srpc_method_t *method;
    srpc_handler_fn handler;
    void *handler_arg;
    uint32_t max_request_bytes;
    void *handle; /* from grpc_server_register_method() */
    srpc_counters_t stats;
} srpc_smethod_t;

typedef struct srpc_worker {
    srpc_server_t *srv;
    grpc_completion_queue *cq;
    pthread_t thread;
} srpc_worker_t;

/* One flow of the fair queue (server_sched.c); guarded by the scheduler's lock. */
typedef struct srpc_flow {
    char name[SRPC_FLOW_NAME + 1];
    struct srpc_scall *head, *tail; /* its calls waiting, oldest first */
    uint64_t queued;
    uint64_t queued_bytes;
    uint64_t served;
    uint64_t refused;
    uint64_t max_passed;
} srpc_flow_t;

/* The fair queue and admission control of a server (all zero: off). */
typedef struct srpc_sched {
    srpc_admission_t cfg;
    pthread_mutex_t lock;
    uint64_t serving;
    uint64_t queued;
    uint64_t queued_bytes;
    uint64_t refused;
    uint64_t dispatched; /* calls taken off the queues, all flows */
    uint64_t ewma_us;    /* the handlers' mean run time, smoothed */
    uint64_t lent;       /* calls served in a slot lent by srpc_ctx_yield() */
    size_t rr;           /* the flow whose turn was last */
    size_t n_flows;
    srpc_flow_t flows[SRPC_MAX_FLOWS];
    struct srpc_scall *fifo_head, *fifo_tail; /* cfg.fifo: every call in arrival order */
    uint64_t wait[SRPC_WAIT_BUCKETS];
    uint64_t wait_sum_us;
} srpc_sched_t;

typedef struct srpc_health_entry {
    char service[SRPC_MAX_SERVICE_LEN + 1];
    bool serving;
} srpc_health_entry_t;

struct srpc_server {
    grpc_server *server;
    int port;
    void *user_arg;
    srpc_auth_fn authenticate;
    uint32_t max_message_bytes;
    srpc_smethod_t *methods; /* the table, then the health check */
    size_t n_methods;
    unsigned n_cqs;
    grpc_completion_queue **cqs;
    unsigned n_threads;
    unsigned threads_started;
    srpc_worker_t *workers;
    unsigned pending_per_method;
    bool started;
    srpc_tls_state_t *tls; /* NULL: plaintext */
    srpc_tls_client_auth_t tls_client_auth;

    atomic_bool stopping;         /* no more replacement requests */
    atomic_bool shutdown_started; /* grpc_server_shutdown_and_notify() returned */
    pthread_mutex_t lock;         /* guards the four fields below */
    pthread_cond_t cond;
    size_t live;        /* calls taken from gRPC and not yet freed */
    bool shutdown_done; /* gRPC reported the end of shutdown */
    bool stop_running;
    bool stopped;
    char shutdown_tag; /* its address is the shutdown completion's tag */

    pthread_mutex_t health_lock;
    srpc_health_entry_t health[SRPC_MAX_HEALTH];
    size_t n_health;

    srpc_sched_t sched;
};

enum { SRPC_CALL_REQUESTED = 1, SRPC_CALL_SENDING = 2 };

/* One server-side call, from its request to the end of its final batch. */
typedef struct srpc_scall {
    srpc_server_t *srv;
    int method_idx; /* index into srv->methods; -1: a method we do not serve */
    grpc_completion_queue *cq;
    int phase;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details; /* unknown methods only */
    grpc_byte_buffer *resp_bb;
    grpc_slice status_details;
    int code;
    int cancelled;
    uint64_t start_ns;
    grpc_metadata trail; /* a refusal's retry hint, or srpc_ctx_set_trailer's (n_trail 1) */
    size_t n_trail;
    /* While queued (server_sched.c). */
    struct srpc_scall *next;      /* in its flow's queue (or the FIFO) */
    struct srpc_scall *fifo_next; /* cfg.fifo only */
    srpc_flow_t *flow;
    uint64_t bytes;          /* its request's */
    uint64_t enq_ns;         /* when it was queued */
    uint64_t enq_dispatched; /* sched.dispatched when it was queued */
    uint64_t enq_own;        /* flow->served when it was queued */
} srpc_scall_t;

/* An arena chunk of srpc_ctx_alloc(). */
typedef struct srpc_chunk {
    struct srpc_chunk *next;
    size_t used;
    size_t cap;
    max_align_t data[];
} srpc_chunk_t;

struct srpc_ctx {
    srpc_server_t *srv;
    srpc_scall_t *call;
    const srpc_smethod_t *m;
    const char *token;
    char *peer; /* gpr_malloc'd by gRPC, on demand */
    const char *identity;
    bool identity_done;
    srpc_chunk_t *chunks;
    bool has_error;
    char error[256];
    char token_buf[SRPC_MAX_TOKEN + 1]; /* this and below: not zeroed per call */
    _Alignas(16) unsigned char principal[SRPC_PRINCIPAL_MAX];
    char identity_buf[SRPC_MAX_IDENTITY + 1];
};

/* server.c */
/* Reads, unpacks, handles and answers one call of a method we serve. */
void srpc_serve(srpc_scall_t *c);
/* Starts the final batch of c: [message], status code + details [+ c->trail], close. */
void srpc_send(srpc_scall_t *c, int code, const char *details);

/* server_sched.c */
st_status_t srpc_sched_init(srpc_server_t *srv, const srpc_admission_t *cfg, unsigned n_threads);
void srpc_sched_destroy(srpc_server_t *srv);
/* Serves c now (admission control off, health checks, refused authentication) or
 * queues it (or refuses it for load), then runs queued calls while slots are free. */
void srpc_sched_take(srpc_scall_t *c);

/* server_call.c */
/* Starts ctx for a call of method m (c: its gRPC call; NULL over the transport). */
void srpc_ctx_start(srpc_ctx_t *ctx, srpc_server_t *srv, srpc_scall_t *c, const srpc_smethod_t *m);
/* Finds "authorization: Bearer <token>" among the call's metadata. */
void srpc_ctx_find_token(srpc_ctx_t *ctx, const grpc_metadata_array *md);
/* Runs the server's authenticate callback for ctx (token already found).
 * Returns GRPC_STATUS_OK, or the refusal's code with msg set. */
int srpc_authenticate(srpc_ctx_t *ctx, char *msg, size_t msg_cap);
/* Each returns GRPC_STATUS_OK, or a gRPC code with msg set.
 * srpc_ctx_check_size: a request of len bytes within its method's limit.
 * srpc_ctx_unpack: len bytes at data as the method's request, into ctx's arena.
 * srpc_ctx_handle: runs the method's handler on req into a response in ctx's
 * arena (*resp_p); a refusal carries the handler's message. */
int srpc_ctx_check_size(const srpc_ctx_t *ctx, size_t len, char *msg, size_t msg_cap);
int srpc_ctx_unpack(srpc_ctx_t *ctx, const uint8_t *data, size_t len, ProtobufCMessage **req_p,
                    char *msg, size_t msg_cap);
int srpc_ctx_handle(srpc_ctx_t *ctx, const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                    char *msg, size_t msg_cap);
/* Frees the context's arena (the request and the response) and its peer string. */
void srpc_ctx_release(srpc_ctx_t *ctx);

/* health.c */
st_status_t srpc_health_init(srpc_server_t *srv);
void srpc_health_set_all(srpc_server_t *srv, bool serving);
st_status_t srpc_health_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg);

/* tls.c */
/* Checks the TLS fields of a server config (logs what is wrong). */
st_status_t srpc_tls_check_server_config(const srpc_server_config_t *cfg);
/* The listener's credentials: insecure, or TLS with srv->tls set up (freed by the caller). */
st_status_t srpc_tls_server_creds(srpc_server_t *srv, const srpc_server_config_t *cfg,
                                  grpc_server_credentials **creds_p);
void srpc_tls_state_free(srpc_tls_state_t *t);
/* The verified client certificate's subject CN, copied into buf[0..cap), or NULL. */
const char *srpc_tls_peer_cn(grpc_call *call, char *buf, size_t cap);

/* stats.c */
void srpc_stats_record(srpc_counters_t *c, int code, uint64_t latency_us);
void srpc_stats_snapshot(const srpc_counters_t *c, const char *path, srpc_method_stats_t *out);

#endif /* STRATA_SRPC_SERVER_INTERNAL_H */
