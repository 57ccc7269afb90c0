/*
 * daemon_members.c - the cluster's member list (members.h): views of the
 * member list and the ring over it, swapped while handlers run, the static
 * peer list, and a channel to each peer, opened on first use with the
 * cluster credential.
 */
#include "daemon.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "rebalance.h"

#define CD_DRAIN_RING_WAIT_MS 5000 /* for the source's ring without a draining node */

static st_status_t cd_static_set_state(void *ctx, cd_member_state_t state, uint64_t *epoch_p)
{
    (void)ctx, (void)state;
    *epoch_p = 0;
    return ST_OK;
}

static st_status_t cd_static_leave(void *ctx)
{
    (void)ctx;
    return ST_OK;
}

const cd_membership_ops_t cd_membership_static_ops = {cd_static_set_state, cd_static_leave, NULL};

static void cd_view_free(cd_view_t *v)
{
    if (v == NULL) {
        return;
    }
    if (v->n > 0) {
        ring_destroy(&v->ring);
    }
    free(v->members);
    free(v->names);
    free(v);
}

int cd_view_find(const cd_view_t *v, const char *addr)
{
    for (uint32_t i = 0; v != NULL && i < v->n; i++) {
        if (strcmp(v->members[i].grpc, addr) == 0) {
            return (int)i;
        }
    }
    return -1;
}

st_status_t cd_view_build(const cd_member_t *m, size_t n, const char *self_name,
                          const char *self_addr, uint32_t vnodes, uint64_t epoch,
                          cd_view_t **view_p)
{
    cd_view_t *v = calloc(1, sizeof(*v));
    st_status_t status = ST_OK;

    if (v == NULL) {
        return ST_ERR_NOMEM;
    }
    v->self = -1;
    v->epoch = epoch;
    v->refs = 1;
    if (n > CD_MAX_PEERS) {
        lg_error("too many members n=%zu (at most %d)", n, CD_MAX_PEERS);
        free(v);
        return ST_ERR_INVALID;
    }
    if (n > 0) {
        v->members = malloc(sizeof(*v->members) * n);
        v->names = malloc(sizeof(*v->names) * n);
        if (v->members == NULL || v->names == NULL) {
            cd_view_free(v);
            return ST_ERR_NOMEM;
        }
        memcpy(v->members, m, sizeof(*m) * n);
    }
    for (size_t i = 0; i < n; i++) {
        cd_member_t *mi = &v->members[i];

        mi->name[CD_MEMBER_NAME_MAX] = mi->grpc[CD_MEMBER_ADDR_MAX] = '\0';
        mi->transport[CD_MEMBER_ADDR_MAX] = mi->metrics[CD_MEMBER_ADDR_MAX] = '\0';
        if (strchr(mi->grpc, ':') == NULL || cd_view_find(v, mi->grpc) >= 0) {
            lg_error("bad member name=%s grpc=%s (want a unique host:port)", mi->name, mi->grpc);
            v->n = 0;
            cd_view_free(v);
            return ST_ERR_INVALID;
        }
        v->names[i] = mi->grpc;
        v->n = (uint32_t)i + 1;
        if ((self_name != NULL &&
             (strcmp(mi->name, self_name) == 0 || strcmp(mi->grpc, self_name) == 0)) ||
            (self_addr != NULL && strcmp(mi->grpc, self_addr) == 0)) {
            v->self = (int)i;
        }
    }
    v->n = 0;
    if (n > 0 && (status = ring_init(&v->ring, v->names, (uint32_t)n, vnodes)) != ST_OK) {
        lg_error("cannot build the ring over %zu members: %s", n, st_strerror(status));
        cd_view_free(v);
        return status;
    }
    v->n = (uint32_t)n;
    *view_p = v;
    return ST_OK;
}

