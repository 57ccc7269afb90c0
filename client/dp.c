/*
 * dp.c - the data plane's set-up (dp_internal.h): the transport and its
 * threads, each node's endpoint and region keys from its Hello, the
 * caller's registered buffers, and the helpers every transfer uses.
 */
#include "dp_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

uint64_t sc_dp_test_shared_bytes(st_client_t *c)
{
    return c->dp != NULL ? atomic_load(&c->dp->cp_bytes) : 0;
}

void sc_dp_test_lease_skew(st_client_t *c, int64_t ns)
{
    if (c->dp != NULL) {
        c->dp->lease_skew_ns = ns;
    }
}

void sc_dp_test_on_posted(st_client_t *c, void (*fn)(void *), void *arg)
{
    if (c->dp != NULL) {
        c->dp->on_posted_arg = arg;
        c->dp->on_posted = fn;
    }
}

void sc_dp_test_row_clock_slow(st_client_t *c, int64_t ns)
{
    if (c->dp != NULL) {
        c->dp->row_slow_ns = ns;
    }
}

void sc_dp_bench_rows_unverified(st_client_t *c, int on)
{
    if (c->dp != NULL) {
        c->dp->rows_unverified = on;
    }
}

uint64_t sc_dp_rows_refused(st_client_t *c)
{
    return c->dp != NULL ? atomic_load(&c->dp->rows_refused) : 0;
}

st_status_t sc_dp_create(st_client_t *c, const char *spec)
{
    tp_config_t cfg;
    char kind[32], provider[128] = "";
    const char *colon = strchr(spec, ':');
    size_t kl = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    sc_dp_t *dp;
    st_status_t st;

    memset(&cfg, 0, sizeof(cfg));
    if (kl >= sizeof(kind) || (colon != NULL && strlen(colon + 1) >= sizeof(provider))) {
        return sc_error(ST_ERR_INVALID, "transport '%s': too long", spec);
    }
    memcpy(kind, spec, kl);
    kind[kl] = '\0';
    if (colon != NULL) {
        strcpy(provider, colon + 1);
    }
    if (tp_parse_backend(kind, &cfg.backend) != ST_OK ||
        (colon != NULL && cfg.backend != TP_FABRIC)) {
        return sc_error(ST_ERR_INVALID,
                        "transport '%s': expected inline, ucx, libfabric or "
                        "libfabric:<provider>",
                        spec);
    }
    cfg.fabric_provider = provider[0] ? provider : NULL;
    dp = calloc(1, sizeof(*dp));
    if (dp == NULL || sc_lc_init(&dp->lc, SC_LC_SETS) != ST_OK) {
        free(dp);
        return ST_ERR_NOMEM;
    }
    st = tp_create(&cfg, &dp->tp);
    if (st != ST_OK) {
        sc_lc_destroy(&dp->lc);
        free(dp);
        return sc_error(st, "transport '%s' cannot start here: %s", spec, st_strerror(st));
    }
    dp->backend = cfg.backend;
    (void)tp_msg_listen(dp->tp, sc_tc_on_msg, dp); /* libfabric: gRPC only */
    dp->tc_next = 1;
    pthread_mutex_init(&dp->lock, NULL);
    pthread_mutex_init(&dp->loc_lock, NULL);
    pthread_cond_init(&dp->loc_work, NULL);
    pthread_cond_init(&dp->loc_done, NULL);
    for (uint32_t i = 0; i < SC_MAX_NODES; i++) {
        pthread_mutex_init(&dp->node[i].lock, NULL);
        dp->node[i].gen = 1;
    }
    pthread_mutex_init(&dp->cp_lock, NULL);
    pthread_cond_init(&dp->cp_work, NULL);
    c->dp = dp;
    for (int i = 0; i < SC_DP_LOCATORS; i++) {
        if (pthread_create(&dp->loc_th[i], NULL, sc_dp_locator_main, dp) != 0) {
            sc_dp_destroy(c);
            return sc_error(ST_ERR_INTERNAL, "transport '%s': cannot start its threads", spec);
        }
        dp->n_loc++;
    }
    for (uint32_t i = 0; i + 1 < c->copy_threads && i < SC_DP_COPIERS_MAX; i++) {
        if (pthread_create(&dp->cp_th[i], NULL, sc_dp_copier_main, dp) != 0) {
            sc_dp_destroy(c);
            return sc_error(ST_ERR_INTERNAL, "transport '%s': cannot start its threads", spec);
        }
        dp->n_cp++;
    }
    return ST_OK;
}

