/*
 * daemon_etcd.c - membership on etcd (daemon_etcd.h, docs/membership.md).
 *
 * One thread keeps the node's lease alive (every etcd_ttl / 3 seconds) and
 * reads the watch on <prefix>members/ in between. The members known are
 * kept as etcd says them: a full read (Range over the prefix) at start and
 * after every lost watch, then the watch's events on the prefix from the
 * revision after that read, every key folded into the epoch the same way
 * (srpc_epoch_fold(), rpc/etcd_members.h), so that every daemon and client
 * derives the same list and the same epoch, whenever it joined and however
 * often it lost its watch: etcd's revision of the last change under
 * members/ (a put, or a delete, which leaves no key behind: the first
 * watcher to see a delete records its revision under <prefix>epoch, so that
 * a later full read finds it too), plus <prefix>epoch_base.
 */
#include "daemon_etcd.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "daemon.h"
#include "etcd_members.h"
#include "log.h"
#include "member.h"

#define CD_ETCD_CALL_MS        2000 /* one etcd call */
#define CD_ETCD_BACKOFF_MS     100  /* first retry; doubles up to the next */
#define CD_ETCD_BACKOFF_MAX_MS 5000
#define CD_ETCD_POLL_MS        200 /* the thread looks at the stop flag this often */

typedef struct cd_etcd {
    cd_daemon_t *d;
    srpc_etcd_t *cl;
    char prefix[MR_MAX_FIELD];
    char members_prefix[MR_MAX_FIELD + 16];
    char key[2 * MR_MAX_FIELD + 16];   /* <prefix>members/<name> */
    char epoch_key[MR_MAX_FIELD + 16]; /* <prefix>epoch */
    pthread_mutex_t lock; /* guards self, lease, registered, left and the calls on them */
    mr_member_t self;
    int64_t lease;  /* 0: none */
    int registered; /* the record is in etcd under lease */
    int left;       /* deregistered on purpose: never registers again */
    int up;         /* etcd answered the last call (for the log and strata_etcd_up) */
    int stopping;   /* atomic */
    pthread_t thread;
    int running;
    /* The members as etcd says them (the thread's alone). */
    mr_member_t members[CD_MAX_PEERS];
    uint32_t n;
    srpc_epoch_t ep;   /* the epoch's parts (etcd_members.h) */
    uint64_t epoch;    /* srpc_epoch_value(&ep) */
    uint64_t base_pub; /* ep.base, for set_state() on another thread (atomic) */
    int64_t store_rev; /* the largest store revision seen: a read below it finds an etcd
                          that lost its data */
    int64_t watch_from;
    srpc_etcd_watch_t *watch;
    mx_gauge_t *g_up, *g_epoch, *g_members[MR_N_STATES];
} cd_etcd_t;

/* ----------------------------------------------------------- settings -- */

/* The host part of "host:port" into out (brackets of [v6] kept). */
static void cd_etcd_host(const char *hostport, char *out, size_t cap)
{
    const char *colon = strrchr(hostport, ':');
    size_t len = colon != NULL ? (size_t)(colon - hostport) : strlen(hostport);

    snprintf(out, cap, "%.*s", (int)len, hostport);
}

static int cd_etcd_wildcard(const char *host)
{
    return host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0 ||
           strcmp(host, "[::]") == 0 || strcmp(host, "*") == 0;
}