cd_view_t *cd_view_get(cd_daemon_t *d)
{
    cd_view_t *v;

    pthread_mutex_lock(&d->peer_lock);
    v = d->view;
    if (v != NULL) {
        v->refs++;
    }
    pthread_mutex_unlock(&d->peer_lock);
    return v;
}

void cd_view_put(cd_daemon_t *d, cd_view_t *v)
{
    int last;

    if (v == NULL) {
        return;
    }
    pthread_mutex_lock(&d->peer_lock);
    last = --v->refs == 0;
    pthread_mutex_unlock(&d->peer_lock);
    if (last) {
        cd_view_free(v);
    }
}

uint64_t cd_ring_epoch(cd_daemon_t *d)
{
    uint64_t e;

    pthread_mutex_lock(&d->peer_lock);
    e = d->view != NULL ? d->view->epoch : 0;
    pthread_mutex_unlock(&d->peer_lock);
    return e;
}

void cd_members_set_ops(cd_daemon_t *d, const cd_membership_ops_t *ops)
{
    pthread_mutex_lock(&d->peer_lock);
    d->mops = ops != NULL ? *ops : cd_membership_static_ops;
    pthread_mutex_unlock(&d->peer_lock);
}

int cd_members_dynamic(cd_daemon_t *d)
{
    int dyn;

    pthread_mutex_lock(&d->peer_lock);
    dyn = d->mops.set_state != cd_membership_static_ops.set_state;
    pthread_mutex_unlock(&d->peer_lock);
    return dyn;
}

/* Whether a and b place alike: the same members on the ring, in the same
 * order and states, and this node at the same place. */
static int cd_view_same(const cd_view_t *a, const cd_view_t *b)
{
    if (a == NULL || a->n != b->n || a->self != b->self) {
        return 0;
    }
    for (uint32_t i = 0; i < a->n; i++) {
        const cd_member_t *x = &a->members[i], *y = &b->members[i];

        if (strcmp(x->grpc, y->grpc) != 0 || strcmp(x->name, y->name) != 0 ||
            x->state != y->state) {
            return 0;
        }
    }
    return 1;
}

/*
 * Swaps v in at its epoch (members.h, cd_members_apply) unless the view in
 * place has the same ring at that epoch or a later one. Returns 1 when v
 * was swapped in (*old_p: the view it replaced), 0 when v is not needed.
 */
static int cd_members_swap(cd_daemon_t *d, cd_view_t *v, uint64_t epoch, cd_view_t **old_p)
{
    uint64_t cur;

    pthread_mutex_lock(&d->peer_lock);
    *old_p = d->view;
    cur = d->view != NULL ? d->view->epoch : 0;
    if (epoch != 0 && epoch <= cur && cd_view_same(d->view, v)) {
        pthread_mutex_unlock(&d->peer_lock);
        return 0;
    }
    v->epoch = epoch > cur ? epoch : cur + 1;
    d->view = v;
    pthread_mutex_unlock(&d->peer_lock);
    return 1;
}

st_status_t cd_members_apply(cd_daemon_t *d, const cd_member_t *m, size_t n, uint64_t epoch)
{
    cd_view_t *v, *old;
    st_status_t status;

    cd_member_t *ring = malloc(sizeof(*ring) * (n + 1));
    size_t k = 0;

    if (ring == NULL) {
        return ST_ERR_NOMEM;
    }
    /* A draining member hands its share away: it is left out of the ring
     * (as this node is from its own ring while it drains). */
    for (size_t i = 0; i < n; i++) {
        int self = strcmp(m[i].name, d->cfg.node_id) == 0 || strcmp(m[i].grpc, d->cfg.listen) == 0;

        if (m[i].state != CD_MEMBER_DRAINING && !(self && d->draining)) {
            ring[k++] = m[i];
        }
    }
    status =
        cd_view_build(ring, k, d->cfg.node_id, d->cfg.listen, (uint32_t)d->cfg.vnodes, epoch, &v);
    free(ring);
    if (status != ST_OK) {
        return status;
    }
    if (!cd_members_swap(d, v, epoch, &old)) {
        cd_view_free(v); /* the same ring, applied already */
        return ST_OK;
    }
    if (epoch != 0 && v->epoch != epoch) {
        lg_warn("members applied at epoch=%llu, not at the source's epoch=%llu: another ring is "
                "in place at that epoch",
                (unsigned long long)v->epoch, (unsigned long long)epoch);
    }
    lg_info("members applied n=%zu ring=%u epoch=%llu self=%d", n, v->n,
            (unsigned long long)v->epoch, v->self);
    cd_rb_wake(d->rb);
    cd_view_put(d, old);
    return ST_OK;
}

