/*
 * dataplane.c - stratad's transport: chunk allocation and registration,
 * remote keys for Hello, the progress thread, and the calls it serves over
 * the transport (see dataplane.h).
 */
#include "dataplane.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "clock.h"
#include "srpc.h"
#include "log.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "tcall.h"

#define DP_MAX_NS     4096  /* namespace ids the table covers (the store's are small) */
#define DP_WK_BUCKETS 4096u /* write keys: hash buckets by (namespace, reservation) */
#define DP_DRAIN_MAX  4096u /* calls held from one drain of the transport (admission on) */
#define DP_FLOWS      64u   /* clients told apart by the round robin; more share the last */

/* A reservation's write key: its extent, registered for remote write. */
typedef struct dp_wkey {
    struct dp_wkey *next;
    uint32_t ns_id;
    uint64_t resv_id;
    tp_mem_t *mem;
} dp_wkey_t;

/* The registered chunks of one namespace, by region id. */
typedef struct dp_ns {
    tp_mem_t **mem;
    uint32_t cap;
} dp_ns_t;

struct cd_dataplane {
    pthread_mutex_t lock; /* serialises every use of tp and the tables */
    tp_transport_t *tp;
    tp_backend_t backend;
    dp_ns_t *ns[DP_MAX_NS + 1];
    pthread_t thread;
    int running;
    int wake_fd; /* eventfd that stops the progress thread */
    _Atomic int stopping;
    /* Calls over the transport: received under lock, served without it. */
    pthread_mutex_t calls_lock; /* held while a call is served; guards srv */
    srpc_server_t *srv;         /* NULL: calls are not served */
    tp_msg_t **pending;
    size_t n_pending, cap_pending;
    /* Admission of those calls (cd_dp_serve_calls: the gRPC server's settings; on when its
     * max_serving is): drained, refused past the limits, served round robin by client. */
    srpc_admission_t adm;
    uint64_t call_ewma_ns; /* smoothed time to serve one (progress thread only) */
    /* Write keys (lock): only where the transport enforces access. */
    int enforced;
    dp_wkey_t *wkeys[DP_WK_BUCKETS];
    size_t n_wkeys;
};

/* The transport's listener (lock held): keeps the message for the loop. */
static void dp_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    cd_dataplane_t *dp = arg;

    (void)data;
    (void)len;
    if (dp->n_pending == dp->cap_pending) {
        size_t cap = dp->cap_pending ? 2 * dp->cap_pending : 64;
        tp_msg_t **p = realloc(dp->pending, cap * sizeof(*p));

        if (p == NULL) {
            lg_warn_ratelimited("dataplane: call dropped: out of memory");
            return; /* the caller's deadline answers for it */
        }
        dp->pending = p;
        dp->cap_pending = cap;
    }
    tp_msg_keep(msg);
    dp->pending[dp->n_pending++] = msg;
}

/* Answers call id of msg with code (why: its message; hint: a refusal's retry hint, 0:
 * none) and body (code 0 only). Lock not held. */
static void dp_answer(cd_dataplane_t *dp, tp_msg_t *msg, uint64_t id, int code, const char *why,
                      uint32_t hint, const void *body, size_t body_len)
{
    uint8_t *out = malloc(TCALL_HDR + TCALL_MSG_MAX + body_len);

    if (out != NULL) {
        size_t n = tcall_head(out, 1, (uint32_t)code, id, why, code ? strlen(why) : 0);

        if (hint != 0) {
            tcall_set_hint(out, hint);
        }
        if (body_len > 0) {
            memcpy(out + n, body, body_len);
        }
        pthread_mutex_lock(&dp->lock);
        (void)tp_msg_reply(msg, out, n + body_len);
        pthread_mutex_unlock(&dp->lock);
    }
    free(out);
}

