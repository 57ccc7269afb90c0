/* tcall_raw.c - see tcall_raw.h. */
#include "tcall_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TR_HELLO_MS 30000

static uint64_t tr_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The transport's listener: every message is an answer, or counted as bad. */
static void tr_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    tr_client_t *c = arg;
    tcall_frame_t f;
    tr_answer_t *a;

    (void)msg;
    if (tcall_parse(data, len, 1, &f, c->bad_why, sizeof(c->bad_why)) != ST_OK) {
        c->n_bad++;
        return;
    }
    if (c->n_ans == c->cap_ans) {
        size_t cap = c->cap_ans ? 2 * c->cap_ans : 256;
        tr_answer_t *p = realloc(c->ans, cap * sizeof(*p));

        if (p == NULL) {
            snprintf(c->bad_why, sizeof(c->bad_why), "out of memory for answers");
            c->n_bad++;
            return;
        }
        c->ans = p;
        c->cap_ans = cap;
    }
    a = &c->ans[c->n_ans];
    memset(a, 0, sizeof(*a));
    a->id = f.id;
    a->code = f.code;
    memcpy(a->msg, f.text, f.text_len);
    a->msg[f.text_len] = '\0';
    if (f.body_len > 0) {
        a->body = malloc(f.body_len);
        if (a->body == NULL) {
            snprintf(c->bad_why, sizeof(c->bad_why), "out of memory for an answer's body");
            c->n_bad++;
            return;
        }
        memcpy(a->body, f.body, f.body_len);
        a->body_len = f.body_len;
    }
    c->n_ans++;
}

st_status_t tr_open(tr_client_t *c, const char *addr, const char *token, const char *tenant,
                    const char *model)
{
    return tr_open_cfg(c, addr, token, tenant, model, NULL);
}

st_status_t tr_open_cfg(tr_client_t *c, const char *addr, const char *token, const char *tenant,
                        const char *model, const tp_config_t *cfg)
{
    Strata__V1__HelloRequest hello = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *hr = NULL;
    srpc_channel_config_t ccfg = {.token = token};
    tp_config_t tcfg = {.backend = TP_UCX};
    srpc_error_t err;
    st_status_t st;

    if (cfg != NULL) {
        tcfg = *cfg;
    }
    memset(c, 0, sizeof(*c));
    st = srpc_channel_open(addr, &ccfg, &c->ch);
    if (st != ST_OK) {
        fprintf(stderr, "tcall_raw: cannot open a channel to %s: %s\n", addr, st_strerror(st));
        return st;
    }
    hello.protocol_version = 1;
    hello.tenant = (char *)tenant;
    hello.model = (char *)model;
    hello.transport = tcfg.backend == TP_FABRIC ? STRATA__V1__TRANSPORT_KIND__TRANSPORT_LIBFABRIC
                                                : STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX;
    st = srpc_call(c->ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &hello.base, TR_HELLO_MS,
                   (ProtobufCMessage **)&hr, &err);
    if (st != ST_OK) {
        fprintf(stderr, "tcall_raw: Hello to %s (tenant %s) failed: %s (code %d: %s)\n", addr,
                tenant, st_strerror(st), err.grpc_code, err.message);
        goto err_close_channel;
    }
    c->hello = hr;
    c->ns = hr->namespace_id;
    c->serves = hr->transport_calls;
    c->key_len = hr->transport_call_key.len < TR_KEY_MAX ? hr->transport_call_key.len : TR_KEY_MAX;
    if (c->key_len > 0) {
        memcpy(c->key, hr->transport_call_key.data, c->key_len);
    }
    if (hr->transport != hello.transport) {
        fprintf(stderr, "tcall_raw: %s has no %s transport (Hello says %d)\n", addr,
                tp_backend_name(tcfg.backend), (int)hr->transport);
        st = ST_ERR_UNSUPPORTED;
        goto err_free_hello;
    }
    st = tp_create(&tcfg, &c->tp);
    if (st != ST_OK) {
        fprintf(stderr, "tcall_raw: cannot create a %s transport: %s\n",
                tp_backend_name(tcfg.backend), st_strerror(st));
        goto err_free_hello;
    }
    st = tp_msg_listen(c->tp, tr_on_msg, c);
    if (st == ST_ERR_UNSUPPORTED && tcfg.backend == TP_FABRIC) {
        st = ST_OK; /* no messages: one-sided operations only (c->serves is 0) */
    }
    if (st == ST_OK) {
        st = tp_connect(c->tp, hr->transport_address.data, hr->transport_address.len, &c->ep);
    }
    if (st != ST_OK) {
        fprintf(stderr, "tcall_raw: cannot connect to %s's transport: %s\n", addr, st_strerror(st));
        goto err_destroy_transport;
    }
    return ST_OK;

err_destroy_transport:
    tp_destroy(c->tp);
err_free_hello:
    protobuf_c_message_free_unpacked(&hr->base, NULL);
err_close_channel:
    srpc_channel_close(c->ch);
    memset(c, 0, sizeof(*c));
    return st;
}