st_status_t cd_members_parse(const char *peers, size_t max, cd_member_t **m_p, size_t *n_p)
{
    char *list, *save = NULL, *tok;
    cd_member_t *m;
    size_t n = 0;

    *m_p = NULL;
    *n_p = 0;
    if (peers == NULL || peers[0] == '\0') {
        return ST_OK;
    }
    list = strdup(peers);
    m = calloc(max ? max : 1, sizeof(*m));
    if (list == NULL || m == NULL) {
        free(list), free(m);
        return ST_ERR_NOMEM;
    }
    for (tok = strtok_r(list, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        int dup = 0;

        for (size_t i = 0; i < n; i++) {
            dup |= strcmp(m[i].grpc, tok) == 0;
        }
        if (strchr(tok, ':') == NULL || n == max || strlen(tok) > CD_MEMBER_ADDR_MAX || dup) {
            lg_error("bad peer list entry peer=%s (want a unique host:port, at most %zu peers)",
                     tok, max);
            free(list), free(m);
            return ST_ERR_INVALID;
        }
        snprintf(m[n].name, sizeof(m[n].name), "%s", tok);
        snprintf(m[n].grpc, sizeof(m[n].grpc), "%s", tok);
        m[n].state = CD_MEMBER_SERVING;
        n++;
    }
    free(list);
    *m_p = m;
    *n_p = n;
    return ST_OK;
}

srpc_channel_t *cd_daemon_peer_ch(cd_daemon_t *d, const char *addr)
{
    srpc_channel_t *ch = NULL;
    uint32_t i;

    pthread_mutex_lock(&d->peer_lock);
    for (i = 0; i < d->n_peer_ch && strcmp(d->peer_ch[i].addr, addr) != 0; i++) {
    }
    if (i == d->n_peer_ch && i < CD_MAX_CHANNELS && (d->peer_ch[i].addr = strdup(addr)) != NULL) {
        d->n_peer_ch++;
    }
    if (i < d->n_peer_ch) {
        if (d->peer_ch[i].ch == NULL) {
            srpc_channel_config_t cc = {0};

            /* The cluster credential, never a client's token (auth.h). */
            cc.token = d->auth.au_peer_token;
            cd_tls_peer_config(d, &cc);
            if (srpc_channel_open(addr, &cc, &d->peer_ch[i].ch) != ST_OK) {
                d->peer_ch[i].ch = NULL;
            }
        }
        ch = d->peer_ch[i].ch;
    }
    pthread_mutex_unlock(&d->peer_lock);
    return ch;
}

void cd_daemon_peers_free(cd_daemon_t *d)
{
    for (uint32_t i = 0; i < d->n_peer_ch; i++) {
        srpc_channel_close(d->peer_ch[i].ch);
        free(d->peer_ch[i].addr);
    }
    d->n_peer_ch = 0;
    cd_view_put(d, d->view);
    d->view = NULL;
}

st_status_t cd_members_reload_static(cd_daemon_t *d, const char *peers)
{
    cd_member_t *m;
    size_t n;
    cd_view_t *v;
    int same;
    st_status_t status;

    if (d->cfg.etcd != NULL && d->cfg.etcd[0] != '\0') {
        lg_info("SIGHUP: the members come from etcd=%s; peers not re-read", d->cfg.etcd);
        return ST_OK; /* daemon_etcd.c keeps them */
    }
    status = cd_members_parse(peers, CD_MAX_PEERS, &m, &n);
    if (status != ST_OK) {
        return status;
    }
    v = cd_view_get(d);
    same = v->n == n;
    for (size_t i = 0; same && i < n; i++) {
        same = strcmp(v->members[i].grpc, m[i].grpc) == 0;
    }
    cd_view_put(d, v);
    if (same) {
        lg_info("SIGHUP: peers unchanged n=%zu", n);
        free(m);
        return ST_OK;
    }
    status = cd_members_apply(d, m, n, 0);
    free(m);
    return status;
}

st_status_t cd_daemon_drain_start(cd_daemon_t *d, uint64_t timeout_ms)
{
    if (atomic_exchange(&d->draining, 1) == 0) {
        d->drain_timeout_req = timeout_ms;
        lg_info("drain asked for node=%s timeout_ms=%llu", d->cfg.node_id,
                (unsigned long long)(timeout_ms ? timeout_ms : d->cfg.drain_timeout_ms));
        kill(getpid(), SIGTERM); /* the main thread drains, then stops */
    }
    return ST_OK;
}

/* Waits at most timeout_ms until the ring epoch is at least epoch; 1 when it is. */
static int cd_members_wait_epoch(cd_daemon_t *d, uint64_t epoch, uint64_t timeout_ms)
{
    uint64_t waited = 0;

    while (cd_ring_epoch(d) < epoch) {
        struct timespec ts = {0, 10 * 1000000L};

        if (waited >= timeout_ms) {
            lg_warn("drain: the ring at epoch=%llu did not come within %llu ms (at epoch=%llu): "
                    "applying this node's own",
                    (unsigned long long)epoch, (unsigned long long)timeout_ms,
                    (unsigned long long)cd_ring_epoch(d));
            return 0;
        }
        nanosleep(&ts, NULL);
        waited += 10;
    }
    return 1;
}

st_status_t cd_daemon_drain(cd_daemon_t *d)
{
    uint64_t timeout = d->drain_timeout_req ? d->drain_timeout_req : d->cfg.drain_timeout_ms;
    cd_membership_ops_t ops;
    uint64_t epoch = 0;
    cd_rb_stats_t st;
    st_status_t status = ST_OK;

    atomic_store(&d->draining, 1);
    pthread_mutex_lock(&d->peer_lock);
    ops = d->mops;
    pthread_mutex_unlock(&d->peer_lock);
    (void)ops.set_state(ops.ctx, CD_MEMBER_DRAINING, &epoch);
    /* The source applies the ring without this node at the epoch of its
     * draining record, as every other node does; without one (static
     * peers, or etcd did not take the record), this node's own ring. */
    if (epoch == 0 || !cd_members_wait_epoch(d, epoch, CD_DRAIN_RING_WAIT_MS)) {
        cd_view_t *v = cd_view_get(d);

        status = cd_members_apply(d, v->members, v->n, 0); /* without this node: it drains */
        cd_view_put(d, v);
    }
    if (status == ST_OK) {
        status = cd_rb_wait(d->rb, cd_ring_epoch(d), timeout);
    }
    cd_rb_stats(d->rb, &st);
    if (status != ST_OK) {
        lg_error("drain of node=%s incomplete after %llu ms: %llu durable objects not handed "
                 "over (%s)",
                 d->cfg.node_id, (unsigned long long)timeout, (unsigned long long)st.pending,
                 st_strerror(status));
        return status;
    }
    (void)ops.leave(ops.ctx);
    lg_info("drained node=%s objects=%llu bytes=%llu dropped=%llu", d->cfg.node_id,
            (unsigned long long)st.objects, (unsigned long long)st.bytes,
            (unsigned long long)st.dropped);
    return ST_OK;
}
