/*
 * call.c - calls over the transport with gRPC fallback (call.h): the
 * requests of a fan-out go as frames over the data plane's endpoints
 * (tcall.h) to the nodes whose Hello offered it, and whatever is not
 * answered within SC_TC_PATIENCE_MS is made again over gRPC.
 */
#include "call.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "dp_internal.h"
#include "log.h"
#include "tcall.h"

/* The transport's listener (dp->lock held): an answer to one of our calls. */
void sc_tc_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    sc_dp_t *dp = arg;
    tcall_frame_t f;
    char why[160];
    sc_tc_t **pp, *t = NULL;

    (void)msg;
    if (tcall_parse(data, len, 1, &f, why, sizeof(why)) != ST_OK) {
        lg_warn_ratelimited("dataplane: answer over the transport refused: %s bytes=%zu", why, len);
        return;
    }
    for (pp = &dp->tc_head; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == f.id) {
            t = *pp;
            *pp = t->next;
            break;
        }
    }
    if (t == NULL) {
        return; /* the caller gave up on it (and asked over gRPC) */
    }
    t->code = f.code;
    t->hint_ms = f.hint_ms;
    snprintf(t->msg, sizeof(t->msg), "%.*s", (int)f.text_len, f.text);
    if (f.body_len > 0) {
        t->body = malloc(f.body_len);
        if (t->body == NULL) {
            t->code = 8; /* RESOURCE_EXHAUSTED */
            snprintf(t->msg, sizeof(t->msg), "out of memory for an answer of %zu bytes",
                     f.body_len);
        } else {
            memcpy(t->body, f.body, f.body_len);
            t->body_len = f.body_len;
        }
    }
    atomic_store_explicit(&t->done, 1, memory_order_release);
}

/* The node whose channel is ch, or -1. */
static int sc_node_of(const st_client_t *c, const srpc_channel_t *ch)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].ch == ch) {
            return (int)i;
        }
    }
    return -1;
}

/* Sends item's request to node over the transport as call t (NULL: its
 * answer is not wanted and will be dropped). 1: sent. */
