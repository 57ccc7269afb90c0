/*
 * server_sched.c - fair queueing and admission control of the gRPC server
 * (srpc_admission_t in srpc.h; docs/daemon.md, "Fairness and admission").
 *
 * A worker that takes a call from gRPC names its flow (the tenant, from the
 * principal the authenticate callback filled), checks the limits, and either
 * refuses it (RESOURCE_EXHAUSTED + strata-retry-after-ms) or appends it to the
 * flow's queue. Then, while fewer than max_serving handlers run, it takes the
 * next call round robin over the flows with calls waiting (one call per flow
 * per turn: deficit round robin with a unit cost) and serves it, and goes on
 * until the queues are empty or the slots full. The other n_threads -
 * max_serving workers keep taking calls from gRPC meanwhile, so a flood is
 * queued (and refused past the limits) instead of waiting unseen in gRPC.
 *
 * Lock: sched.lock guards every field of the scheduler and of the queued
 * calls' queue links; do_*() functions run with it held.
 */
#include "srpc_internal.h"
#include "server_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <grpc/support/alloc.h>

#include "log.h"

#define SCHED_MAX_HINT_MS 60000u

st_status_t srpc_sched_init(srpc_server_t *srv, const srpc_admission_t *cfg, unsigned n_threads)
{
    srpc_sched_t *s = &srv->sched;

    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    if (s->cfg.max_serving == 0) {
        return ST_OK;
    }
    /* One worker at least stays free to take (and queue, or refuse) new calls. */
    if (s->cfg.max_serving > (n_threads > 1 ? n_threads - 1 : 1)) {
        s->cfg.max_serving = n_threads > 1 ? n_threads - 1 : 1;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        s->cfg.max_serving = 0;
        return ST_ERR_NOMEM;
    }
    return ST_OK;
}

void srpc_sched_destroy(srpc_server_t *srv)
{
    if (srv->sched.cfg.max_serving != 0) {
        pthread_mutex_destroy(&srv->sched.lock);
        srv->sched.cfg.max_serving = 0;
    }
}

/* The flow named name: found, new, an idle one renamed, or the last (shared). */
static srpc_flow_t *do_flow_find(srpc_sched_t *s, const char *name)
{
    for (size_t i = 0; i < s->n_flows; i++) {
        if (strcmp(s->flows[i].name, name) == 0) {
            return &s->flows[i];
        }
    }
    srpc_flow_t *f = NULL;

    if (s->n_flows < SRPC_MAX_FLOWS - 1) {
        f = &s->flows[s->n_flows++];
    } else {
        for (size_t i = 0; i < SRPC_MAX_FLOWS - 1 && f == NULL; i++) {
            if (s->flows[i].queued == 0) {
                f = &s->flows[i]; /* idle: its counters start again under the new name */
            }
        }
        if (f == NULL) {
            f = &s->flows[SRPC_MAX_FLOWS - 1];
            if (s->n_flows < SRPC_MAX_FLOWS) {
                s->n_flows = SRPC_MAX_FLOWS;
                snprintf(f->name, sizeof(f->name), "(other)");
            }
            return f;
        }
    }
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    return f;
}

/* The retry hint: how long the calls queued take to drain at the current pace. */
static uint32_t do_hint_ms(const srpc_sched_t *s)
{
    uint64_t ms = (s->queued + 1) * (s->ewma_us ? s->ewma_us : 1000) / s->cfg.max_serving / 1000;

    if (ms < 1) {
        ms = 1;
    }
    return ms > SCHED_MAX_HINT_MS ? SCHED_MAX_HINT_MS : (uint32_t)ms;
}

/* Whether one more call of bytes fits the limits; else msg says which limit. */
static bool do_admit(const srpc_sched_t *s, const srpc_flow_t *f, uint64_t bytes, char *msg,
                     size_t cap)
{
    const srpc_admission_t *a = &s->cfg;

    if (a->max_queued_calls != 0 && s->queued + 1 > a->max_queued_calls) {
        snprintf(msg, cap, "%" PRIu64 " calls queued, max_queued_calls=%u", s->queued,
                 a->max_queued_calls);
    } else if (a->max_queued_bytes != 0 && s->queued_bytes + bytes > a->max_queued_bytes) {
        snprintf(msg, cap,
                 "%" PRIu64 " request bytes queued + %" PRIu64 ", max_queued_bytes=%" PRIu64,
                 s->queued_bytes, bytes, a->max_queued_bytes);
    } else if (a->flow_max_calls != 0 && f->queued + 1 > a->flow_max_calls) {
        snprintf(msg, cap, "%" PRIu64 " calls of %s queued, tenant_max_queued_calls=%u", f->queued,
                 f->name, a->flow_max_calls);
    } else if (a->flow_max_bytes != 0 && f->queued_bytes + bytes > a->flow_max_bytes) {
        snprintf(msg, cap,
                 "%" PRIu64 " request bytes of %s queued + %" PRIu64
                 ", tenant_max_queued_bytes=%" PRIu64,
                 f->queued_bytes, f->name, bytes, a->flow_max_bytes);
    } else {
        return true;
    }
    return false;
}

