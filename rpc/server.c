/*
 * server.c - the gRPC server: method table, worker threads, the calls' state
 * machine, shutdown. A call's context and the running of its handler are in
 * server_call.c.
 *
 * Every call goes through two completions on its queue:
 *   REQUESTED  gRPC matched an incoming call to one of our requested calls:
 *              request a replacement, read + unpack + handle + pack, then
 *              start the final batch (initial metadata, message, status,
 *              close);
 *   SENDING    the final batch completed: free the call (it was counted
 *              when the batch started).
 * Calls to methods outside the table come through grpc_server_request_call()
 * and get UNIMPLEMENTED.
 *
 * The queues are shared by several threads each (see srpc.h): a handler that
 * blocks holds its thread only, never calls that gRPC matched to its queue.
 */
#include "srpc_internal.h"
#include "server_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "clock.h"
#include "log.h"

#define SRPC_DEFAULT_THREADS   4
#define SRPC_DEFAULT_MAX_BYTES (16u << 20)
#define SRPC_UNKNOWN_PENDING   2 /* requested calls for unknown methods per queue */

/* ------------------------------------------------------------------ calls -- */

/* A call taken from gRPC counts as live until it is freed; stop waits for 0. */
static void srpc_live_add(srpc_server_t *srv, int delta)
{
    pthread_mutex_lock(&srv->lock);
    srv->live = (size_t)((ptrdiff_t)srv->live + delta);
    if (srv->live == 0) {
        pthread_cond_broadcast(&srv->cond);
    }
    pthread_mutex_unlock(&srv->lock);
}

static void srpc_scall_free(srpc_scall_t *c)
{
    if (c->phase == SRPC_CALL_SENDING) {
        srpc_live_add(c->srv, -1);
    }
    grpc_metadata_array_destroy(&c->md);
    if (c->method_idx < 0) {
        grpc_call_details_destroy(&c->details);
    }
    if (c->payload != NULL) {
        grpc_byte_buffer_destroy(c->payload);
    }
    if (c->resp_bb != NULL) {
        grpc_byte_buffer_destroy(c->resp_bb);
    }
    if (c->phase == SRPC_CALL_SENDING) {
        grpc_slice_unref(c->status_details);
    }
    if (c->n_trail != 0) {
        grpc_slice_unref(c->trail.value);
    }
    if (c->call != NULL) {
        grpc_call_unref(c->call);
    }
    free(c);
}

/*
 * Asks gRPC for the next call of method method_idx (-1: any unknown method)
 * on cq. Returns ST_OK, ST_ERR_NOMEM, or ST_ERR_INTERNAL if gRPC refused.
 */