void tr_forget(tr_client_t *c)
{
    for (size_t i = 0; i < c->n_ans; i++) {
        free(c->ans[i].body);
    }
    c->n_ans = 0;
    c->n_bad = 0;
}

void tr_close(tr_client_t *c)
{
    if (c->tp != NULL) {
        tp_destroy(c->tp); /* closes the endpoint too */
    }
    tr_forget(c);
    free(c->ans);
    if (c->hello != NULL) {
        protobuf_c_message_free_unpacked(&c->hello->base, NULL);
    }
    srpc_channel_close(c->ch);
    memset(c, 0, sizeof(*c));
}

st_status_t tr_send(tr_client_t *c, const void *bytes, size_t len)
{
    return tp_msg_send(c->ep, bytes, len);
}

st_status_t tr_call(tr_client_t *c, uint32_t method, uint64_t id, const void *key, size_t key_len,
                    const void *body, size_t body_len)
{
    size_t n;
    uint8_t *frame;
    st_status_t st;

    if (key_len > TCALL_TOKEN_MAX) {
        key_len = TCALL_TOKEN_MAX;
    }
    frame = malloc(TCALL_HDR + key_len + body_len);
    if (frame == NULL) {
        return ST_ERR_NOMEM;
    }
    n = tcall_head(frame, 0, method, id, key, key == NULL ? 0 : key_len);
    if (body_len > 0) {
        memcpy(frame + n, body, body_len);
    }
    st = tr_send(c, frame, n + body_len);
    free(frame);
    return st;
}

st_status_t tr_call_msg(tr_client_t *c, uint32_t method, uint64_t id, const void *key,
                        size_t key_len, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *body = malloc(len + 1);
    st_status_t st;

    if (body == NULL) {
        return ST_ERR_NOMEM;
    }
    len = protobuf_c_message_pack(msg, body);
    st = tr_call(c, method, id, key, key_len, body, len);
    free(body);
    return st;
}

size_t tr_wait(tr_client_t *c, size_t want, int timeout_ms)
{
    uint64_t start = tr_now_ms();

    while (c->n_ans + c->n_bad < want && tr_now_ms() - start < (uint64_t)timeout_ms) {
        if (tp_progress(c->tp) <= 0) {
            usleep(50);
        }
    }
    return c->n_ans + c->n_bad;
}

void tr_idle(tr_client_t *c, int ms)
{
    uint64_t start = tr_now_ms();

    while (tr_now_ms() - start < (uint64_t)ms) {
        if (tp_progress(c->tp) <= 0) {
            usleep(200);
        }
    }
}

tr_answer_t *tr_find(tr_client_t *c, uint64_t id)
{
    for (size_t i = 0; i < c->n_ans; i++) {
        if (c->ans[i].id == id) {
            return &c->ans[i];
        }
    }
    return NULL;
}