static void do_enqueue(srpc_sched_t *s, srpc_flow_t *f, srpc_scall_t *c)
{
    c->flow = f;
    c->next = NULL;
    c->fifo_next = NULL;
    c->enq_ns = srpc_now_ns();
    c->enq_dispatched = s->dispatched;
    c->enq_own = f->served;
    if (f->tail != NULL) {
        f->tail->next = c;
    } else {
        f->head = c;
    }
    f->tail = c;
    f->queued++;
    f->queued_bytes += c->bytes;
    s->queued++;
    s->queued_bytes += c->bytes;
    if (s->cfg.fifo) {
        if (s->fifo_tail != NULL) {
            s->fifo_tail->fifo_next = c;
        } else {
            s->fifo_head = c;
        }
        s->fifo_tail = c;
    }
}

/* Unlinks the head call of f (FIFO mode: c is both heads). */
static void do_unlink_head(srpc_sched_t *s, srpc_flow_t *f)
{
    srpc_scall_t *c = f->head;

    f->head = c->next;
    if (f->head == NULL) {
        f->tail = NULL;
    }
    if (s->cfg.fifo) {
        s->fifo_head = c->fifo_next;
        if (s->fifo_head == NULL) {
            s->fifo_tail = NULL;
        }
    }
}

/* Takes the next call to serve: round robin over the flows other than skip
 * (NULL: every flow), or the oldest (FIFO, skip NULL only). NULL: none. */
static srpc_scall_t *do_dequeue(srpc_sched_t *s, const srpc_flow_t *skip)
{
    srpc_flow_t *f = NULL;

    if (s->queued == 0) {
        return NULL;
    }
    if (s->cfg.fifo) {
        f = s->fifo_head->flow;
    } else {
        for (size_t k = 1; k <= s->n_flows && f == NULL; k++) {
            size_t i = (s->rr + k) % s->n_flows;

            if (s->flows[i].queued != 0 && &s->flows[i] != skip) {
                f = &s->flows[i];
                s->rr = i;
            }
        }
        if (f == NULL) {
            return NULL;
        }
    }
    srpc_scall_t *c = f->head;
    uint64_t passed = (s->dispatched - c->enq_dispatched) - (f->served - c->enq_own);
    uint64_t waited_us = (srpc_now_ns() - c->enq_ns) / 1000;

    do_unlink_head(s, f);
    f->queued--;
    f->queued_bytes -= c->bytes;
    s->queued--;
    s->queued_bytes -= c->bytes;
    f->served++;
    s->dispatched++;
    if (passed > f->max_passed) {
        f->max_passed = passed;
    }
    s->wait[srpc_latency_bucket(waited_us)]++;
    s->wait_sum_us += waited_us;
    if (s->cfg.on_wait != NULL) {
        s->cfg.on_wait(c->srv->user_arg, waited_us * 1000);
    }
    return c;
}

/* Answers c RESOURCE_EXHAUSTED with its retry hint. */
static void srpc_sched_refuse(srpc_scall_t *c, uint32_t hint_ms, const char *why)
{
    char msg[256];
    char val[16];

    snprintf(msg, sizeof(msg), "%s: overloaded: %s; retry after %u ms",
             c->srv->methods[c->method_idx].method->path, why, hint_ms);
    snprintf(val, sizeof(val), "%u", hint_ms);
    c->trail.key = grpc_slice_from_static_string(SRPC_RETRY_AFTER_KEY);
    c->trail.value = grpc_slice_from_copied_string(val);
    c->n_trail = 1;
    atomic_fetch_add_explicit(&c->srv->methods[c->method_idx].stats.overloaded, 1,
                              memory_order_relaxed);
    lg_ratelimited(LG_WARN, "call refused for load msg=\"%s\"", msg);
    c->start_ns = srpc_now_ns();
    srpc_send(c, GRPC_STATUS_RESOURCE_EXHAUSTED, msg);
}

/*
 * Names c's flow into name (authenticating it once here; srpc_serve() does it
 * again with the context it keeps). Returns false when the call is not to be
 * queued: a health check, or a call its authentication refuses.
 */