static st_status_t srpc_request(srpc_server_t *srv, grpc_completion_queue *cq, int method_idx)
{
    srpc_scall_t *c = calloc(1, sizeof(*c));
    grpc_call_error err;

    if (c == NULL) {
        return ST_ERR_NOMEM;
    }
    c->srv = srv;
    c->method_idx = method_idx;
    c->cq = cq;
    c->phase = SRPC_CALL_REQUESTED;
    grpc_metadata_array_init(&c->md);
    if (method_idx >= 0) {
        err = grpc_server_request_registered_call(srv->server, srv->methods[method_idx].handle,
                                                  &c->call, &c->deadline, &c->md, &c->payload, cq,
                                                  cq, c);
    } else {
        grpc_call_details_init(&c->details);
        err = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md, cq, cq, c);
    }
    if (err != GRPC_CALL_OK) {
        lg_error("grpc refused to request a call error=%d", (int)err);
        c->call = NULL;
        srpc_scall_free(c);
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

void srpc_send(srpc_scall_t *c, int code, const char *details)
{
    grpc_op ops[4];
    size_t n = 0;
    grpc_call_error err;

    memset(ops, 0, sizeof(ops));
    c->code = code;
    c->status_details = grpc_slice_from_copied_string(details ? details : "");
    c->phase = SRPC_CALL_SENDING;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->resp_bb != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->resp_bb;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    ops[n].data.send_status_from_server.trailing_metadata_count = c->n_trail;
    ops[n].data.send_status_from_server.trailing_metadata = c->n_trail ? &c->trail : NULL;
    ops[n++].data.send_status_from_server.status_details = &c->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    /* Counted before the answer leaves: a client that has its answer sees it counted. */
    if (c->method_idx >= 0) {
        srpc_stats_record(&c->srv->methods[c->method_idx].stats, code,
                          (srpc_now_ns() - c->start_ns) / 1000);
    }
    err = grpc_call_start_batch(c->call, ops, n, c, NULL);
    if (err != GRPC_CALL_OK) {
        lg_error("grpc refused the final batch of a call error=%d", (int)err);
        srpc_scall_free(c);
    }
}

void srpc_serve(srpc_scall_t *c)
{
    srpc_server_t *srv = c->srv;
    srpc_smethod_t *m = &srv->methods[c->method_idx];
    srpc_ctx_t ctx;
    ProtobufCMessage *req = NULL;
    ProtobufCMessage *resp;
    const uint8_t *data = NULL;
    size_t len = 0;
    st_status_t st;
    int code = GRPC_STATUS_OK;
    char msg[256];

    srpc_ctx_start(&ctx, srv, c, m);
    msg[0] = '\0';
    c->start_ns = srpc_now_ns();

    if (gpr_time_cmp(c->deadline, gpr_now(c->deadline.clock_type)) <= 0) {
        code = GRPC_STATUS_DEADLINE_EXCEEDED;
        snprintf(msg, sizeof(msg), "%s: deadline passed before the call was served",
                 m->method->path);
        goto send;
    }
    srpc_ctx_find_token(&ctx, &c->md);
    code = srpc_authenticate(&ctx, msg, sizeof(msg));
    if (code != GRPC_STATUS_OK) {
        goto send; /* before the request is read: an unauthenticated call costs no parse */
    }
    if (c->payload == NULL) {
        code = GRPC_STATUS_INVALID_ARGUMENT;
        snprintf(msg, sizeof(msg), "%s: the call carries no request message", m->method->path);
        goto send;
    }
    code = srpc_ctx_check_size(&ctx, grpc_byte_buffer_length(c->payload), msg, sizeof(msg));
    if (code != GRPC_STATUS_OK) {
        goto send;
    }
    st = srpc_bb_view(c->payload, &data, &len);
    if (st != ST_OK) {
        code = st_status_to_grpc(st);
        snprintf(msg, sizeof(msg), "%s: cannot read the request: %s", m->method->path,
                 st_strerror(st));
        goto send;
    }
    code = srpc_ctx_unpack(&ctx, data, len, &req, msg, sizeof(msg));
    srpc_bb_view_done();
    if (code == GRPC_STATUS_OK) {
        code = srpc_ctx_handle(&ctx, req, &resp, msg, sizeof(msg));
    }
    if (code == GRPC_STATUS_OK) {
        st = srpc_bb_pack(resp, &c->resp_bb);
        if (st != ST_OK) {
            code = st_status_to_grpc(st);
            snprintf(msg, sizeof(msg), "%s", st_strerror(st));
        }
    }

send:
    srpc_ctx_release(&ctx); /* the request and the response's arena memory */
    if (code != GRPC_STATUS_OK) {
        lg_debug("rpc call failed method=%s code=%d msg=\"%s\"", m->method->path, code, msg);
    }
    srpc_send(c, code, msg);
}

static void srpc_on_requested(srpc_scall_t *c, bool ok)
{
    srpc_server_t *srv = c->srv;

    if (!ok) { /* the server is shutting down: this request will never match */
        c->phase = 0;
        srpc_scall_free(c);
        return;
    }
    srpc_live_add(srv, 1);
    if (!atomic_load(&srv->stopping)) {
        st_status_t st = srpc_request(srv, c->cq, c->method_idx);

        if (st != ST_OK) {
            lg_ratelimited(LG_WARN, "cannot request a replacement call status=%s",
                           st_status_name(st));
        }
    }
    if (c->method_idx < 0) {
        char path[256];

        srpc_slice_to_str(c->details.method, path, sizeof(path));
        lg_debug("rpc call to an unknown method method=%s", path);
        c->start_ns = srpc_now_ns();
        srpc_send(c, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
        return;
    }
    srpc_sched_take(c);
}

static void *srpc_worker(void *arg)
{
    srpc_worker_t *w = arg;
    srpc_server_t *srv = w->srv;

    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);

        if (ev.type == GRPC_QUEUE_SHUTDOWN) {
            break;
        }
        if (ev.type != GRPC_OP_COMPLETE) {
            continue;
        }
        if (ev.tag == &srv->shutdown_tag) {
            pthread_mutex_lock(&srv->lock);
            srv->shutdown_done = true;
            pthread_cond_broadcast(&srv->cond);
            pthread_mutex_unlock(&srv->lock);
            continue;
        }
        srpc_scall_t *c = ev.tag;

        if (c->phase == SRPC_CALL_REQUESTED) {
            srpc_on_requested(c, ev.success != 0);
        } else {
            srpc_scall_free(c); /* the final batch is done */
        }
    }
    return NULL;
}