st_status_t cd_etcd_check(cd_daemon_t *d)
{
    const cd_config_t *c = &d->cfg;
    const char *pre = c->etcd_prefix;
    char host[MR_MAX_FIELD];

    if (c->etcd == NULL || c->etcd[0] == '\0') {
        return ST_OK;
    }
    if (c->peers != NULL && c->peers[0] != '\0') {
        lg_error("peers and etcd are exclusive: the members come from etcd=%s (remove peers=%s)",
                 c->etcd, c->peers);
        return ST_ERR_INVALID;
    }
    if (pre == NULL || pre[0] != '/' || pre[strlen(pre) - 1] != '/' ||
        strlen(pre) > MR_MAX_FIELD - 16) {
        lg_error("bad etcd_prefix=%s (want /some/path/ starting and ending with '/', at most %d "
                 "bytes)",
                 pre != NULL ? pre : "", MR_MAX_FIELD - 16);
        return ST_ERR_INVALID;
    }
    if (c->advertise != NULL && c->advertise[0] != '\0') {
        snprintf(host, sizeof(host), "%s", c->advertise);
        if (strchr(host, ':') != NULL && host[0] != '[') {
            lg_error("bad advertise=%s (want a host, without the port)", c->advertise);
            return ST_ERR_INVALID;
        }
    } else {
        cd_etcd_host(c->listen, host, sizeof(host));
    }
    if (cd_etcd_wildcard(host)) {
        lg_error("with etcd, others must reach this node at an address: listen=%s is a wildcard; "
                 "set advertise to this node's host",
                 c->listen);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* This node's record: name, addresses (advertised host, the ports bound). */
static st_status_t cd_etcd_self(cd_etcd_t *e, int port)
{
    cd_daemon_t *d = e->d;
    char host[MR_MAX_FIELD - 12]; /* room for ":port" */
    int n;

    if (d->cfg.advertise != NULL && d->cfg.advertise[0] != '\0') {
        snprintf(host, sizeof(host), "%s", d->cfg.advertise);
    } else {
        cd_etcd_host(d->cfg.listen, host, sizeof(host));
    }
    n = snprintf(e->self.grpc, sizeof(e->self.grpc), "%s:%d", host, port);
    if (n <= 0 || (size_t)n >= sizeof(e->self.grpc)) {
        lg_error("advertise host too long advertise=%s", host);
        return ST_ERR_INVALID;
    }
    /* node_id defaults to the listen address, which may be a wildcard or
     * port 0: with etcd the default is the address others reach us at. */
    if (strcmp(d->cfg.node_id, d->cfg.listen) == 0) {
        char *id = strdup(e->self.grpc);

        if (id == NULL) {
            return ST_ERR_NOMEM;
        }
        free(d->cfg.node_id);
        d->cfg.node_id = id;
    }
    snprintf(e->self.name, sizeof(e->self.name), "%s", d->cfg.node_id);
    if (strlen(d->cfg.node_id) >= sizeof(e->self.name) || strchr(d->cfg.node_id, '/') != NULL) {
        lg_error("node_id=%s cannot name a member (at most %d bytes, no '/')", d->cfg.node_id,
                 MR_MAX_FIELD - 1);
        return ST_ERR_INVALID;
    }
    snprintf(e->self.transport, sizeof(e->self.transport), "%s",
             d->dp != NULL ? d->cfg.transport : "");
    if (d->metrics_port > 0) {
        snprintf(e->self.metrics, sizeof(e->self.metrics), "%s:%d", host, d->metrics_port);
    }
    e->self.state = MR_JOINING;
    snprintf(e->prefix, sizeof(e->prefix), "%s", d->cfg.etcd_prefix);
    snprintf(e->members_prefix, sizeof(e->members_prefix), "%smembers/", e->prefix);
    snprintf(e->key, sizeof(e->key), "%s%s", e->members_prefix, e->self.name);
    snprintf(e->epoch_key, sizeof(e->epoch_key), "%sepoch", e->prefix);
    return ST_OK;
}

/* ------------------------------------------------------------ metrics -- */

static void cd_etcd_metrics(cd_etcd_t *e)
{
    static const char *const state_label[] = {"state"};
    mx_metrics_t *reg = e->d->obs != NULL ? cd_obs_registry(e->d->obs) : NULL;
    mx_metric_desc_t desc = {0};
    mx_metric_family_t *f;

    if (reg == NULL) {
        return;
    }
    desc.type = MX_METRIC_GAUGE_INT;
    desc.name = "strata_etcd_up";
    desc.help = "1 while etcd answers this node's calls (membership on etcd), else 0.";
    if (mx_register(reg, &desc, &f) == ST_OK) {
        (void)mx_gauge(f, NULL, &e->g_up);
    }
    desc.name = "strata_ring_epoch";
    desc.help = "The ring epoch: etcd's revision of the last membership change applied.";
    if (mx_register(reg, &desc, &f) == ST_OK) {
        (void)mx_gauge(f, NULL, &e->g_epoch);
    }
    desc.name = "strata_members";
    desc.help = "Members registered in etcd, by state (joining, serving, draining).";
    desc.label_names = state_label;
    desc.n_labels = 1;
    if (mx_register(reg, &desc, &f) == ST_OK) {
        for (int s = 0; s < MR_N_STATES; s++) {
            const char *v[1] = {mr_state_name((mr_state_t)s)};

            (void)mx_gauge(f, v, &e->g_members[s]);
        }
    }
}

static void cd_etcd_set_up(cd_etcd_t *e, int up, st_status_t why)
{
    if (up != e->up) {
        if (up) {
            lg_info("etcd: reachable again endpoints=%s", srpc_etcd_endpoints(e->cl));
        } else {
            lg_warn("etcd: unreachable, serving with the last ring epoch=%llu endpoints=%s "
                    "error=%s",
                    (unsigned long long)e->epoch, srpc_etcd_endpoints(e->cl), st_strerror(why));
        }
    }
    e->up = up;
    if (e->g_up != NULL) {
        mx_gauge_set_int(e->g_up, up);
    }
}

/* ------------------------------------------------------- registration -- */

/* Puts this node's record under its lease; *rev_p (may be NULL) the put's revision. Under e->lock. */
static st_status_t cd_etcd_put_self(cd_etcd_t *e, int64_t *rev_p)
{
    char rec[MR_MAX_RECORD + 1];
    size_t len = mr_format(&e->self, rec, sizeof(rec));

    if (len == 0) {
        lg_error("etcd: this node's record does not format name=%s", e->self.name);
        return ST_ERR_INVALID;
    }
    return srpc_etcd_put(e->cl, e->key, rec, len, e->lease, CD_ETCD_CALL_MS, rev_p);
}

/* A new lease and the record under it. Under e->lock. */
static st_status_t cd_etcd_register(cd_etcd_t *e)
{
    st_status_t st;
    int64_t lease;

    st = srpc_etcd_lease_grant(e->cl, e->d->cfg.etcd_ttl, CD_ETCD_CALL_MS, &lease);
    if (st != ST_OK) {
        return st;
    }
    e->lease = lease;
    st = cd_etcd_put_self(e, NULL);
    if (st != ST_OK) {
        return st;
    }
    e->registered = 1;
    lg_info("etcd: registered key=%s grpc=%s state=%s lease=%llx ttl=%llds", e->key, e->self.grpc,
            mr_state_name(e->self.state), (unsigned long long)lease, (long long)e->d->cfg.etcd_ttl);
    return ST_OK;
}

/* The record with the new state; *epoch_p the ring epoch of that change
 * (base + the put's revision: the largest under members/), 0 unknown. */
static st_status_t cd_etcd_set_state(void *ctx, cd_member_state_t state, uint64_t *epoch_p)
{
    cd_etcd_t *e = ctx;
    st_status_t st = ST_OK;
    int64_t rev = 0;

    *epoch_p = 0;
    pthread_mutex_lock(&e->lock);
    e->self.state = (mr_state_t)state;
    if (e->registered) {
        st = cd_etcd_put_self(e, &rev);
        if (st == ST_OK && rev > 0) {
            *epoch_p = __atomic_load_n(&e->base_pub, __ATOMIC_ACQUIRE) + (uint64_t)rev;
        } else if (st != ST_OK) {
            lg_warn("etcd: could not publish state=%s key=%s: %s", mr_state_name(e->self.state),
                    e->key, st_strerror(st));
        }
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* Revokes the lease (the record goes with it). Under e->lock. */
static st_status_t cd_etcd_deregister(cd_etcd_t *e)
{
    st_status_t st = ST_OK;

    e->left = 1;
    if (e->registered) {
        st = srpc_etcd_lease_revoke(e->cl, e->lease, CD_ETCD_CALL_MS);
        if (st != ST_OK) {
            /* The lease expires by itself within etcd_ttl. */
            lg_warn("etcd: could not revoke the lease key=%s: %s (it expires in %llds)", e->key,
                    st_strerror(st), (long long)e->d->cfg.etcd_ttl);
        } else {
            lg_info("etcd: deregistered key=%s", e->key);
        }
        e->registered = 0;
        e->lease = 0;
    }
    return st;
}

static st_status_t cd_etcd_leave(void *ctx)
{
    cd_etcd_t *e = ctx;
    st_status_t st;

    pthread_mutex_lock(&e->lock);
    st = cd_etcd_deregister(e);
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* --------------------------------------------------------- the members -- */

static int cd_etcd_find(const cd_etcd_t *e, const char *name)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (strcmp(e->members[i].name, name) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/*
 * Whether this node belongs on its own ring although etcd no longer lists
 * it: its lease expired while it could not reach etcd (stopped, cut off),
 * and it has not left on purpose, so it registers again at its next renewal
 * (or did, and its watch still brings the delete of the old record). Off
 * its own ring, its rebalancer would push every durable object away and
 * drop its copies, as a drain does, while the others count on them again
 * as soon as it is back; so it keeps serving with itself on the ring.
 */
static int cd_etcd_keep_self(cd_etcd_t *e, mr_member_t *self)
{
    int keep;

    if (cd_etcd_find(e, e->self.name) >= 0) {
        return 0;
    }
    pthread_mutex_lock(&e->lock);
    *self = e->self;
    keep = !e->left && mr_on_ring(self->state);
    pthread_mutex_unlock(&e->lock);
    return keep;
}

static int cd_etcd_by_name(const void *a, const void *b)
{
    return strcmp(((const cd_member_t *)a)->name, ((const cd_member_t *)b)->name);
}

/* Hands the daemon the members on the ring (serving ones) at e->epoch, in
 * key order (as a full read gives them, whatever order the events came in),
 * so that the same state read again is the same ring. */
static void cd_etcd_apply(cd_etcd_t *e)
{
    mr_member_t self;
    int keep_self = cd_etcd_keep_self(e, &self);
    cd_member_t *m = calloc(e->n + 1, sizeof(*m));
    int64_t by_state[MR_N_STATES] = {0};
    size_t n = 0;
    st_status_t st;

    if (m == NULL) {
        lg_error("etcd: out of memory applying members n=%u", e->n);
        return;
    }
    for (uint32_t i = 0; i < e->n; i++) {
        const mr_member_t *r = &e->members[i];

        by_state[r->state]++;
        if (!mr_on_ring(r->state)) {
            continue;
        }
        snprintf(m[n].name, sizeof(m[n].name), "%s", r->name);
        snprintf(m[n].grpc, sizeof(m[n].grpc), "%s", r->grpc);
        snprintf(m[n].transport, sizeof(m[n].transport), "%s", r->transport);
        snprintf(m[n].metrics, sizeof(m[n].metrics), "%s", r->metrics);
        m[n].state = (cd_member_state_t)r->state;
        n++;
    }
    if (keep_self) {
        lg_info("etcd: this node's record is gone (lease expired), it stays on its own ring "
                "until it has registered again name=%s epoch=%llu",
                self.name, (unsigned long long)e->epoch);
        snprintf(m[n].name, sizeof(m[n].name), "%s", self.name);
        snprintf(m[n].grpc, sizeof(m[n].grpc), "%s", self.grpc);
        snprintf(m[n].transport, sizeof(m[n].transport), "%s", self.transport);
        snprintf(m[n].metrics, sizeof(m[n].metrics), "%s", self.metrics);
        m[n].state = (cd_member_state_t)self.state;
        n++;
    }
    qsort(m, n, sizeof(*m), cd_etcd_by_name);
    st = cd_members_apply(e->d, m, n, e->epoch);
    free(m);
    if (st != ST_OK) {
        lg_warn("etcd: member list not applied epoch=%llu: %s (the last ring stays)",
                (unsigned long long)e->epoch, st_strerror(st));
        return;
    }
    if (e->g_epoch != NULL) {
        mx_gauge_set_int(e->g_epoch, (int64_t)cd_ring_epoch(e->d));
    }
    for (int s = 0; s < MR_N_STATES; s++) {
        if (e->g_members[s] != NULL) {
            mx_gauge_set_int(e->g_members[s], by_state[s]);
        }
    }
}

static void cd_etcd_remove(cd_etcd_t *e, const char *name)
{
    int i = cd_etcd_find(e, name);

    if (i >= 0) {
        e->members[i] = e->members[e->n - 1];
        e->n--;
    }
}

/* Takes the record of member name ("": a name too long; malformed: ignored, logged). */
static void cd_etcd_take(cd_etcd_t *e, const char *name, const ProtobufCBinaryData *value,
                         int64_t mod_revision)
{
    char why[160];
    mr_member_t m;
    int i;

    if (name[0] == '\0') {
        lg_warn_ratelimited("etcd: malformed member record ignored under %s revision=%lld: the "
                            "name is longer than %d bytes",
                            e->members_prefix, (long long)mod_revision, MR_MAX_FIELD - 1);
        return;
    }
    cd_etcd_remove(e, name);
    if (mr_parse(name, value->data, value->len, &m, why, sizeof(why)) != ST_OK) {
        lg_warn_ratelimited("etcd: malformed member record ignored key=%s%s revision=%lld: %s",
                            e->members_prefix, name, (long long)mod_revision, why);
        return;
    }
    i = cd_etcd_find(e, m.name);
    if (i < 0 && e->n == CD_MAX_PEERS) {
        lg_warn_ratelimited("etcd: member ignored name=%s (at most %d members)", m.name,
                            CD_MAX_PEERS);
        return;
    }
    m.mod_revision = mod_revision;
    e->members[e->n++] = m;
}

/* Publishes e->ep's base for set_state() and recomputes e->epoch. */
static void cd_etcd_epoch_set(cd_etcd_t *e)
{
    e->epoch = srpc_epoch_value(&e->ep);
    __atomic_store_n(&e->base_pub, e->ep.base, __ATOMIC_RELEASE);
}

/*
 * A full read found an epoch below the one this node holds. Either etcd
 * lost its data (the store's revision went back: it counts from 1 again),
 * and the base is recorded, so that epochs keep growing; or a delete this
 * node saw is not recorded under <prefix>epoch yet (the read came between
 * the delete and its record, or the record failed), and it is recorded
 * now. Either way only raises the key, then reads again into *mb.
 */
static st_status_t cd_etcd_catch_up(cd_etcd_t *e, srpc_members_t *mb)
{
    char key[MR_MAX_FIELD + 16], v[24];
    st_status_t st;

    if (mb->revision < e->store_rev || mb->ep.base < e->ep.base) {
        lg_warn("etcd: its revision went back (revision %lld, was %lld; epoch %llu, was %llu): "
                "it lost its data, recording epoch_base=%llu",
                (long long)mb->revision, (long long)e->store_rev, (unsigned long long)mb->epoch,
                (unsigned long long)e->epoch, (unsigned long long)e->epoch);
        snprintf(key, sizeof(key), "%sepoch_base", e->prefix);
        snprintf(v, sizeof(v), "%020llu", (unsigned long long)e->epoch);
        e->store_rev = 0; /* the new store's revisions from here on */
    } else {
        lg_info("etcd: recording the last delete under %s revision=%llu (a read found epoch %llu, "
                "this node is at %llu)",
                e->epoch_key, (unsigned long long)e->ep.rev, (unsigned long long)mb->epoch,
                (unsigned long long)e->epoch);
        snprintf(key, sizeof(key), "%s", e->epoch_key);
        snprintf(v, sizeof(v), "%020llu", (unsigned long long)e->ep.rev);
    }
    srpc_members_free(mb);
    st = srpc_etcd_put_if_less(e->cl, key, v, CD_ETCD_CALL_MS, NULL);
    if (st == ST_OK) {
        st = srpc_etcd_members(e->cl, e->prefix, CD_ETCD_CALL_MS, mb);
    }
    return st;
}

/* A full read: the members, the epoch, the revision to watch from. */
static st_status_t cd_etcd_sync(cd_etcd_t *e)
{
    srpc_members_t mb;
    st_status_t st = srpc_etcd_members(e->cl, e->prefix, CD_ETCD_CALL_MS, &mb);

    if (st == ST_OK && mb.epoch < e->epoch) {
        st = cd_etcd_catch_up(e, &mb);
    }
    if (st != ST_OK) {
        return st;
    }
    e->n = 0;
    for (size_t i = 0; i < mb.n && e->n < CD_MAX_PEERS; i++) {
        e->members[e->n++] = mb.m[i];
    }
    if (mb.n > CD_MAX_PEERS) {
        lg_warn_ratelimited("etcd: members ignored n=%zu (at most %d members)", mb.n, CD_MAX_PEERS);
    }
    if (mb.epoch >= e->epoch) {
        e->ep = mb.ep;
    } else {
        /* Raised meanwhile by another writer only: keep the larger one. */
        lg_warn("etcd: the epoch read is %llu, below this node's %llu: keeping it",
                (unsigned long long)mb.epoch, (unsigned long long)e->epoch);
    }
    cd_etcd_epoch_set(e);
    e->store_rev = mb.revision > e->store_rev ? mb.revision : e->store_rev;
    e->watch_from = mb.revision + 1;
    srpc_members_free(&mb);
    cd_etcd_apply(e);
    return ST_OK;
}

/*
 * One answer of the watch (every key under the prefix): its events folded
 * into the members and the epoch, then the list at the new epoch when a
 * member or the epoch changed.
 */
static void cd_etcd_events(cd_etcd_t *e, const Etcdserverpb__EtcdWatchResponse *w)
{
    uint64_t was = e->epoch;
    int64_t deleted = 0;
    int members = 0;

    if (w->header != NULL && w->header->revision > e->store_rev) {
        e->store_rev = w->header->revision;
    }
    for (size_t i = 0; i < w->n_events; i++) {
        const Etcdserverpb__EtcdEvent *ev = w->events[i];
        const Etcdserverpb__EtcdKv *kv = ev->kv;
        int del = ev->type == ETCDSERVERPB__ETCD_EVENT__EVENT_TYPE__DELETE;
        char name[MR_MAX_FIELD];

        if (kv == NULL) {
            continue;
        }
        e->watch_from = kv->mod_revision + 1;
        if (srpc_epoch_fold(&e->ep, e->prefix, kv, del, name, sizeof(name)) != SRPC_KEY_MEMBER) {
            continue;
        }
        members = 1;
        if (!del) {
            cd_etcd_take(e, name, &kv->value, kv->mod_revision);
            continue;
        }
        if (name[0] != '\0') {
            cd_etcd_remove(e, name);
            lg_info("etcd: member left name=%s revision=%lld", name, (long long)kv->mod_revision);
        }
        deleted = kv->mod_revision > deleted ? kv->mod_revision : deleted;
    }
    cd_etcd_epoch_set(e);
    if (deleted > 0) {
        char v[24];

        /* A delete leaves no key: record its revision for later readers. */
        snprintf(v, sizeof(v), "%020lld", (long long)deleted);
        (void)srpc_etcd_put_if_less(e->cl, e->epoch_key, v, CD_ETCD_CALL_MS, NULL);
    }
    if (members || e->epoch != was) {
        cd_etcd_apply(e);
    }
}

/* ----------------------------------------------------------- the thread -- */

static int cd_etcd_stopping(cd_etcd_t *e)
{
    return __atomic_load_n(&e->stopping, __ATOMIC_ACQUIRE);
}

/* Sleeps ms (in short steps, so that a stop is seen). */
static void cd_etcd_sleep(cd_etcd_t *e, uint32_t ms)
{
    while (ms > 0 && !cd_etcd_stopping(e)) {
        uint32_t step = ms < CD_ETCD_POLL_MS ? ms : CD_ETCD_POLL_MS;
        struct timespec ts = {0, (long)step * 1000000L};

        nanosleep(&ts, NULL);
        ms -= step;
    }
}

/* Renews the lease; registers again when etcd lost it. */
static st_status_t cd_etcd_keepalive(cd_etcd_t *e)
{
    st_status_t st = ST_OK;

    pthread_mutex_lock(&e->lock);
    if (!e->left) {
        st = e->registered ? srpc_etcd_lease_keepalive(e->cl, e->lease, CD_ETCD_CALL_MS, NULL)
                           : ST_ERR_NOT_FOUND;
        if (st == ST_ERR_NOT_FOUND) {
            if (e->registered) {
                lg_warn("etcd: lease lost key=%s lease=%llx: registering again", e->key,
                        (unsigned long long)e->lease);
            }
            e->registered = 0;
            st = cd_etcd_register(e);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

/* Opens the watch after a full read. */
static st_status_t cd_etcd_rewatch(cd_etcd_t *e)
{
    st_status_t st = cd_etcd_sync(e);

    if (st == ST_OK) {
        /* The whole prefix: members/, and the epoch's keys that others record. */
        st = srpc_etcd_watch_open(e->cl, e->prefix, e->watch_from, CD_ETCD_CALL_MS, &e->watch);
    }
    return st;
}

static void *cd_etcd_main(void *arg)
{
    cd_etcd_t *e = arg;
    uint32_t ka_ms = (uint32_t)(e->d->cfg.etcd_ttl * 1000 / 3), backoff = CD_ETCD_BACKOFF_MS;
    uint64_t next_ka = cm_mono_ms() + ka_ms;

    while (!cd_etcd_stopping(e)) {
        Etcdserverpb__EtcdWatchResponse *w;
        st_status_t st = ST_OK;

        if (cm_mono_ms() >= next_ka) {
            st = cd_etcd_keepalive(e);
            next_ka = cm_mono_ms() + (st == ST_OK ? ka_ms : backoff);
        }
        if (st == ST_OK && e->watch == NULL) {
            st = cd_etcd_rewatch(e);
        }
        if (st == ST_OK) {
            st = srpc_etcd_watch_next(e->watch, CD_ETCD_POLL_MS, &w);
            if (st == ST_OK) {
                cd_etcd_events(e, w);
                protobuf_c_message_free_unpacked(&w->base, NULL);
            } else if (st == ST_ERR_TIMEOUT) {
                st = ST_OK;
            } else {
                srpc_etcd_watch_close(e->watch);
                e->watch = NULL;
            }
        }
        cd_etcd_set_up(e, st == ST_OK, st);
        if (st != ST_OK) {
            cd_etcd_sleep(e, backoff);
            backoff = backoff * 2 > CD_ETCD_BACKOFF_MAX_MS ? CD_ETCD_BACKOFF_MAX_MS : backoff * 2;
        } else {
            backoff = CD_ETCD_BACKOFF_MS;
        }
    }
    return NULL;
}

/* ------------------------------------------------------- start and stop -- */

/* Registers (joining), publishes serving and reads the members: retried for etcd_ttl s. */
static st_status_t cd_etcd_join(cd_etcd_t *e)
{
    uint64_t until = cm_mono_ms() + (uint64_t)e->d->cfg.etcd_ttl * 1000;
    uint32_t backoff = CD_ETCD_BACKOFF_MS;
    st_status_t st;

    for (;;) {
        pthread_mutex_lock(&e->lock);
        st = e->registered ? ST_OK : cd_etcd_register(e);
        if (st == ST_OK && e->self.state == MR_JOINING) {
            e->self.state = MR_SERVING;
            st = cd_etcd_put_self(e, NULL);
            if (st != ST_OK) {
                e->self.state = MR_JOINING;
            }
        }
        pthread_mutex_unlock(&e->lock);
        if (st == ST_OK) {
            st = cd_etcd_rewatch(e);
        }
        if (st == ST_OK || st == ST_ERR_INVALID || cm_mono_ms() >= until) {
            break;
        }
        cd_etcd_sleep(e, backoff);
        backoff = backoff * 2 > 1000 ? 1000 : backoff * 2;
    }
    if (st != ST_OK) {
        lg_error("etcd: cannot register with etcd=%s within etcd_ttl=%llds: %s (is etcd running "
                 "and reachable from this node?)",
                 e->d->cfg.etcd, (long long)e->d->cfg.etcd_ttl, st_strerror(st));
    }
    return st;
}

st_status_t cd_etcd_start(cd_daemon_t *d, int port)
{
    cd_membership_ops_t ops;
    cd_etcd_t *e;
    st_status_t st;

    if (d->cfg.etcd == NULL || d->cfg.etcd[0] == '\0') {
        return ST_OK;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        lg_error("etcd: out of memory");
        return ST_ERR_NOMEM;
    }
    e->d = d;
    e->up = 1;
    pthread_mutex_init(&e->lock, NULL);
    d->etcd = e;
    st = cd_etcd_self(e, port);
    if (st == ST_OK) {
        st = srpc_etcd_open(d->cfg.etcd, &e->cl);
    }
    if (st != ST_OK) {
        return st;
    }
    cd_etcd_metrics(e);
    st = cd_etcd_join(e);
    if (st != ST_OK) {
        return st;
    }
    cd_etcd_set_up(e, 1, ST_OK);
    ops.set_state = cd_etcd_set_state;
    ops.leave = cd_etcd_leave;
    ops.ctx = e;
    cd_members_set_ops(d, &ops);
    if (pthread_create(&e->thread, NULL, cd_etcd_main, e) != 0) {
        lg_error("etcd: cannot start the membership thread: %s", strerror(errno));
        return ST_ERR_INTERNAL;
    }
    e->running = 1;
    return ST_OK;
}

void cd_etcd_stop(cd_daemon_t *d)
{
    cd_etcd_t *e = d->etcd;

    if (e == NULL) {
        return;
    }
    __atomic_store_n(&e->stopping, 1, __ATOMIC_RELEASE);
    if (e->running) {
        pthread_join(e->thread, NULL);
        e->running = 0;
    }
    if (e->cl != NULL) {
        pthread_mutex_lock(&e->lock);
        if (!e->left) {
            (void)cd_etcd_deregister(e);
        }
        pthread_mutex_unlock(&e->lock);
    }
    srpc_etcd_watch_close(e->watch);
    e->watch = NULL;
}

void cd_etcd_free(cd_daemon_t *d)
{
    cd_etcd_t *e = d->etcd;

    if (e == NULL) {
        return;
    }
    cd_etcd_stop(d);
    cd_members_set_ops(d, NULL);
    srpc_etcd_close(e->cl);
    pthread_mutex_destroy(&e->lock);
    free(e);
    d->etcd = NULL;
}