/* What a node holds of its endpoint, which was just closed, forgotten. */
static void sc_dp_node_forget(sc_dp_node_t *n)
{
    n->ep = NULL;
    free(n->addr);
    n->addr = NULL;
    n->addr_len = 0;
    free(n->reg);
    n->reg = NULL;
    n->cap = 0;
    free(n->old);
    n->old = NULL;
    n->n_old = n->cap_old = 0;
    n->epoch = 0;
    n->gen++;
    n->resets++;
}

void sc_dp_node_reset(sc_dp_node_t *n)
{
    /* Closing the endpoint destroys every key unpacked on it. */
    tp_ep_close(n->ep);
    sc_dp_node_forget(n);
}

void sc_dp_node_abort(sc_dp_node_t *n)
{
    tp_ep_abort(n->ep);
    sc_dp_node_forget(n);
}

void sc_dp_destroy(st_client_t *c)
{
    sc_dp_t *dp = c->dp;

    if (dp == NULL) {
        return;
    }
    sc_dp_locators_stop(dp);
    pthread_mutex_destroy(&dp->loc_lock);
    pthread_cond_destroy(&dp->loc_work);
    pthread_cond_destroy(&dp->loc_done);
    sc_threads_stop(&dp->cp_lock, &dp->cp_work, &dp->cp_stop, dp->cp_th, &dp->n_cp);
    pthread_mutex_destroy(&dp->cp_lock);
    pthread_cond_destroy(&dp->cp_work);
    for (uint32_t i = 0; i < SC_MAX_NODES; i++) {
        sc_dp_node_reset(&dp->node[i]);
        pthread_mutex_destroy(&dp->node[i].lock);
    }
    for (size_t i = 0; i < dp->n_bufs; i++) {
        tp_mem_deregister(dp->tp, dp->bufs[i].mem);
    }
    free(dp->bufs);
    tp_destroy(dp->tp);
    pthread_mutex_destroy(&dp->lock);
    sc_lc_destroy(&dp->lc);
    free(dp);
    c->dp = NULL;
}

/* The array arr of *cap elements of elem bytes grown (doubling, from first)
 * to hold need, the new elements zeroed: the new array (arr freed), with
 * *cap updated, or NULL (arr and *cap as they were). */
static void *sc_dp_grow(void *arr, size_t *cap, size_t need, size_t elem, size_t first)
{
    size_t n = *cap ? *cap : first;
    uint8_t *m;

    while (n < need) {
        n *= 2;
    }
    m = realloc(arr, elem * n);
    if (m != NULL) {
        memset(m + elem * *cap, 0, elem * (n - *cap));
        *cap = n;
    }
    return m;
}

/* Connects to node n at addr again (its address changed, or it had no
 * endpoint). dp->lock held. */
static st_status_t sc_dp_connect(sc_dp_t *dp, sc_dp_node_t *n, const ProtobufCBinaryData *addr)
{
    st_status_t st;

    sc_dp_node_reset(n);
    n->addr = malloc(addr->len);
    if (n->addr == NULL) {
        st = ST_ERR_NOMEM;
    } else {
        memcpy(n->addr, addr->data, addr->len);
        n->addr_len = addr->len;
        st = tp_connect(dp->tp, n->addr, n->addr_len, &n->ep);
    }
    if (st != ST_OK) {
        sc_dp_node_reset(n);
    }
    return st;
}