/* ------------------------------------------------------------- lifecycle -- */

static st_status_t srpc_check_config(const srpc_server_config_t *cfg,
                                     const srpc_method_def_t *table, size_t n,
                                     srpc_server_t **server_p)
{
    if (cfg == NULL || server_p == NULL || (table == NULL && n != 0)) {
        lg_error("rpc server: NULL config, table or output");
        return ST_ERR_INVALID;
    }
    if (cfg->address == NULL || cfg->address[0] == '\0') {
        lg_error("rpc server: no listen address");
        return ST_ERR_INVALID;
    }
    if (cfg->n_cqs > (cfg->n_threads ? cfg->n_threads : SRPC_DEFAULT_THREADS)) {
        lg_error("rpc server: more completion queues than threads n_cqs=%u n_threads=%u",
                 cfg->n_cqs, cfg->n_threads);
        return ST_ERR_INVALID;
    }
    if (srpc_tls_check_server_config(cfg) != ST_OK) {
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        const srpc_method_def_t *d = &table[i];

        if (d->method == NULL || d->handler == NULL || d->method->path == NULL ||
            d->method->path[0] != '/' || strchr(d->method->path + 1, '/') == NULL ||
            d->method->req_desc == NULL || d->method->resp_desc == NULL) {
            lg_error("rpc server: method table entry is incomplete or its path is not "
                     "/service/Method index=%zu",
                     i);
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* Shuts the queues down, joins the workers, drains what is left, frees. */
static void srpc_close_queues(srpc_server_t *srv)
{
    for (unsigned i = 0; i < srv->n_cqs; i++) {
        if (srv->cqs[i] != NULL) {
            grpc_completion_queue_shutdown(srv->cqs[i]);
        }
    }
    for (unsigned i = 0; i < srv->threads_started; i++) {
        pthread_join(srv->workers[i].thread, NULL);
    }
    srv->threads_started = 0;
    for (unsigned i = 0; i < srv->n_cqs; i++) {
        if (srv->cqs[i] == NULL) {
            continue;
        }
        for (;;) { /* a queue nobody polled (start failed) still has to drain */
            grpc_event ev =
                grpc_completion_queue_next(srv->cqs[i], gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
            if (ev.type == GRPC_QUEUE_SHUTDOWN) {
                break;
            }
            if (ev.type == GRPC_OP_COMPLETE && ev.tag != &srv->shutdown_tag) {
                srpc_scall_t *c = ev.tag;

                c->phase = c->phase == SRPC_CALL_SENDING ? c->phase : 0;
                srpc_scall_free(c);
            }
        }
        grpc_completion_queue_destroy(srv->cqs[i]);
        srv->cqs[i] = NULL;
    }
}

static void srpc_server_free(srpc_server_t *srv)
{
    srpc_sched_destroy(srv);
    pthread_mutex_destroy(&srv->lock);
    pthread_cond_destroy(&srv->cond);
    pthread_mutex_destroy(&srv->health_lock);
    srpc_tls_state_free(srv->tls);
    free(srv->workers);
    free(srv->cqs);
    free(srv->methods);
    free(srv);
}

static st_status_t srpc_server_alloc(const srpc_server_config_t *cfg,
                                     const srpc_method_def_t *table, size_t n,
                                     srpc_server_t **srv_p)
{
    srpc_server_t *srv = calloc(1, sizeof(*srv));

    if (srv == NULL) {
        return ST_ERR_NOMEM;
    }
    srv->n_threads = cfg->n_threads ? cfg->n_threads : SRPC_DEFAULT_THREADS;
    srv->n_cqs = cfg->n_cqs ? cfg->n_cqs : 1;
    srv->max_message_bytes =
        cfg->max_message_bytes ? cfg->max_message_bytes : SRPC_DEFAULT_MAX_BYTES;
    srv->user_arg = cfg->user_arg;
    srv->authenticate = cfg->authenticate;
    srv->n_methods = n + 1; /* + health check */
    srv->methods = calloc(srv->n_methods, sizeof(*srv->methods));
    srv->cqs = calloc(srv->n_cqs, sizeof(*srv->cqs));
    srv->workers = calloc(srv->n_threads, sizeof(*srv->workers));
    pthread_mutex_init(&srv->lock, NULL);
    pthread_cond_init(&srv->cond, NULL);
    pthread_mutex_init(&srv->health_lock, NULL);
    atomic_init(&srv->stopping, false);
    atomic_init(&srv->shutdown_started, false);
    if (srv->methods == NULL || srv->cqs == NULL || srv->workers == NULL ||
        srpc_sched_init(srv, &cfg->admission, srv->n_threads) != ST_OK) {
        srpc_server_free(srv);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        srpc_smethod_t *m = &srv->methods[i];

        m->method = table[i].method;
        m->handler = table[i].handler;
        m->handler_arg = table[i].handler_arg;
        m->max_request_bytes =
            table[i].max_request_bytes ? table[i].max_request_bytes : srv->max_message_bytes;
    }
    srv->methods[n].method = &srpc_health_check_method;
    srv->methods[n].handler = srpc_health_handler;
    srv->methods[n].handler_arg = srv;
    srv->methods[n].max_request_bytes = 4096;
    *srv_p = srv;
    return ST_OK;
}

/* Creates the grpc_server with its queues, methods and listener. */
static st_status_t srpc_server_setup(srpc_server_t *srv, const srpc_server_config_t *cfg)
{
    const char *address = cfg->address;
    st_status_t st;
    uint32_t max_bytes = srv->max_message_bytes;
    grpc_arg args[3];
    grpc_channel_args chargs = {3, args};
    grpc_server_credentials *creds;

    for (size_t i = 0; i < srv->n_methods; i++) {
        if (srv->methods[i].max_request_bytes > max_bytes) {
            max_bytes = srv->methods[i].max_request_bytes;
        }
    }
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = max_bytes > INT32_MAX ? INT32_MAX : (int)max_bytes;
    /* Two servers on one port must be an error, not a silent split. */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_ALLOW_REUSEPORT;
    args[1].value.integer = 0;
    srpc_tcp_read_arg(&args[2]);
    srv->server = grpc_server_create(&chargs, NULL);
    if (srv->server == NULL) {
        return ST_ERR_NOMEM;
    }
    for (unsigned i = 0; i < srv->n_cqs; i++) {
        srv->cqs[i] = grpc_completion_queue_create_for_next(NULL);
        if (srv->cqs[i] == NULL) {
            return ST_ERR_NOMEM;
        }
        grpc_server_register_completion_queue(srv->server, srv->cqs[i], NULL);
    }
    for (size_t i = 0; i < srv->n_methods; i++) {
        srpc_smethod_t *m = &srv->methods[i];

        m->handle = grpc_server_register_method(srv->server, m->method->path, NULL,
                                                GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
        if (m->handle == NULL) {
            lg_error("rpc server: gRPC refused method (registered twice?) method=%s",
                     m->method->path);
            return ST_ERR_INTERNAL;
        }
    }
    st = srpc_tls_server_creds(srv, cfg, &creds);
    if (st != ST_OK) {
        return st;
    }
    srv->port = grpc_server_add_http2_port(srv->server, address, creds);
    grpc_server_credentials_release(creds);
    if (srv->port == 0) {
        lg_error("rpc server: cannot listen (address in use or invalid) address=%s", address);
        return ST_ERR_IO;
    }
    return ST_OK;
}

st_status_t srpc_server_start(const srpc_server_config_t *cfg, const srpc_method_def_t *table,
                              size_t n, srpc_server_t **server_p)
{
    srpc_server_t *srv;
    st_status_t st;
    int rc;

    st = srpc_check_config(cfg, table, n, server_p);
    if (st != ST_OK) {
        return st;
    }
    st = srpc_server_alloc(cfg, table, n, &srv);
    if (st != ST_OK) {
        lg_error("rpc server: out of memory address=%s", cfg->address);
        return st;
    }
    srpc_grpc_ref();
    st = srpc_health_init(srv);
    if (st != ST_OK) {
        goto err_grpc;
    }
    st = srpc_server_setup(srv, cfg);
    if (st != ST_OK) {
        goto err_grpc;
    }
    for (unsigned i = 0; i < srv->n_threads; i++) {
        srpc_worker_t *w = &srv->workers[i];

        w->srv = srv;
        w->cq = srv->cqs[i % srv->n_cqs];
        rc = pthread_create(&w->thread, NULL, srpc_worker, w);
        if (rc != 0) {
            lg_error("rpc server: cannot start a worker thread errno=%d", rc);
            st = ST_ERR_INTERNAL;
            goto err_grpc;
        }
        srv->threads_started++;
    }
    grpc_server_start(srv->server);
    srv->started = true;

    /* Enough requested calls that every thread of a queue can hold one of
     * each method, plus one spare. */
    srv->pending_per_method = (srv->n_threads + srv->n_cqs - 1) / srv->n_cqs + 1;
    for (unsigned q = 0; q < srv->n_cqs; q++) {
        for (size_t i = 0; i < srv->n_methods; i++) {
            for (unsigned k = 0; k < srv->pending_per_method; k++) {
                st = st == ST_OK ? srpc_request(srv, srv->cqs[q], (int)i) : st;
            }
        }
        for (unsigned k = 0; k < SRPC_UNKNOWN_PENDING; k++) {
            st = st == ST_OK ? srpc_request(srv, srv->cqs[q], -1) : st;
        }
    }
    if (st != ST_OK) {
        srpc_server_stop(srv, 0);
        srpc_server_free(srv);
        srpc_grpc_unref();
        return st;
    }
    lg_info("rpc server listening address=%s port=%d threads=%u cqs=%u methods=%zu tls=%s",
            cfg->address, srv->port, srv->n_threads, srv->n_cqs, n,
            srv->tls == NULL                                       ? "off"
            : srv->tls_client_auth == SRPC_TLS_CLIENT_AUTH_NONE    ? "on"
            : srv->tls_client_auth == SRPC_TLS_CLIENT_AUTH_REQUEST ? "on,client-cert-requested"
                                                                   : "on,client-cert-required");
    *server_p = srv;
    return ST_OK;

err_grpc:
    if (srv->server != NULL) {
        grpc_server_destroy(srv->server); /* never started: no shutdown needed */
    }
    srpc_close_queues(srv);
    srpc_server_free(srv);
    srpc_grpc_unref();
    return st;
}

int srpc_server_port(const srpc_server_t *server)
{
    return server->port;
}

bool srpc_server_stopping(const srpc_server_t *server)
{
    return atomic_load(&((srpc_server_t *)server)->shutdown_started);
}

void srpc_server_stop(srpc_server_t *srv, int grace_ms)
{
    struct timespec until;
    int rc = 0;

    pthread_mutex_lock(&srv->lock);
    if (srv->stopped || srv->stop_running) {
        while (!srv->stopped) {
            pthread_cond_wait(&srv->cond, &srv->lock);
        }
        pthread_mutex_unlock(&srv->lock);
        return;
    }
    srv->stop_running = true;
    pthread_mutex_unlock(&srv->lock);

    srpc_health_set_all(srv, false);
    atomic_store(&srv->stopping, true);
    grpc_server_shutdown_and_notify(srv->server, srv->cqs[0], &srv->shutdown_tag);
    atomic_store(&srv->shutdown_started, true);

    until = cm_deadline_ms(grace_ms >= 0 ? (uint64_t)grace_ms : 0); /* unused when < 0 */
    /*
     * gRPC reports the end of shutdown once no call is pending on the wire,
     * even when a cancelled call's handler is still running here: wait for
     * both, so that no final batch is started on a destroyed server.
     */
    pthread_mutex_lock(&srv->lock);
    while ((!srv->shutdown_done || srv->live != 0) && rc != ETIMEDOUT) {
        rc = grace_ms < 0 ? pthread_cond_wait(&srv->cond, &srv->lock)
                          : pthread_cond_timedwait(&srv->cond, &srv->lock, &until);
    }
    if (!srv->shutdown_done || srv->live != 0) {
        size_t live = srv->live;

        pthread_mutex_unlock(&srv->lock);
        if (live != 0) {
            lg_warn("rpc server: grace period over, cancelling calls in flight port=%d "
                    "grace_ms=%d calls=%zu",
                    srv->port, grace_ms, live);
        }
        grpc_server_cancel_all_calls(srv->server);
        pthread_mutex_lock(&srv->lock);
        while (!srv->shutdown_done || srv->live != 0) {
            pthread_cond_wait(&srv->cond, &srv->lock);
        }
    }
    pthread_mutex_unlock(&srv->lock);

    grpc_server_destroy(srv->server);
    srv->server = NULL;
    srpc_close_queues(srv);
    lg_info("rpc server stopped port=%d", srv->port);

    pthread_mutex_lock(&srv->lock);
    srv->stopped = true;
    pthread_cond_broadcast(&srv->cond);
    pthread_mutex_unlock(&srv->lock);
}

void srpc_server_destroy(srpc_server_t *srv)
{
    if (srv == NULL) {
        return;
    }
    srpc_server_stop(srv, 0);
    srpc_server_free(srv);
    srpc_grpc_unref();
}

size_t srpc_server_stats(const srpc_server_t *srv, srpc_method_stats_t *out, size_t max)
{
    for (size_t i = 0; i < srv->n_methods && i < max; i++) {
        srpc_stats_snapshot(&srv->methods[i].stats, srv->methods[i].method->path, &out[i]);
    }
    return srv->n_methods;
}
