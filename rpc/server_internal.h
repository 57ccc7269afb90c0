/*
 * server_internal.h - the server's state, shared by server.c, health.c and
 * stats.c.
 */
#ifndef STRATA_SRPC_SERVER_INTERNAL_H
#define STRATA_SRPC_SERVER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

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
};

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