/* Takes region g of node n's Hello: unpacks its key if it is new or
 * changed (the replaced key is kept until the client closes). ST_OK also
 * for a region that cannot be used (reads of it are misses); ST_ERR_NOMEM.
 * dp->lock held. */
static st_status_t sc_dp_take_region(sc_dp_node_t *n, const Strata__V1__Region *g)
{
    tp_rkey_t *rkey = NULL;
    sc_dp_region_t *x;

    if (g->rkey.len == 0) {
        return ST_OK;
    }
    if (g->id >= n->cap) {
        sc_dp_region_t *m = sc_dp_grow(n->reg, &n->cap, (size_t)g->id + 1, sizeof(*m), 16);

        if (m == NULL) {
            return ST_ERR_NOMEM;
        }
        n->reg = m;
    }
    x = &n->reg[g->id];
    if (x->rkey != NULL && x->base == g->remote_addr && x->len == g->length) {
        return ST_OK; /* unchanged (a region is only ever replaced, never moved) */
    }
    if (tp_rkey_unpack(n->ep, g->rkey.data, g->rkey.len, &rkey) != ST_OK) {
        return ST_OK; /* unusable: reads of it fall back to a miss */
    }
    if (x->rkey != NULL) {
        if (n->n_old == n->cap_old) {
            tp_rkey_t **o = sc_dp_grow(n->old, &n->cap_old, n->n_old + 1, sizeof(*o), 8);

            if (o == NULL) {
                tp_rkey_destroy(rkey);
                return ST_ERR_NOMEM;
            }
            n->old = o;
        }
        n->old[n->n_old++] = x->rkey;
    }
    x->rkey = rkey;
    x->base = g->remote_addr;
    x->len = g->length;
    return ST_OK;
}

/* Takes a Hello answer of node i: connects (again, if its address changed)
 * and unpacks the keys of regions that are new or changed. Node lock held. */
static st_status_t sc_dp_take_hello(sc_dp_t *dp, uint32_t i, const Strata__V1__HelloResponse *r)
{
    sc_dp_node_t *n = &dp->node[i];
    int want = dp->backend == TP_UCX ? STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX
                                     : STRATA__V1__TRANSPORT_KIND__TRANSPORT_LIBFABRIC;
    st_status_t st = ST_OK;

    if ((int)r->transport != want || r->transport_address.len == 0) {
        pthread_mutex_lock(&dp->lock);
        sc_dp_node_reset(n); /* this node is served inline */
        n->tcalls = 0;
        pthread_mutex_unlock(&dp->lock);
        return ST_OK;
    }
    pthread_mutex_lock(&dp->lock);
    if (n->ep == NULL || n->addr_len != r->transport_address.len ||
        memcmp(n->addr, r->transport_address.data, n->addr_len) != 0) {
        st = sc_dp_connect(dp, n, &r->transport_address);
    }
    for (size_t k = 0; st == ST_OK && k < r->n_regions; k++) {
        st = sc_dp_take_region(n, r->regions[k]);
    }
    if (st == ST_OK) {
        n->gen += n->epoch != r->region_epoch;
        n->epoch = r->region_epoch;
    }
    n->committed_ro = r->committed_read_only;
    n->tcalls = st == ST_OK && n->ep != NULL && r->transport_calls &&
                r->transport_call_key.len == sizeof(n->call_key);
    if (n->tcalls) {
        memcpy(n->call_key, r->transport_call_key.data, sizeof(n->call_key));
    }
    pthread_mutex_unlock(&dp->lock);
    return st;
}

void sc_dp_hello(st_client_t *c, uint32_t i, const Strata__V1__HelloResponse *r)
{
    sc_dp_t *dp = c->dp;
    st_status_t st;

    if (dp == NULL) {
        return;
    }
    pthread_mutex_lock(&dp->node[i].lock);
    st = sc_dp_take_hello(dp, i, r);
    pthread_mutex_unlock(&dp->node[i].lock);
    if (st != ST_OK) {
        lg_warn("dataplane: cannot use node=%s's transport (%s): inline for it", c->nodes[i].addr,
                st_strerror(st));
    }
}