/* Serves one kept call (lock not held), then answers it under the lock. */
static void dp_serve_call(cd_dataplane_t *dp, tp_msg_t *msg, const void *data, size_t len)
{
    tcall_frame_t f;
    char why[TCALL_MSG_MAX];
    void *body = NULL;
    size_t body_len = 0;
    int code;

    if (tcall_parse(data, len, 0, &f, why, sizeof(why)) != ST_OK) {
        lg_warn_ratelimited("dataplane: call over the transport refused: %s bytes=%zu", why, len);
        code = 3; /* INVALID_ARGUMENT */
        if (len < TCALL_HDR) {
            return; /* no call id to answer */
        }
    } else {
        /* The key goes to the server's authenticate callback as the call's token (hex):
         * it acts as the principal of the Hello that handed it out (auth.h). */
        char key[2 * CD_DP_CALL_KEY + 1] = "";

        for (size_t i = 0; f.text_len == CD_DP_CALL_KEY && i < CD_DP_CALL_KEY; i++) {
            snprintf(key + 2 * i, 3, "%02x", (uint8_t)f.text[i]);
        }
        pthread_mutex_lock(&dp->calls_lock);
        if (dp->srv != NULL) {
            srpc_server_invoke(dp->srv, tcall_path(f.method), key[0] ? key : NULL, f.body,
                               f.body_len, &body, &body_len, &code, why, sizeof(why));
        } else {
            code = 14; /* UNAVAILABLE */
            snprintf(why, sizeof(why), "the daemon is stopping");
        }
        pthread_mutex_unlock(&dp->calls_lock);
    }
    if (code != 0) {
        free(body);
        body = NULL;
        body_len = 0;
    }
    dp_answer(dp, msg, f.id, code, why, 0, body, body_len);
    free(body);
}

/* The client (its call key's first 8 bytes) and method of a kept call; 0 and 0 for a frame
 * too short to say (it is refused when served). */
static void dp_call_of(const void *data, size_t len, uint64_t *flow, uint32_t *method)
{
    const uint8_t *p = data;

    *flow = 0;
    *method = 0;
    if (len >= TCALL_HDR) {
        *method = cm_get_le32(p + 4);
    }
    if (len >= TCALL_HDR + 8) {
        memcpy(flow, p + TCALL_HDR, 8);
    }
}

/* Refuses a kept call for load: RESOURCE_EXHAUSTED naming the limit, with the retry hint. */
static void dp_refuse(cd_dataplane_t *dp, tp_msg_t *msg, uint32_t method, const char *limit,
                      size_t waiting, uint64_t per_call_ns)
{
    const uint8_t *p = tp_msg_data(msg);
    const char *path = tcall_path(method);
    uint64_t id = (uint64_t)cm_get_le32(p + 8) | (uint64_t)cm_get_le32(p + 12) << 32;
    uint64_t ms = (waiting + 1) * (per_call_ns ? per_call_ns : 20000) / 1000000;
    uint32_t hint = ms < 1 ? 1 : ms > TCALL_HINT_MAX ? TCALL_HINT_MAX : (uint32_t)ms;
    char why[256];

    snprintf(why, sizeof(why), "%s: overloaded: %s; retry after %u ms",
             path != NULL ? path : "call over the transport", limit, hint);
    lg_ratelimited(LG_WARN, "call refused for load msg=\"%s\"", why);
    pthread_mutex_lock(&dp->calls_lock);
    if (dp->srv != NULL && path != NULL) {
        srpc_server_count_refused(dp->srv, path);
    }
    pthread_mutex_unlock(&dp->calls_lock);
    dp_answer(dp, msg, id, (int)TCALL_CODE_EXHAUSTED, why, hint, NULL, 0);
}

/*
 * Serves a batch of kept calls (one drain of the transport) with admission on: in arrival
 * order, a call that would take the batch's admitted calls past max_queued_calls, or its
 * client's past tenant_max_queued_calls, is refused at once (a Release never is: it frees
 * leases); the others are served round robin over the clients, one call of each per turn,
 * each client's in its own order. Frees each message.
 */