static bool srpc_sched_classify(srpc_scall_t *c, char *name, size_t cap)
{
    srpc_server_t *srv = c->srv;
    const srpc_smethod_t *m = &srv->methods[c->method_idx];
    srpc_ctx_t ctx;
    char msg[256];
    bool queue = false;

    if (m->method == &srpc_health_check_method) {
        return false;
    }
    srpc_ctx_start(&ctx, srv, c, m);
    srpc_ctx_find_token(&ctx, &c->md);
    if (srpc_authenticate(&ctx, msg, sizeof(msg)) == GRPC_STATUS_OK) {
        name[0] = '\0';
        if (srv->sched.cfg.flow != NULL) {
            srv->sched.cfg.flow(srv->user_arg, srv->authenticate ? ctx.principal : NULL,
                                srpc_ctx_peer(&ctx), name, cap);
        }
        queue = true;
    }
    srpc_ctx_release(&ctx);
    return queue;
}

void srpc_sched_take(srpc_scall_t *c)
{
    srpc_sched_t *s = &c->srv->sched;
    char name[SRPC_FLOW_NAME + 1];
    char why[200];

    if (s->cfg.max_serving == 0 || !srpc_sched_classify(c, name, sizeof(name))) {
        srpc_serve(c);
        return;
    }
    c->bytes = c->payload != NULL ? grpc_byte_buffer_length(c->payload) : 0;
    pthread_mutex_lock(&s->lock);
    srpc_flow_t *f = do_flow_find(s, name);

    if (!do_admit(s, f, c->bytes, why, sizeof(why))) {
        uint32_t hint = do_hint_ms(s);

        f->refused++;
        s->refused++;
        pthread_mutex_unlock(&s->lock);
        srpc_sched_refuse(c, hint, why);
        return;
    }
    do_enqueue(s, f, c);
    while (s->serving < s->cfg.max_serving && s->queued != 0) {
        srpc_scall_t *next = do_dequeue(s, NULL);
        uint64_t t0;
        uint64_t us;

        s->serving++;
        pthread_mutex_unlock(&s->lock);
        t0 = srpc_now_ns();
        srpc_serve(next); /* may free next: nothing of it is read after */
        us = (srpc_now_ns() - t0) / 1000;
        pthread_mutex_lock(&s->lock);
        s->serving--;
        s->ewma_us = s->ewma_us == 0 ? us : (s->ewma_us * 7 + us) / 8;
    }
    pthread_mutex_unlock(&s->lock);
}

/* > 0 while this thread serves a call in a slot that srpc_ctx_yield() lent. */
static _Thread_local unsigned sched_lent;

int srpc_ctx_yield(srpc_ctx_t *ctx)
{
    srpc_scall_t *self = ctx->call;
    srpc_sched_t *s = &ctx->srv->sched;
    srpc_scall_t *next;
    uint64_t t0, us;

    if (self == NULL || s->cfg.max_serving == 0 || s->cfg.fifo || sched_lent != 0 ||
        self->flow == NULL) {
        return 0;
    }
    pthread_mutex_lock(&s->lock);
    next = do_dequeue(s, self->flow);
    if (next == NULL) {
        pthread_mutex_unlock(&s->lock);
        return 0;
    }
    s->lent++;
    pthread_mutex_unlock(&s->lock);
    sched_lent++;
    t0 = srpc_now_ns();
    srpc_serve(next); /* may free next */
    us = (srpc_now_ns() - t0) / 1000;
    sched_lent--;
    pthread_mutex_lock(&s->lock);
    s->ewma_us = s->ewma_us == 0 ? us : (s->ewma_us * 7 + us) / 8;
    pthread_mutex_unlock(&s->lock);
    return 1;
}

void srpc_server_admission(const srpc_server_t *server, srpc_admission_t *out)
{
    *out = server->sched.cfg; /* written once, before the server starts */
}

void srpc_server_sched_stats(const srpc_server_t *server, srpc_sched_stats_t *out)
{
    srpc_sched_t *s = (srpc_sched_t *)&server->sched;

    memset(out, 0, sizeof(*out));
    if (s->cfg.max_serving == 0) {
        return;
    }
    pthread_mutex_lock(&s->lock);
    out->enabled = true;
    out->queued_calls = s->queued;
    out->queued_bytes = s->queued_bytes;
    out->serving = s->serving;
    out->refused = s->refused;
    memcpy(out->wait, s->wait, sizeof(out->wait));
    out->wait_sum_us = s->wait_sum_us;
    out->lent = s->lent;
    out->n_flows = s->n_flows;
    for (size_t i = 0; i < s->n_flows; i++) {
        srpc_flow_stats_t *o = &out->flows[i];

        snprintf(o->name, sizeof(o->name), "%s", s->flows[i].name);
        o->queued = s->flows[i].queued;
        o->served = s->flows[i].served;
        o->refused = s->flows[i].refused;
        o->max_passed = s->flows[i].max_passed;
    }
    pthread_mutex_unlock(&s->lock);
}
