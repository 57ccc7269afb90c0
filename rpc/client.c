/*
 * client.c - channels, unary calls, fan-out and the health check helper.
 *
 * A unary call is one batch of six operations (send metadata, message and
 * close; receive metadata, message and status) on the calling thread's own
 * pluck completion queue (kept for the thread's life), so calls from any
 * number of threads never wait on each other and the caller itself drives
 * gRPC's polling. A fan-out starts every call of the batch on that queue and
 * then waits for each.
 */
#include "srpc_internal.h"

#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "health.pb-c.h"
#include "log.h"

#define SRPC_DEFAULT_MAX_RECEIVE (64u << 20)

struct srpc_channel {
    grpc_channel *channel;
    char *target;
    size_t n_md;
    grpc_metadata md[1];                 /* authorization, when a token is set */
    pthread_mutex_t client_lock;         /* guards client */
    char client[SRPC_MAX_CLIENT_ID + 1]; /* strata-client metadata; "" none */
};

/* One client call in flight. */
typedef struct srpc_cop {
    grpc_call *call;
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    grpc_metadata_array init_md;
    grpc_metadata_array trail_md;
    grpc_status_code code;
    grpc_slice details;
} srpc_cop_t;

st_status_t srpc_channel_open(const char *target, const srpc_channel_config_t *cfg,
                              srpc_channel_t **ch_p)
{
    uint32_t max_recv =
        cfg && cfg->max_receive_bytes ? cfg->max_receive_bytes : SRPC_DEFAULT_MAX_RECEIVE;
    grpc_arg args[5];
    grpc_channel_args chargs = {5, args};
    grpc_channel_credentials *creds;
    srpc_channel_t *ch;
    st_status_t st;

    if (target == NULL || target[0] == '\0' || ch_p == NULL) {
        lg_error("rpc channel: no target");
        return ST_ERR_INVALID;
    }
    ch = calloc(1, sizeof(*ch));
    if (ch == NULL || (ch->target = strdup(target)) == NULL) {
        free(ch);
        lg_error("rpc channel: out of memory target=%s", target);
        return ST_ERR_NOMEM;
    }
    if (cfg != NULL && cfg->token != NULL) {
        size_t len = strlen(cfg->token);
        char *value = malloc(len + 8);

        if (value == NULL) {
            free(ch->target);
            free(ch);
            lg_error("rpc channel: out of memory target=%s", target);
            return ST_ERR_NOMEM;
        }
        memcpy(value, "Bearer ", 7);
        memcpy(value + 7, cfg->token, len + 1);
        ch->md[0].key = grpc_slice_from_static_string("authorization");
        ch->md[0].value = grpc_slice_from_copied_string(value);
        free(value);
        ch->n_md = 1;
    }
    pthread_mutex_init(&ch->client_lock, NULL);
    if (cfg != NULL && cfg->client_id != NULL) {
        snprintf(ch->client, sizeof(ch->client), "%s", cfg->client_id);
    }
    srpc_grpc_ref();
    srpc_int_arg(&args[0], GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                 max_recv > INT32_MAX ? INT32_MAX : (int)max_recv);
    /*
     * A cache node that restarts must be used again within about a second:
     * gRPC's default reconnect backoff (1 s growing to 120 s) would keep a
     * health checker's calls failing long after the node is back. The
     * minimum reconnect backoff is left at gRPC's default: gRPC also takes it
     * as the shortest time a connection attempt is given, and a TLS handshake
     * on a loaded host can take more than 100 ms (the attempt was cut,
     * "Handshake read failed", and the node counted down).
     */
    srpc_int_arg(&args[1], GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    srpc_int_arg(&args[2], GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    srpc_tcp_read_arg(&args[3]);
    /*
     * A channel of its own connection: gRPC otherwise shares one connection between every
     * channel of the process to a target with the same arguments, so two clients of one
     * process (two tenants, or an engine's bulk loads beside its small calls) would be one
     * flow to the daemon's fair queueing (docs/daemon.md, "Fairness and admission").
     */
    srpc_int_arg(&args[4], GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    st = srpc_tls_channel_creds(target, cfg, &creds);
    if (st != ST_OK) {
        srpc_grpc_unref();
        if (ch->n_md != 0) {
            grpc_slice_unref(ch->md[0].value);
        }
        free(ch->target);
        free(ch);
        return st;
    }
    ch->channel = grpc_channel_create(target, creds, &chargs);
    grpc_channel_credentials_release(creds);
    *ch_p = ch;
    return ST_OK;
}

void srpc_channel_set_client(srpc_channel_t *ch, const char *client_id)
{
    pthread_mutex_lock(&ch->client_lock);
    snprintf(ch->client, sizeof(ch->client), "%s", client_id != NULL ? client_id : "");
    pthread_mutex_unlock(&ch->client_lock);
}

grpc_channel *srpc_channel_grpc(srpc_channel_t *ch)
{
    return ch->channel;
}

const char *srpc_channel_target(const srpc_channel_t *ch)
{
    return ch->target;
}

void srpc_channel_close(srpc_channel_t *ch)
{
    if (ch == NULL) {
        return;
    }
    grpc_channel_destroy(ch->channel);
    for (size_t i = 0; i < ch->n_md; i++) {
        grpc_slice_unref(ch->md[i].value);
    }
    pthread_mutex_destroy(&ch->client_lock);
    free(ch->target);
    free(ch);
    srpc_grpc_unref();
}

/* Creates the call and starts its one batch; takes send_bb in every case. */
static st_status_t srpc_cop_start(srpc_cop_t *op, srpc_channel_t *ch, const char *path,
                                  grpc_byte_buffer *send_bb, grpc_completion_queue *cq,
                                  gpr_timespec deadline, void *tag)
{
    grpc_op ops[6];
    grpc_metadata md[2];
    size_t n_md = 0;
    grpc_call_error err;

    memset(op, 0, sizeof(*op));
    memset(ops, 0, sizeof(ops));
    op->send_bb = send_bb;
    op->details = grpc_empty_slice();
    grpc_metadata_array_init(&op->init_md);
    grpc_metadata_array_init(&op->trail_md);
    op->call = grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                        grpc_slice_from_static_string(path), NULL, deadline, NULL);
    if (op->call == NULL) {
        lg_error("rpc call: gRPC could not create the call target=%s method=%s", ch->target, path);
        return ST_ERR_INTERNAL;
    }
    /* gRPC copies the metadata (and takes its own slice refs) when the batch starts. */
    memset(md, 0, sizeof(md));
    if (ch->n_md != 0) {
        md[n_md++] = ch->md[0];
    }
    pthread_mutex_lock(&ch->client_lock);
    if (ch->client[0] != '\0') {
        md[n_md].key = grpc_slice_from_static_string("strata-client");
        md[n_md++].value = grpc_slice_from_copied_string(ch->client);
    }
    pthread_mutex_unlock(&ch->client_lock);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = n_md;
    ops[0].data.send_initial_metadata.metadata = n_md ? md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &op->init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &op->recv_bb;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &op->trail_md;
    ops[5].data.recv_status_on_client.status = &op->code;
    ops[5].data.recv_status_on_client.status_details = &op->details;
    err = grpc_call_start_batch(op->call, ops, 6, tag, NULL);
    if (n_md > (ch->n_md != 0 ? 1u : 0u)) {
        grpc_slice_unref(md[n_md - 1].value);
    }
    if (err != GRPC_CALL_OK) {
        lg_error("rpc call: gRPC refused the batch target=%s method=%s error=%d", ch->target, path,
                 (int)err);
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

/* Frees what srpc_cop_start() set up (also after a failed start). */
static void srpc_cop_cleanup(srpc_cop_t *op)
{
    if (op->call != NULL) {
        grpc_call_unref(op->call);
        op->call = NULL;
    }
    if (op->send_bb != NULL) {
        grpc_byte_buffer_destroy(op->send_bb);
        op->send_bb = NULL;
    }
    if (op->recv_bb != NULL) {
        grpc_byte_buffer_destroy(op->recv_bb);
        op->recv_bb = NULL;
    }
    grpc_metadata_array_destroy(&op->init_md);
    grpc_metadata_array_destroy(&op->trail_md);
    grpc_slice_unref(op->details);
}

/* Unpacks data into *resp_p. */
static st_status_t srpc_unpack(const srpc_method_t *method, const char *target, const uint8_t *data,
                               size_t len, ProtobufCMessage **resp_p, srpc_error_t *err)
{
    ProtobufCMessage *resp = protobuf_c_message_unpack(method->resp_desc, NULL, len, data);

    if (resp == NULL) {
        if (err != NULL) {
            snprintf(err->message, sizeof(err->message), "answer of %zu bytes does not parse as %s",
                     len, method->resp_desc->name);
        }
        lg_warn("rpc call: answer does not parse target=%s method=%s bytes=%zu", target,
                method->path, len);
        return ST_ERR_PROTOCOL;
    }
    *resp_p = resp;
    return ST_OK;
}

/*
 * Turns a completed call into a status. On success the response is unpacked
 * into *resp_p when method is set (read in place, no copy of its bytes), else
 * its bytes are copied into *data_p (malloc'd). err is filled on failure.
 * Cleans op up.
 */
static st_status_t srpc_cop_finish(srpc_cop_t *op, const char *target, const char *path,
                                   const srpc_method_t *method, ProtobufCMessage **resp_p,
                                   uint8_t **data_p, size_t *len_p, srpc_error_t *err)
{
    st_status_t st = ST_OK;
    srpc_error_t local;

    if (err == NULL) {
        err = &local;
    }
    err->grpc_code = (int)op->code;
    srpc_slice_to_str(op->details, err->message, sizeof(err->message));
    err->retry_after_ms = 0;
    err->ring_epoch = srpc_ring_epoch_find(&op->trail_md);
    if (op->code != GRPC_STATUS_OK) {
        st = st_status_from_grpc((int)op->code);
        if (op->code == GRPC_STATUS_RESOURCE_EXHAUSTED &&
            srpc_retry_hint_find(&op->trail_md, &err->retry_after_ms)) {
            st = ST_ERR_OVERLOADED;
        }
        lg_debug("rpc call failed target=%s method=%s code=%d msg=\"%s\"", target, path,
                 (int)op->code, err->message);
    } else if (op->recv_bb == NULL) {
        st = ST_ERR_PROTOCOL;
        snprintf(err->message, sizeof(err->message), "%s answered OK without a message", path);
        lg_warn("rpc call: answer without a message target=%s method=%s", target, path);
    } else if (method != NULL) {
        const uint8_t *data;
        size_t len;

        st = srpc_bb_view(op->recv_bb, &data, &len);
        if (st == ST_OK) {
            st = srpc_unpack(method, target, data, len, resp_p, err);
            srpc_bb_view_done();
        } else {
            snprintf(err->message, sizeof(err->message), "cannot read the answer: %s",
                     st_strerror(st));
        }
    } else {
        st = srpc_bb_read(op->recv_bb, data_p, len_p);
        if (st != ST_OK) {
            snprintf(err->message, sizeof(err->message), "cannot read the answer: %s",
                     st_strerror(st));
        }
    }
    srpc_cop_cleanup(op);
    return st;
}

/*
 * One call on the thread's pluck queue (creating and destroying a queue per
 * call cost more than the rest of a small call's client side).
 */
static st_status_t srpc_call_bb(srpc_channel_t *ch, const char *path, grpc_byte_buffer *send_bb,
                                int timeout_ms, const srpc_method_t *method,
                                ProtobufCMessage **resp_p, uint8_t **data_p, size_t *len_p,
                                srpc_error_t *err)
{
    grpc_completion_queue *cq = srpc_thread_cq();
    srpc_cop_t op;
    st_status_t st;

    if (cq == NULL) {
        grpc_byte_buffer_destroy(send_bb);
        return ST_ERR_NOMEM;
    }
    st = srpc_cop_start(&op, ch, path, send_bb, cq, srpc_deadline_from_ms(timeout_ms), &op);
    if (st == ST_OK) {
        grpc_event ev =
            grpc_completion_queue_pluck(cq, &op, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) { /* cannot happen with an infinite wait */
            lg_error("rpc call: completion queue failed target=%s method=%s", ch->target, path);
        }
        st = srpc_cop_finish(&op, ch->target, path, method, resp_p, data_p, len_p, err);
    } else {
        srpc_cop_cleanup(&op);
        if (err != NULL) {
            err->grpc_code = st_status_to_grpc(st);
            snprintf(err->message, sizeof(err->message), "could not start the call");
        }
    }
    return st;
}

st_status_t srpc_call_raw(srpc_channel_t *ch, const char *path, const void *req, size_t req_len,
                          int timeout_ms, void **resp_p, size_t *resp_len_p, srpc_error_t *err)
{
    grpc_slice slice;
    grpc_byte_buffer *bb;
    uint8_t *data = NULL;
    size_t len = 0;
    st_status_t st;

    if (ch == NULL || path == NULL || (req == NULL && req_len != 0) || resp_p == NULL ||
        resp_len_p == NULL) {
        return ST_ERR_INVALID;
    }
    slice = grpc_slice_from_copied_buffer(req, req_len);
    bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    st = srpc_call_bb(ch, path, bb, timeout_ms, NULL, NULL, &data, &len, err);
    if (st == ST_OK) {
        *resp_p = data;
        *resp_len_p = len;
    }
    return st;
}

st_status_t srpc_call(srpc_channel_t *ch, const srpc_method_t *method, const ProtobufCMessage *req,
                      int timeout_ms, ProtobufCMessage **resp_p, srpc_error_t *err)
{
    grpc_byte_buffer *bb;
    st_status_t st;

    if (ch == NULL || method == NULL || req == NULL || resp_p == NULL ||
        req->descriptor != method->req_desc) {
        lg_error("rpc call: NULL argument or request of the wrong type method=%s",
                 method && method->path ? method->path : "?");
        return ST_ERR_INVALID;
    }
    st = srpc_bb_pack(req, &bb);
    if (st != ST_OK) {
        return st;
    }
    return srpc_call_bb(ch, method->path, bb, timeout_ms, method, resp_p, NULL, NULL, err);
}

st_status_t srpc_fanout(const srpc_method_t *method, srpc_fanout_item_t *items, size_t n,
                        int timeout_ms)
{
    gpr_timespec deadline = srpc_deadline_from_ms(timeout_ms);
    grpc_completion_queue *cq;
    srpc_cop_t *ops;
    size_t started = 0, done = 0;

    if (method == NULL || (items == NULL && n != 0)) {
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].ch == NULL || items[i].req == NULL ||
            items[i].req->descriptor != method->req_desc) {
            lg_error("rpc fan-out: item without channel or request of the wrong type "
                     "method=%s item=%zu",
                     method->path, i);
            return ST_ERR_INVALID;
        }
    }
    ops = calloc(n ? n : 1, sizeof(*ops));
    cq = srpc_thread_cq();
    if (ops == NULL || cq == NULL) {
        free(ops);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        srpc_fanout_item_t *it = &items[i];
        grpc_byte_buffer *bb;

        it->resp = NULL;
        memset(&it->err, 0, sizeof(it->err));
        it->status = srpc_bb_pack(it->req, &bb);
        if (it->status == ST_OK) {
            it->status = srpc_cop_start(&ops[i], it->ch, method->path, bb, cq, deadline, &ops[i]);
            if (it->status != ST_OK) {
                srpc_cop_cleanup(&ops[i]);
            }
        }
        if (it->status != ST_OK) {
            it->err.grpc_code = st_status_to_grpc(it->status);
            snprintf(it->err.message, sizeof(it->err.message), "could not start the call");
            continue;
        }
        started++;
    }
    /*
     * Every call runs at once; waiting for them in item order on the thread's
     * pluck queue ends when the slowest has ended, as waiting in completion
     * order would.
     */
    for (size_t i = 0; i < n && done < started; i++) {
        srpc_fanout_item_t *it = &items[i];
        grpc_event ev;

        if (ops[i].call == NULL) { /* never started */
            continue;
        }
        ev = grpc_completion_queue_pluck(cq, &ops[i], gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE) { /* cannot happen with an infinite wait */
            lg_error("rpc fan-out: completion queue failed method=%s", method->path);
        }
        it->status = srpc_cop_finish(&ops[i], it->ch->target, method->path, method, &it->resp, NULL,
                                     NULL, &it->err);
        done++;
    }
    free(ops);
    return ST_OK;
}

void srpc_fanout_free(srpc_fanout_item_t *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (items[i].resp != NULL) {
            protobuf_c_message_free_unpacked(items[i].resp, NULL);
            items[i].resp = NULL;
        }
    }
}

st_status_t srpc_health_check(srpc_channel_t *ch, const char *service, int timeout_ms,
                              int *status_p, srpc_error_t *err)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    st_status_t st;

    if (status_p == NULL) {
        return ST_ERR_INVALID;
    }
    req.service = (char *)(service ? service : "");
    st = srpc_call(ch, &srpc_health_check_method, &req.base, timeout_ms, &resp, err);
    if (st == ST_OK) {
        *status_p = (int)((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return st;
}
