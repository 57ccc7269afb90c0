/*
 * stream.c - a streaming client call: one request, then the server's answers
 * one by one (etcd's Watch and LeaseKeepAlive, rpc/etcd.c).
 *
 * The call lives on its own pluck completion queue with three tags: the
 * first batch (metadata and the request), the status (started at once, it
 * completes when the call ends) and one receive at a time. A receive that
 * times out stays pending and is plucked again by the next srpc_stream_recv().
 */
#include "srpc_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

enum { SRPC_TAG_SEND = 1, SRPC_TAG_STATUS = 2, SRPC_TAG_RECV = 3 };

struct srpc_stream {
    grpc_completion_queue *cq;
    grpc_call *call;
    const srpc_method_t *method;
    char target[128];
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    grpc_metadata_array init_md;
    grpc_metadata_array trail_md;
    grpc_status_code code;
    grpc_slice details;
    int send_pending, status_pending, recv_pending;
    int got_init_md; /* the first receive also took the initial metadata */
    int ended;
};

/* Plucks tag, at most until deadline; 1 when it completed (ok in *ok_p). */
static int srpc_stream_pluck(srpc_stream_t *s, intptr_t tag, gpr_timespec deadline, int *ok_p)
{
    grpc_event ev = grpc_completion_queue_pluck(s->cq, (void *)tag, deadline, NULL);

    if (ev.type != GRPC_OP_COMPLETE) {
        return 0;
    }
    *ok_p = ev.success;
    return 1;
}