/* Asks node i for its regions again (a Hello of at most timeout_ms). Node
 * lock held. */
static void sc_dp_refresh(st_client_t *c, uint32_t i, int timeout_ms)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    req.protocol_version = 1;
    req.tenant = c->tenant;
    req.model = c->model;
    req.client_name = "libstrata";
    if (srpc_call(c->nodes[i].ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, timeout_ms,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        return;
    }
    if (resp->namespace_id == c->ns) {
        (void)sc_dp_take_hello(c->dp, i, resp);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

int sc_dp_poll(sc_dp_t *dp)
{
    int n;

    pthread_mutex_lock(&dp->lock);
    n = tp_progress(dp->tp);
    pthread_mutex_unlock(&dp->lock);
    return n;
}

/* ------------------------------------------------- local registration -- */

/* The registered buffer that holds [p, p + len), or NULL. dp->lock held. */
static tp_mem_t *sc_dp_find_buf(sc_dp_t *dp, const void *p, size_t len)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < dp->n_bufs; i++) {
        if (b >= dp->bufs[i].ptr && b + len <= dp->bufs[i].ptr + dp->bufs[i].len) {
            return dp->bufs[i].mem;
        }
    }
    return NULL;
}

st_status_t st_client_register(st_client_t *c, void *ptr, size_t len)
{
    sc_dp_t *dp = c != NULL ? c->dp : NULL;
    tp_mem_t *mem;
    st_status_t st;

    if (c == NULL || ptr == NULL || len == 0) {
        return sc_error(ST_ERR_INVALID, "register: NULL client or buffer, or length 0");
    }
    if (dp == NULL) {
        return ST_OK; /* inline: nothing to register */
    }
    pthread_mutex_lock(&dp->lock);
    if (dp->n_bufs == dp->cap_bufs) {
        sc_dp_buf_t *b = sc_dp_grow(dp->bufs, &dp->cap_bufs, dp->n_bufs + 1, sizeof(*b), 8);

        if (b == NULL) {
            pthread_mutex_unlock(&dp->lock);
            return sc_error(ST_ERR_NOMEM, "register: out of memory");
        }
        dp->bufs = b;
    }
    st = tp_mem_register(dp->tp, ptr, len, &mem);
    if (st == ST_OK) {
        dp->bufs[dp->n_bufs++] = (sc_dp_buf_t){ptr, len, mem};
    }
    pthread_mutex_unlock(&dp->lock);
    return st == ST_OK ? ST_OK
                       : sc_error(st, "register: the transport refused %zu bytes at %p: %s", len,
                                  ptr, st_strerror(st));
}