static void dp_serve_batch(cd_dataplane_t *dp, tp_msg_t **batch, size_t n)
{
    uint64_t flow_id[DP_FLOWS];
    uint32_t flow_n[DP_FLOWS], n_flows = 0, max_rank = 0;
    uint32_t *rank = malloc(sizeof(*rank) * (n + 1));
    size_t admitted = 0;
    const srpc_admission_t *a = &dp->adm;

    for (size_t i = 0; i < n; i++) {
        uint64_t flow;
        uint32_t method, f;
        char limit[160] = "";

        dp_call_of(tp_msg_data(batch[i]), tp_msg_len(batch[i]), &flow, &method);
        for (f = 0; f < n_flows && flow_id[f] != flow; f++) {
        }
        if (f == n_flows) {
            if (n_flows < DP_FLOWS) {
                flow_id[n_flows] = flow;
                flow_n[n_flows++] = 0;
            } else {
                f = DP_FLOWS - 1; /* shared by the clients past the table's size */
            }
        }
        /* One call runs (this thread), the rest wait: as for gRPC, max_serving calls run and
         * the limits count the ones waiting behind them. */
        if (method != TCALL_RELEASE) {
            if (a->max_queued_calls != 0 && admitted > a->max_queued_calls) {
                snprintf(limit, sizeof(limit),
                         "%zu calls over the transport waiting, max_queued_calls=%u", admitted - 1,
                         a->max_queued_calls);
            } else if (a->flow_max_calls != 0 && flow_n[f] > a->flow_max_calls) {
                snprintf(limit, sizeof(limit),
                         "%u calls of this client over the transport waiting, "
                         "tenant_max_queued_calls=%u",
                         flow_n[f] - 1, a->flow_max_calls);
            }
        }
        if (limit[0] != '\0' || rank == NULL) {
            if (limit[0] == '\0') {
                snprintf(limit, sizeof(limit), "out of memory to queue the call");
            }
            dp_refuse(dp, batch[i], method, limit, admitted, dp->call_ewma_ns);
            pthread_mutex_lock(&dp->lock);
            tp_msg_free(batch[i]);
            pthread_mutex_unlock(&dp->lock);
            batch[i] = NULL;
            continue;
        }
        rank[i] = flow_n[f];
        max_rank = rank[i] > max_rank ? rank[i] : max_rank;
        if (method != TCALL_RELEASE) {
            flow_n[f]++; /* a Release is always served and takes no place */
            admitted++;
        }
    }
    /* Round robin: every client's first call in arrival order, then every second, ... */
    for (uint32_t r = 0; rank != NULL && r <= max_rank; r++) {
        for (size_t i = 0; i < n; i++) {
            if (batch[i] == NULL || rank[i] != r) {
                continue;
            }
            uint64_t t0 = cm_mono_ns(), ns;

            dp_serve_call(dp, batch[i], tp_msg_data(batch[i]), tp_msg_len(batch[i]));
            ns = cm_mono_ns() - t0;
            dp->call_ewma_ns = dp->call_ewma_ns ? (dp->call_ewma_ns * 7 + ns) / 8 : ns;
            pthread_mutex_lock(&dp->lock);
            tp_msg_free(batch[i]);
            pthread_mutex_unlock(&dp->lock);
            batch[i] = NULL;
        }
    }
    free(rank);
}

/* Serves the calls the last progress call received. */
static void dp_serve_pending(cd_dataplane_t *dp)
{
    unsigned on;

    pthread_mutex_lock(&dp->lock);
    on = dp->adm.max_serving;
    pthread_mutex_unlock(&dp->lock);
    if (on != 0) {
        tp_msg_t **batch;
        size_t n;

        pthread_mutex_lock(&dp->lock);
        batch = dp->pending;
        n = dp->n_pending;
        dp->pending = NULL;
        dp->n_pending = dp->cap_pending = 0;
        pthread_mutex_unlock(&dp->lock);
        if (n > 0) {
            dp_serve_batch(dp, batch, n);
        }
        free(batch);
        return;
    }
    for (;;) {
        tp_msg_t *msg;
        size_t n;

        pthread_mutex_lock(&dp->lock);
        n = dp->n_pending;
        msg = n > 0 ? dp->pending[0] : NULL;
        if (n > 0) {
            memmove(dp->pending, dp->pending + 1, (n - 1) * sizeof(*dp->pending));
            dp->n_pending--;
        }
        pthread_mutex_unlock(&dp->lock);
        if (msg == NULL) {
            return;
        }
        dp_serve_call(dp, msg, tp_msg_data(msg), tp_msg_len(msg));
        pthread_mutex_lock(&dp->lock);
        tp_msg_free(msg);
        pthread_mutex_unlock(&dp->lock);
    }
}