int sc_tc_send(st_client_t *c, uint32_t node, uint32_t tcm, const srpc_fanout_item_t *item,
               sc_tc_t *t)
{
    sc_dp_t *dp = c->dp;
    sc_dp_node_t *nd = &dp->node[node];
    size_t body = protobuf_c_message_get_packed_size(item->req), n;
    uint8_t *frame = malloc(TCALL_HDR + sizeof(nd->call_key) + body);
    int sent = 0;

    if (frame == NULL) {
        return 0;
    }
    pthread_mutex_lock(&nd->lock);
    pthread_mutex_lock(&dp->lock);
    if (nd->tcalls && nd->ep != NULL) {
        uint64_t id = t != NULL ? dp->tc_next++ : 0; /* 0: nobody waits for the answer */

        n = tcall_head(frame, 0, tcm, id, (const char *)nd->call_key, sizeof(nd->call_key));
        n += protobuf_c_message_pack(item->req, frame + n);
        if (t != NULL) {
            t->id = id;
            t->next = dp->tc_head;
            dp->tc_head = t;
        }
        if (tp_msg_send(nd->ep, frame, n) == ST_OK) {
            sent = 1;
        } else if (t != NULL) {
            dp->tc_head = t->next;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    pthread_mutex_unlock(&nd->lock);
    free(frame);
    return sent;
}

/* Removes t from the calls in flight if its answer has not come. dp->lock held. */
static void sc_tc_forget(sc_dp_t *dp, sc_tc_t *t)
{
    for (sc_tc_t **pp = &dp->tc_head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            return;
        }
    }
}

/* Sends what can go over the transport. Returns 0 when nothing was sent for
 * lack of memory (then every item is gRPC's). */
int sc_fan_start(sc_fan_t *f, st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                 srpc_fanout_item_t *items, size_t n, int timeout_ms)
{
    memset(f, 0, sizeof(*f));
    f->c = c;
    f->method = method;
    f->items = items;
    f->n = n;
    f->timeout_ms = timeout_ms;
    f->start = cm_mono_ns();
    f->tc = calloc(n + 1, sizeof(*f->tc));
    f->via = calloc(n + 1, 1);
    if (f->tc == NULL || f->via == NULL) {
        free(f->tc), free(f->via);
        f->tc = NULL;
        f->via = NULL;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int node = sc_node_of(c, items[i].ch);

        items[i].resp = NULL;
        f->via[i] = node >= 0 && sc_tc_send(c, (uint32_t)node, tcm, &items[i], &f->tc[i]);
    }
    return 1;
}

/* Whether every item of f went over the transport. */
static int sc_fan_all_sent(const sc_fan_t *f)
{
    for (size_t i = 0; f->via != NULL && i < f->n; i++) {
        if (f->via[i] == 0) {
            return 0;
        }
    }
    return f->via != NULL;
}

/* Progresses the transport until every item of [lo, hi) sent over it was
 * answered, or SC_TC_PATIENCE_MS (at most the fan-out's timeout) passed
 * since the fan-out started. */
static void sc_fan_spin(sc_fan_t *f, size_t lo, size_t hi)
{
    uint64_t patience =
        (uint64_t)(f->timeout_ms > 0 && f->timeout_ms < SC_TC_PATIENCE_MS ? f->timeout_ms
                                                                          : SC_TC_PATIENCE_MS) *
        1000000ull;
    uint64_t t0 = cm_mono_ns();

    for (;;) {
        size_t left = 0;
        uint64_t now = cm_mono_ns();

        for (size_t i = lo; i < hi; i++) {
            left += f->via[i] == 1 && !atomic_load_explicit(&f->tc[i].done, memory_order_acquire);
        }
        if (left == 0 || now - f->start > patience) {
            break;
        }
        if (sc_dp_poll(f->c->dp) <= 0) {
            /* Spin for the usual answer (a few hundred microseconds), then
             * nap: a waiter must not take the cores the daemons and the
             * copying threads need (the client's locators wait here too). */
            if (now - t0 < SC_TC_SPIN_NS) {
                sched_yield();
            } else {
                nanosleep(&(struct timespec){0, 20000}, NULL);
            }
        }
    }
}

/* Fills item i from its answer over the transport, as srpc_fanout() would. */
static void sc_fan_answer(sc_fan_t *f, size_t i)
{
    sc_tc_t *t = &f->tc[i];
    srpc_fanout_item_t *it = &f->items[i];

    memset(&it->err, 0, sizeof(it->err));
    if (t->code != 0) {
        /* Refused for load, with its hint: as a gRPC refusal with strata-retry-after-ms. */
        it->status = t->hint_ms != 0 ? ST_ERR_OVERLOADED : st_status_from_grpc((int)t->code);
        it->err.grpc_code = (int)t->code;
        it->err.retry_after_ms = t->hint_ms;
        snprintf(it->err.message, sizeof(it->err.message), "%s", t->msg);
    } else {
        it->resp = protobuf_c_message_unpack(f->method->resp_desc, NULL, t->body_len,
                                             t->body != NULL ? t->body : (uint8_t *)"");
        it->status = it->resp != NULL ? ST_OK : ST_ERR_PROTOCOL;
    }
    free(t->body);
    t->body = NULL;
}

void sc_fan_wait(sc_fan_t *f, size_t lo, size_t hi)
{
    sc_dp_t *dp = f->c->dp;
    srpc_fanout_item_t *rest;
    size_t n_rest = 0;

    if (f->via == NULL) {
        return;
    }
    sc_fan_spin(f, lo, hi);
    /* Unanswered: over gRPC now (the late answer, if any, is dropped). */
    rest = calloc(hi - lo + 1, sizeof(*rest));
    pthread_mutex_lock(&dp->lock);
    for (size_t i = lo; i < hi; i++) {
        if (f->via[i] == 1 && !atomic_load_explicit(&f->tc[i].done, memory_order_acquire)) {
            sc_tc_forget(dp, &f->tc[i]);
            f->via[i] = 3;
            if (rest != NULL) {
                rest[n_rest++] = f->items[i];
            }
        }
    }
    pthread_mutex_unlock(&dp->lock);
    if (n_rest > 0) {
        int64_t spent = (int64_t)((cm_mono_ns() - f->start) / 1000000ull);
        int t_ms =
            f->timeout_ms > 0 ? (int)(f->timeout_ms - spent > 1 ? f->timeout_ms - spent : 1) : 0;

        lg_debug("dataplane: %zu calls over the transport unanswered after %d ms: over gRPC",
                 n_rest, SC_TC_PATIENCE_MS);
        (void)srpc_fanout(f->method, rest, n_rest, t_ms);
    }
    for (size_t i = lo, k = 0; i < hi; i++) {
        if (f->via[i] == 3) {
            if (rest != NULL) {
                f->items[i] = rest[k++];
            } else {
                f->items[i].status = ST_ERR_NOMEM;
            }
            f->via[i] = 2;
        } else if (f->via[i] == 1) {
            f->via[i] = 2;
            sc_fan_answer(f, i);
        }
    }
    free(rest);
}

/* Waits for whatever is left and frees f. */
void sc_fan_end(sc_fan_t *f)
{
    sc_fan_wait(f, 0, f->n);
    free(f->tc), free(f->via);
    f->tc = NULL;
    f->via = NULL;
}

/* Makes the calls of f that did not go over the transport over gRPC, now
 * (their answers queue up meanwhile). Returns srpc_fanout()'s status. */
st_status_t sc_fan_grpc(sc_fan_t *f)
{
    srpc_fanout_item_t *rest;
    size_t n_rest = 0;
    st_status_t st;

    if (sc_fan_all_sent(f)) {
        return ST_OK;
    }
    rest = calloc(f->n, sizeof(*rest));
    if (rest == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < f->n; i++) {
        if (f->via[i] == 0) {
            rest[n_rest++] = f->items[i];
        }
    }
    st = srpc_fanout(f->method, rest, n_rest, f->timeout_ms);
    for (size_t i = 0, k = 0; i < f->n; i++) {
        if (f->via[i] == 0) {
            f->items[i] = rest[k++];
        }
    }
    free(rest);
    return st;
}

st_status_t sc_fanout(st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                      srpc_fanout_item_t *items, size_t n, int timeout_ms)
{
    sc_fan_t f;
    st_status_t st;

    if (c->dp == NULL || !c->tcalls || n == 0 ||
        !sc_fan_start(&f, c, method, tcm, items, n, timeout_ms)) {
        return srpc_fanout(method, items, n, timeout_ms);
    }
    st = sc_fan_grpc(&f);
    sc_fan_end(&f);
    return st;
}