static st_status_t srpc_stream_start(srpc_stream_t *s, srpc_channel_t *ch)
{
    grpc_op ops[2], st_op;
    grpc_call_error e1, e2;

    s->call = grpc_channel_create_call(srpc_channel_grpc(ch), NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
                                       grpc_slice_from_static_string(s->method->path), NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (s->call == NULL) {
        lg_error("rpc stream: gRPC could not create the call target=%s method=%s", s->target,
                 s->method->path);
        return ST_ERR_INTERNAL;
    }
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = s->send_bb;
    memset(&st_op, 0, sizeof(st_op));
    st_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st_op.data.recv_status_on_client.trailing_metadata = &s->trail_md;
    st_op.data.recv_status_on_client.status = &s->code;
    st_op.data.recv_status_on_client.status_details = &s->details;
    e1 = grpc_call_start_batch(s->call, ops, 2, (void *)(intptr_t)SRPC_TAG_SEND, NULL);
    s->send_pending = e1 == GRPC_CALL_OK;
    e2 = grpc_call_start_batch(s->call, &st_op, 1, (void *)(intptr_t)SRPC_TAG_STATUS, NULL);
    s->status_pending = e2 == GRPC_CALL_OK;
    if (e1 != GRPC_CALL_OK || e2 != GRPC_CALL_OK) {
        lg_error("rpc stream: gRPC refused the batch target=%s method=%s error=%d", s->target,
                 s->method->path, (int)(e1 != GRPC_CALL_OK ? e1 : e2));
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

st_status_t srpc_stream_open(srpc_channel_t *ch, const srpc_method_t *method,
                             const ProtobufCMessage *req, srpc_stream_t **s_p)
{
    srpc_stream_t *s;
    st_status_t st;

    if (ch == NULL || method == NULL || req == NULL || s_p == NULL ||
        req->descriptor != method->req_desc) {
        lg_error("rpc stream: NULL argument or request of the wrong type method=%s",
                 method && method->path ? method->path : "?");
        return ST_ERR_INVALID;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        lg_error("rpc stream: out of memory method=%s", method->path);
        return ST_ERR_NOMEM;
    }
    s->method = method;
    snprintf(s->target, sizeof(s->target), "%s", srpc_channel_target(ch));
    s->details = grpc_empty_slice();
    grpc_metadata_array_init(&s->init_md);
    grpc_metadata_array_init(&s->trail_md);
    srpc_grpc_ref();
    s->cq = grpc_completion_queue_create_for_pluck(NULL);
    st = s->cq != NULL ? srpc_bb_pack(req, &s->send_bb) : ST_ERR_NOMEM;
    if (st == ST_OK) {
        st = srpc_stream_start(s, ch);
    }
    if (st != ST_OK) {
        srpc_stream_close(s);
        return st;
    }
    *s_p = s;
    return ST_OK;
}

/* The stream has ended: waits for its status and turns it into a status. */
static st_status_t srpc_stream_end(srpc_stream_t *s, srpc_error_t *err)
{
    int ok;

    if (s->status_pending &&
        srpc_stream_pluck(s, SRPC_TAG_STATUS, gpr_inf_future(GPR_CLOCK_REALTIME), &ok)) {
        s->status_pending = 0;
    }
    s->ended = 1;
    if (err != NULL) {
        err->grpc_code = (int)s->code;
        srpc_slice_to_str(s->details, err->message, sizeof(err->message));
    }
    return s->code == GRPC_STATUS_OK ? ST_ERR_UNAVAILABLE : st_status_from_grpc((int)s->code);
}

st_status_t srpc_stream_recv(srpc_stream_t *s, int timeout_ms, ProtobufCMessage **resp_p,
                             srpc_error_t *err)
{
    gpr_timespec deadline = srpc_deadline_from_ms(timeout_ms);
    ProtobufCMessage *resp;
    uint8_t *data;
    size_t len;
    st_status_t st;
    int ok = 0;

    if (s->ended) {
        return srpc_stream_end(s, err);
    }
    if (!s->recv_pending) {
        grpc_op ops[2];
        size_t n = 0;

        memset(ops, 0, sizeof(ops));
        if (!s->got_init_md) {
            ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
            ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->init_md;
            s->got_init_md = 1;
        }
        ops[n].op = GRPC_OP_RECV_MESSAGE;
        ops[n++].data.recv_message.recv_message = &s->recv_bb;
        if (grpc_call_start_batch(s->call, ops, n, (void *)(intptr_t)SRPC_TAG_RECV, NULL) !=
            GRPC_CALL_OK) {
            return srpc_stream_end(s, err);
        }
        s->recv_pending = 1;
    }
    if (!srpc_stream_pluck(s, SRPC_TAG_RECV, deadline, &ok)) {
        return ST_ERR_TIMEOUT;
    }
    s->recv_pending = 0;
    if (!ok || s->recv_bb == NULL) {
        return srpc_stream_end(s, err);
    }
    st = srpc_bb_read(s->recv_bb, &data, &len);
    grpc_byte_buffer_destroy(s->recv_bb);
    s->recv_bb = NULL;
    if (st != ST_OK) {
        return st;
    }
    resp = protobuf_c_message_unpack(s->method->resp_desc, NULL, len, data);
    free(data);
    if (resp == NULL) {
        lg_warn("rpc stream: answer does not parse target=%s method=%s bytes=%zu", s->target,
                s->method->path, len);
        return ST_ERR_PROTOCOL;
    }
    *resp_p = resp;
    return ST_OK;
}

void srpc_stream_close(srpc_stream_t *s)
{
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_REALTIME);
    int ok;

    if (s == NULL) {
        return;
    }
    if (s->call != NULL) {
        grpc_call_cancel(s->call, NULL);
        if (s->send_pending) {
            srpc_stream_pluck(s, SRPC_TAG_SEND, forever, &ok);
        }
        if (s->recv_pending) {
            srpc_stream_pluck(s, SRPC_TAG_RECV, forever, &ok);
        }
        if (s->status_pending) {
            srpc_stream_pluck(s, SRPC_TAG_STATUS, forever, &ok);
        }
        grpc_call_unref(s->call);
    }
    if (s->send_bb != NULL) {
        grpc_byte_buffer_destroy(s->send_bb);
    }
    if (s->recv_bb != NULL) {
        grpc_byte_buffer_destroy(s->recv_bb);
    }
    grpc_metadata_array_destroy(&s->init_md);
    grpc_metadata_array_destroy(&s->trail_md);
    grpc_slice_unref(s->details);
    if (s->cq != NULL) {
        grpc_completion_queue_shutdown(s->cq);
        grpc_completion_queue_destroy(s->cq);
    }
    free(s);
    srpc_grpc_unref();
}