static void *dp_progress_main(void *arg)
{
    cd_dataplane_t *dp = arg;
    int efd = -1;

    pthread_mutex_lock(&dp->lock);
    if (tp_event_fd(dp->tp, &efd) != ST_OK) {
        efd = -1;
    }
    pthread_mutex_unlock(&dp->lock);
    while (!dp->stopping) {
        struct pollfd pfd[2] = {{.fd = dp->wake_fd, .events = POLLIN},
                                {.fd = efd, .events = POLLIN}};
        int n, timeout = 0;
        st_status_t st = ST_ERR_UNSUPPORTED;

        pthread_mutex_lock(&dp->lock);
        n = tp_progress(dp->tp);
        /* With admission on, everything that has arrived is taken before any is served,
         * so that the calls waiting are seen (and refused past the limits), not left in
         * the transport's buffers. */
        for (int more = n; dp->adm.max_serving != 0 && more > 0 && dp->n_pending < DP_DRAIN_MAX;) {
            more = tp_progress(dp->tp);
        }
        if (n == 0 && efd >= 0) {
            st = tp_arm(dp->tp);
        }
        pthread_mutex_unlock(&dp->lock);
        if (n > 0) {
            dp_serve_pending(dp);
        }
        if (n > 0 || st == ST_ERR_BUSY) {
            continue;
        }
        if (n < 0) {
            lg_warn_ratelimited("dataplane: progress failed: %s", st_strerror((st_status_t)n));
        }
        if (st == ST_OK) {
            /* Asleep until the transport has work; bounded, since some
             * providers also want to be polled. */
            timeout = 1;
            (void)poll(pfd, 2, timeout);
        } else {
            /* No event fd: poll the transport every 50 us. */
            struct timespec ts = {0, 50000};

            (void)poll(pfd, 1, 0);
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

st_status_t cd_dp_create(const char *kind, const char *provider, cd_dataplane_t **dp_p)
{
    tp_config_t cfg;
    cd_dataplane_t *dp;
    st_status_t st;

    *dp_p = NULL;
    if (kind == NULL || kind[0] == '\0' || strcmp(kind, "none") == 0) {
        lg_info("dataplane: transport=none: inline Put/Get only");
        return ST_OK;
    }
    memset(&cfg, 0, sizeof(cfg));
    if (tp_parse_backend(kind, &cfg.backend) != ST_OK) {
        lg_error("transport=%s: expected none, ucx or libfabric", kind);
        return ST_ERR_INVALID;
    }
    cfg.fabric_provider = provider != NULL && provider[0] != '\0' ? provider : NULL;
    dp = calloc(1, sizeof(*dp));
    if (dp == NULL) {
        return ST_ERR_NOMEM;
    }
    pthread_mutex_init(&dp->lock, NULL);
    pthread_mutex_init(&dp->calls_lock, NULL);
    dp->backend = cfg.backend;
    dp->wake_fd = -1;
    st = tp_create(&cfg, &dp->tp);
    if (st != ST_OK) {
        lg_warn("dataplane: transport=%s%s%s cannot start (%s): serving inline Put/Get only", kind,
                cfg.fabric_provider ? " fabric_provider=" : "",
                cfg.fabric_provider ? cfg.fabric_provider : "", st_strerror(st));
        pthread_mutex_destroy(&dp->lock);
        pthread_mutex_destroy(&dp->calls_lock);
        free(dp);
        return st == ST_ERR_NOMEM ? ST_ERR_NOMEM : ST_OK;
    }
    dp->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (dp->wake_fd < 0 || pthread_create(&dp->thread, NULL, dp_progress_main, dp) != 0) {
        lg_error("dataplane: cannot start the progress thread: %s", strerror(errno));
        cd_dp_destroy(dp);
        return ST_ERR_NOMEM;
    }
    dp->running = 1;
    dp->enforced = tp_enforces_access(dp->tp);
    lg_info("dataplane: transport=%s%s%s ready committed_read_only=%d%s",
            tp_backend_name(dp->backend), cfg.fabric_provider ? " fabric_provider=" : "",
            cfg.fabric_provider ? cfg.fabric_provider : "", dp->enforced,
            dp->enforced ? "" : " (the transport does not enforce keys: readers verify checksums)");
    *dp_p = dp;
    return ST_OK;
}

void cd_dp_destroy(cd_dataplane_t *dp)
{
    if (dp == NULL) {
        return;
    }
    if (dp->running) {
        uint64_t one = 1;

        dp->stopping = 1;
        if (write(dp->wake_fd, &one, sizeof(one)) < 0) {
            /* the poll times out within 1 ms anyway */
        }
        pthread_join(dp->thread, NULL);
    }
    if (dp->wake_fd >= 0) {
        close(dp->wake_fd);
    }
    for (size_t i = 0; i < dp->n_pending; i++) {
        tp_msg_free(dp->pending[i]);
    }
    free(dp->pending);
    for (uint32_t b = 0; b < DP_WK_BUCKETS; b++) {
        while (dp->wkeys[b] != NULL) {
            dp_wkey_t *w = dp->wkeys[b];

            dp->wkeys[b] = w->next;
            tp_mem_deregister(dp->tp, w->mem);
            free(w);
        }
    }
    /* Regions still registered (the store normally frees them first) go
     * with the transport. */
    tp_destroy(dp->tp);
    for (uint32_t i = 0; i <= DP_MAX_NS; i++) {
        if (dp->ns[i] != NULL) {
            free(dp->ns[i]->mem);
            free(dp->ns[i]);
        }
    }
    pthread_mutex_destroy(&dp->lock);
    pthread_mutex_destroy(&dp->calls_lock);
    free(dp);
}

int cd_dp_serve_calls(cd_dataplane_t *dp, srpc_server_t *srv)
{
    int on;

    if (dp == NULL) {
        return 0;
    }
    pthread_mutex_lock(&dp->calls_lock); /* waits for a call being served */
    pthread_mutex_lock(&dp->lock);
    on = srv != NULL && tp_msg_listen(dp->tp, dp_on_msg, dp) == ST_OK;
    if (srv == NULL) {
        (void)tp_msg_listen(dp->tp, NULL, NULL);
    }
    dp->srv = on ? srv : NULL;
    if (on) {
        srpc_server_admission(srv, &dp->adm);
    } else {
        memset(&dp->adm, 0, sizeof(dp->adm));
    }
    pthread_mutex_unlock(&dp->lock);
    pthread_mutex_unlock(&dp->calls_lock);
    return on;
}

int cd_dp_serves_calls(cd_dataplane_t *dp, uint8_t *key)
{
    int on;

    if (dp == NULL) {
        return 0;
    }
    pthread_mutex_lock(&dp->calls_lock);
    on = dp->srv != NULL;
    pthread_mutex_unlock(&dp->calls_lock);
    (void)key; /* keys are per Hello now (auth.h) */
    return on;
}

/* The slot of (ns_id, region), grown as needed; NULL without memory. Lock held. */
static tp_mem_t **dp_slot(cd_dataplane_t *dp, uint32_t ns_id, uint32_t region, int grow)
{
    dp_ns_t *t;

    if (ns_id > DP_MAX_NS) {
        return NULL;
    }
    t = dp->ns[ns_id];
    if (t == NULL) {
        if (!grow || (t = dp->ns[ns_id] = calloc(1, sizeof(*t))) == NULL) {
            return NULL;
        }
    }
    if (region >= t->cap) {
        uint32_t cap = t->cap ? t->cap : 16;
        tp_mem_t **m;

        if (!grow) {
            return NULL;
        }
        while (cap <= region) {
            cap *= 2;
        }
        m = realloc(t->mem, sizeof(*m) * cap);
        if (m == NULL) {
            return NULL;
        }
        memset(m + t->cap, 0, sizeof(*m) * (cap - t->cap));
        t->mem = m;
        t->cap = cap;
    }
    return &t->mem[region];
}

st_status_t cd_dp_chunk_alloc(void *ctx, uint32_t ns_id, uint32_t region, size_t len, void **base_p)
{
    cd_dataplane_t *dp = ctx;
    tp_mem_t **slot, *mem = NULL;
    st_status_t st;

    pthread_mutex_lock(&dp->lock);
    slot = dp_slot(dp, ns_id, region, 1);
    if (slot == NULL) {
        pthread_mutex_unlock(&dp->lock);
        return ST_ERR_NOMEM;
    }
    /* Committed bytes are read-only for peers where the transport enforces
     * it; writes then land through each reservation's own key. */
    st = tp_mem_map(dp->tp, NULL, len, dp->enforced ? TP_REMOTE_READ : TP_REMOTE_RW, &mem);
    if (st == ST_OK) {
        *slot = mem;
        *base_p = tp_mem_addr(mem);
    }
    pthread_mutex_unlock(&dp->lock);
    if (st == ST_OK) {
        lg_debug("dataplane: region registered ns=%u region=%u bytes=%zu addr=%p", ns_id, region,
                 len, *base_p);
    }
    return st;
}

void cd_dp_chunk_free(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len)
{
    cd_dataplane_t *dp = ctx;
    tp_mem_t **slot;

    pthread_mutex_lock(&dp->lock);
    slot = dp_slot(dp, ns_id, region, 0);
    if (slot != NULL && *slot != NULL && tp_mem_addr(*slot) == base) {
        tp_mem_deregister(dp->tp, *slot);
        *slot = NULL;
    } else {
        lg_error("dataplane: freeing a chunk that is not registered ns=%u region=%u addr=%p "
                 "bytes=%zu",
                 ns_id, region, base, len);
    }
    pthread_mutex_unlock(&dp->lock);
}

int cd_dp_kind(const cd_dataplane_t *dp)
{
    if (dp == NULL) {
        return STRATA__V1__TRANSPORT_KIND__TRANSPORT_NONE;
    }
    return dp->backend == TP_UCX ? STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX
                                 : STRATA__V1__TRANSPORT_KIND__TRANSPORT_LIBFABRIC;
}

static st_status_t dp_copy(const void *src, size_t len, void *(*alloc)(void *, size_t), void *actx,
                           uint8_t **data_p, size_t *len_p)
{
    uint8_t *p = alloc(actx, len ? len : 1);

    if (p == NULL) {
        return ST_ERR_NOMEM;
    }
    memcpy(p, src, len);
    *data_p = p;
    *len_p = len;
    return ST_OK;
}

st_status_t cd_dp_address(cd_dataplane_t *dp, void *(*alloc)(void *actx, size_t len), void *actx,
                          uint8_t **data_p, size_t *len_p)
{
    const void *addr;
    size_t len;
    st_status_t st;

    if (dp == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&dp->lock);
    st = tp_address(dp->tp, &addr, &len);
    if (st == ST_OK) {
        st = dp_copy(addr, len, alloc, actx, data_p, len_p);
    }
    pthread_mutex_unlock(&dp->lock);
    return st;
}

st_status_t cd_dp_rkey(cd_dataplane_t *dp, uint32_t ns_id, uint32_t region,
                       void *(*alloc)(void *actx, size_t len), void *actx, uint8_t **data_p,
                       size_t *len_p)
{
    tp_mem_t **slot;
    const void *key;
    size_t len;
    st_status_t st = ST_ERR_NOT_FOUND;

    if (dp == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&dp->lock);
    slot = dp_slot(dp, ns_id, region, 0);
    if (slot != NULL && *slot != NULL) {
        st = tp_mem_rkey(*slot, &key, &len);
        if (st == ST_OK) {
            st = dp_copy(key, len, alloc, actx, data_p, len_p);
        }
    }
    pthread_mutex_unlock(&dp->lock);
    return st;
}

int cd_dp_committed_read_only(const cd_dataplane_t *dp)
{
    return dp != NULL && dp->enforced;
}

static uint32_t dp_wk_bucket(uint32_t ns_id, uint64_t resv_id)
{
    uint64_t h = (resv_id ^ ((uint64_t)ns_id << 40)) * 0x9e3779b97f4a7c15ULL;

    return (uint32_t)(h >> 52) & (DP_WK_BUCKETS - 1);
}

st_status_t cd_dp_write_key(cd_dataplane_t *dp, uint32_t ns_id, uint64_t resv_id, uint32_t region,
                            uint64_t offset, uint64_t len, void *(*alloc)(void *actx, size_t len),
                            void *actx, uint8_t **data_p, size_t *len_p)
{
    tp_mem_t **slot;
    dp_wkey_t *w;
    const void *key;
    size_t key_len;
    st_status_t st;

    if (dp == NULL || !dp->enforced) {
        return ST_ERR_UNSUPPORTED;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        return ST_ERR_NOMEM;
    }
    pthread_mutex_lock(&dp->lock);
    slot = dp_slot(dp, ns_id, region, 0);
    if (slot == NULL || *slot == NULL || len == 0 || offset > tp_mem_len(*slot) ||
        len > tp_mem_len(*slot) - offset) {
        pthread_mutex_unlock(&dp->lock);
        free(w);
        lg_error("dataplane: write key for an extent outside its region ns=%u region=%u "
                 "offset=%llu bytes=%llu",
                 ns_id, region, (unsigned long long)offset, (unsigned long long)len);
        return ST_ERR_INTERNAL;
    }
    st = tp_mem_map(dp->tp, (uint8_t *)tp_mem_addr(*slot) + offset, len, TP_REMOTE_RW, &w->mem);
    if (st == ST_OK) {
        st = tp_mem_rkey(w->mem, &key, &key_len);
    }
    if (st == ST_OK) {
        st = dp_copy(key, key_len, alloc, actx, data_p, len_p);
    }
    if (st != ST_OK) {
        tp_mem_deregister(dp->tp, w->mem);
        pthread_mutex_unlock(&dp->lock);
        free(w);
        return st;
    }
    w->ns_id = ns_id;
    w->resv_id = resv_id;
    uint32_t b = dp_wk_bucket(ns_id, resv_id);
    w->next = dp->wkeys[b];
    dp->wkeys[b] = w;
    dp->n_wkeys++;
    pthread_mutex_unlock(&dp->lock);
    return ST_OK;
}

void cd_dp_resv_end(void *ctx, uint32_t ns_id, uint64_t resv_id)
{
    cd_dataplane_t *dp = ctx;
    dp_wkey_t **pp, *w = NULL;

    if (dp == NULL || !dp->enforced) {
        return;
    }
    pthread_mutex_lock(&dp->lock);
    for (pp = &dp->wkeys[dp_wk_bucket(ns_id, resv_id)]; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->ns_id == ns_id && (*pp)->resv_id == resv_id) {
            w = *pp;
            *pp = w->next;
            dp->n_wkeys--;
            /* Under the lock that serialises the progress thread: once this
             * returns, the target refuses every later write through the key. */
            tp_mem_deregister(dp->tp, w->mem);
            break;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    free(w);
}

size_t cd_dp_write_keys(cd_dataplane_t *dp)
{
    size_t n;

    if (dp == NULL) {
        return 0;
    }
    pthread_mutex_lock(&dp->lock);
    n = dp->n_wkeys;
    pthread_mutex_unlock(&dp->lock);
    return n;
}