st_status_t st_client_deregister(st_client_t *c, void *ptr)
{
    sc_dp_t *dp = c != NULL ? c->dp : NULL;

    if (c == NULL || ptr == NULL) {
        return sc_error(ST_ERR_INVALID, "deregister: NULL client or buffer");
    }
    if (dp == NULL) {
        return ST_OK;
    }
    pthread_mutex_lock(&dp->lock);
    for (size_t i = 0; i < dp->n_bufs; i++) {
        if (dp->bufs[i].ptr == ptr) {
            tp_mem_deregister(dp->tp, dp->bufs[i].mem);
            dp->bufs[i] = dp->bufs[--dp->n_bufs];
            pthread_mutex_unlock(&dp->lock);
            return ST_OK;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    return sc_error(ST_ERR_NOT_FOUND, "deregister: %p was not registered", ptr);
}

/* -------------------------------------------------------- transfers -- */

void sc_dp_done(void *user, st_status_t status)
{
    sc_dp_op_t *o = user;

    if (status != ST_OK) {
        o->failed = 1;
    }
    atomic_fetch_sub(o->pending, 1);
}

tp_mem_t *sc_dp_local(sc_dp_t *dp, sc_dp_op_t *o, void *p, size_t len)
{
    tp_mem_t *m = sc_dp_find_buf(dp, p, len);

    if (m == NULL && o->tmp == NULL && tp_mem_register(dp->tp, p, len, &o->tmp) != ST_OK) {
        return NULL;
    }
    return m != NULL ? m : o->tmp;
}

void sc_dp_wait(sc_dp_t *dp, _Atomic size_t *pending)
{
    while (atomic_load(pending) > 0) {
        int n;

        n = sc_dp_poll(dp);
        if (n <= 0) {
            sched_yield();
        }
    }
}

void sc_dp_settle(sc_dp_t *dp)
{
    uint64_t t0 = cm_mono_ns();
    size_t left;

    for (;;) {
        pthread_mutex_lock(&dp->lock);
        (void)tp_progress(dp->tp);
        left = tp_orphaned(dp->tp);
        pthread_mutex_unlock(&dp->lock);
        if (left == 0) {
            return;
        }
        if (cm_mono_ns() - t0 >= SC_DP_SETTLE_MS * 1000000ull) {
            /* libfabric's shm provider was seen never to release some
             * reads cancelled this way; the call keeps near its deadline. */
            lg_warn_ratelimited("dataplane: %zu cancelled transfers still held by the transport "
                                "%d ms after their endpoints closed; returning (their buffers "
                                "may yet be written)",
                                left, SC_DP_SETTLE_MS);
            return;
        }
        sched_yield();
    }
}

st_status_t sc_dp_wait_until(sc_dp_t *dp, _Atomic size_t *pending, uint64_t until)
{
    while (atomic_load(pending) > 0) {
        int n = sc_dp_poll(dp);

        /* The deadline is checked whether or not the poll completed
         * something: other calls' completions keep it busy while ours may
         * never land. */
        if (atomic_load(pending) > 0 && cm_mono_ns() >= until) {
            return ST_ERR_TIMEOUT;
        }
        if (n <= 0) {
            sched_yield();
        }
    }
    return ST_OK;
}

void sc_dp_free_tmp(sc_dp_t *dp, sc_dp_op_t *o, size_t n)
{
    pthread_mutex_lock(&dp->lock);
    for (size_t i = 0; i < n; i++) {
        tp_mem_deregister(dp->tp, o[i].tmp);
        o[i].tmp = NULL;
    }
    pthread_mutex_unlock(&dp->lock);
}

sc_dp_region_t *sc_dp_region(st_client_t *c, uint32_t node, uint32_t id, uint64_t epoch,
                             int *refreshed, int timeout_ms)
{
    sc_dp_node_t *n = &c->dp->node[node];

    if ((id >= n->cap || n->reg[id].rkey == NULL || epoch != n->epoch) && !*refreshed) {
        *refreshed = 1;
        sc_dp_refresh(c, node, timeout_ms);
    }
    if (n->ep == NULL || id >= n->cap || n->reg[id].rkey == NULL) {
        return NULL;
    }
    return &n->reg[id];
}

int sc_dp_owner(st_client_t *c, const st_hash_t *chain, uint64_t block)
{
    int o = sc_owner(c, sc_segment_first(c, chain, block));

    return o >= 0 && c->dp->node[o].ep != NULL ? o : -1;
}

void sc_dp_key(Strata__V1__ObjectKey *k, const st_hash_t *hash, uint8_t kind, uint16_t layer)
{
    strata__v1__object_key__init(k);
    k->block_hash.data = (uint8_t *)hash->b;
    k->block_hash.len = ST_HASH_BYTES;
    k->kind = pk_kind_to_wire(kind);
    k->layer = kind == ST_KIND_KDA || kind == ST_KIND_VIS ? 0 : layer;
}
