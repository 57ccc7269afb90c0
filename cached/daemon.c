/*
 * daemon.c - stratad's life cycle: start (peers, store, tier, metrics,
 * server, reaper) and stop, over the daemon's other files: the config table
 * and the secrets (daemon_config.c), the peers (daemon_peers.c), tenancy
 * checks, quotas and reload (daemon_tenancy.c), the namespace, region and
 * batch tables (daemon_ns.c). Nothing of those calls back into daemon.c.
 */
#include "daemon.h"
#include "daemon_etcd.h"

#include "dataplane.h"
#include "rebalance.h"
#include "tier.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"

/* ------------------------------------------------------------ reaper -- */

static void *cd_reaper_main(void *arg)
{
    cd_daemon_t *d = arg;

    pthread_mutex_lock(&d->stop_lock);
    while (!d->stopping) {
        struct timespec ts = cm_deadline_ms(100);
        cd_reaped_t r;

        pthread_cond_timedwait(&d->stop_cond, &d->stop_lock, &ts);
        if (d->stopping) {
            break;
        }
        pthread_mutex_unlock(&d->stop_lock);
        cd_notify_watchdog(&d->notify, cm_mono_ms()); /* a reaper stuck on the store stops it */
        cd_store_reap(d->store, cd_store_now(d->store), &r);
        cd_batch_expire(d, cd_store_now(d->store));
        if (r.reservations || r.leases || r.sessions) {
            lg_debug("reaped reservations=%llu leases=%llu sessions=%llu",
                     (unsigned long long)r.reservations, (unsigned long long)r.leases,
                     (unsigned long long)r.sessions);
        }
        pthread_mutex_lock(&d->stop_lock);
    }
    pthread_mutex_unlock(&d->stop_lock);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle -- */

int cd_daemon_port(const cd_daemon_t *d)
{
    return srpc_server_port(d->server);
}

/* Takes cfg's settings into d (cfg left empty), with its locks, and checks
 * what cd_config_parse cannot: block_tokens a multiple of 16; node_id
 * defaults to the listen address. */
static st_status_t cd_daemon_init(cd_daemon_t *d, cd_config_t *cfg)
{
    memset(d, 0, sizeof(*d));
    cd_notify_open(&d->notify);
    d->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    d->started_ms = cm_mono_ms();
    pthread_mutex_init(&d->ns_lock, NULL);
    pthread_mutex_init(&d->region_lock, NULL);
    pthread_mutex_init(&d->batch_lock, NULL);
    pthread_mutex_init(&d->peer_lock, NULL);
    pthread_mutex_init(&d->stop_lock, NULL);
    pthread_cond_init(&d->stop_cond, NULL);

    if (d->cfg.block_tokens % 16 != 0) {
        lg_error("block_tokens=%lld is not a multiple of 16", (long long)d->cfg.block_tokens);
        return ST_ERR_INVALID;
    }
    if (d->cfg.node_id == NULL || d->cfg.node_id[0] == '\0') {
        free(d->cfg.node_id);
        d->cfg.node_id = strdup(d->cfg.listen);
        if (d->cfg.node_id == NULL) {
            return ST_ERR_NOMEM;
        }
    }
    return ST_OK;
}

/* The peer set-up: the members of the peers setting, this node among
 * them, the ring over them (epoch 1). */
static st_status_t cd_daemon_peers_setup(cd_daemon_t *d)
{
    cd_member_t *m;
    size_t n;
    st_status_t status = cd_members_parse(d->cfg.peers, CD_MAX_PEERS, &m, &n);

    d->mops = cd_membership_static_ops;
    if (status != ST_OK) {
        return status;
    }
    status =
        cd_view_build(m, n, d->cfg.node_id, d->cfg.listen, (uint32_t)d->cfg.vnodes, 1, &d->view);
    free(m);
    if (status == ST_OK && n > 0 && d->view->self < 0) {
        lg_error("this node (node_id=%s, listen=%s) is not in peers=%s", d->cfg.node_id,
                 d->cfg.listen, d->cfg.peers);
        return ST_ERR_INVALID;
    }
    return status;
}

/* The store's settings from the daemon's: limits, the cluster secret, the
 * region callbacks (daemon_ns.c). */
static void cd_daemon_store_config(cd_daemon_t *d, const char *secret, cd_store_config_t *sc)
{
    cd_store_config_defaults(sc);
    sc->memory_limit = d->cfg.memory_limit;
    sc->huge = (cd_huge_mode_t)d->cfg.huge_pages;
    sc->chunk_bytes = d->cfg.chunk_bytes;
    sc->limits.max_object_bytes = d->cfg.max_object_bytes;
    sc->limits.max_hashes = (uint32_t)d->cfg.max_hashes;
    sc->limits.max_batch = (uint32_t)d->cfg.max_batch;
    sc->limits.max_sessions = (uint64_t)d->cfg.max_sessions;
    sc->limits.lease_ms = d->cfg.lease_ms;
    sc->limits.max_pin_ms = d->cfg.max_pin_ms;
    sc->limits.reservation_ms = d->cfg.reservation_ms;
    sc->limits.session_ttl_ms = d->cfg.session_ttl_ms;
    if (sc->limits.session_ttl_max_ms < d->cfg.session_ttl_ms) {
        sc->limits.session_ttl_max_ms = d->cfg.session_ttl_ms;
    }
    sc->cluster_secret = (const uint8_t *)secret;
    sc->cluster_secret_len = strlen(secret);
    sc->region_added = cd_region_added;
    sc->region_removed = cd_region_removed;
    sc->region_ctx = d;
}

/* The metrics registry, and its HTTP server when metrics_listen is set. */
static st_status_t cd_daemon_metrics_start(cd_daemon_t *d)
{
    mx_http_opts_t sec = {0};
    st_status_t status = cd_obs_create(d, &d->obs);

    if (status != ST_OK) {
        lg_error("cannot create the metrics registry: %s", st_strerror(status));
        return status;
    }
    if (d->cfg.metrics_listen[0] == '\0') {
        return ST_OK;
    }
    status = cd_tls_metrics(d, &sec);
    if (status != ST_OK) {
        return status;
    }
    status = cd_obs_serve(d->obs, d->cfg.metrics_listen, d->cfg.node_id, d->cfg.metrics_peers, &sec,
                          &d->metrics_port);
    if (status != ST_OK) {
        lg_error("cannot serve metrics metrics_listen=%s: %s", d->cfg.metrics_listen,
                 st_strerror(status));
    }
    return status;
}

/* The server's srpc_auth_fn: the daemon's auth module decides (auth.h). */
static st_status_t cd_daemon_authenticate(void *arg, const char *path, const char *token,
                                          const char *peer, const char *identity, void *principal,
                                          char *msg, size_t msg_cap)
{
    cd_daemon_t *d = arg;

    return cd_au_authenticate(&d->auth, path, token, peer, identity, principal, msg, msg_cap);
}

/*
 * The fair-queueing flow of a call: its tenant; where the principal may use
 * every tenant (auth_token, loopback), its connection; another daemon's calls
 * share one flow.
 */
static void cd_daemon_flow(void *arg, const void *principal, const char *peer, char *name,
                           size_t cap)
{
    const cd_principal_t *pr = principal;

    (void)arg;
    if (pr != NULL && pr->pr_kind == CD_PR_TENANT && pr->pr_tenant != NULL) {
        snprintf(name, cap, "tenant:%s", pr->pr_tenant->tn_name);
    } else if (pr != NULL && pr->pr_kind == CD_PR_PEER) {
        snprintf(name, cap, "cluster");
    } else {
        snprintf(name, cap, "peer:%s", peer);
    }
}

static void cd_daemon_on_wait(void *arg, uint64_t wait_ns)
{
    cd_daemon_t *d = arg;

    cd_obs_adm_wait(cd_obs_admission(d->obs), wait_ns);
}

/* The gRPC server (TLS files read here) and the calls over the transport. */
static st_status_t cd_daemon_serve(cd_daemon_t *d)
{
    srpc_server_config_t srv = {0};
    st_status_t status = cd_tls_load(d);

    if (status != ST_OK) {
        return status;
    }
    srv.tls_cert_pem = d->tls_cert_pem;
    srv.tls_key_pem = d->tls_key_pem;
    srv.tls_ca_pem = d->tls_ca_pem;
    srv.tls_client_auth = (srpc_tls_client_auth_t)d->cfg.tls_client_auth;
    srv.address = d->cfg.listen;
    srv.n_threads = (unsigned)d->cfg.threads;
    srv.n_cqs = srv.n_threads >= 4 ? 2 : 1;
    srv.max_message_bytes = (uint32_t)d->cfg.max_message_bytes;
    srv.user_arg = d;
    srv.authenticate = cd_daemon_authenticate;
    srv.admission.max_serving = (unsigned)d->cfg.max_serving_calls;
    srv.admission.max_queued_calls = (uint32_t)d->cfg.max_queued_calls;
    srv.admission.max_queued_bytes = d->cfg.max_queued_bytes;
    srv.admission.flow_max_calls = (uint32_t)d->cfg.tenant_max_queued_calls;
    srv.admission.flow_max_bytes = d->cfg.tenant_max_queued_bytes;
    srv.admission.flow = cd_daemon_flow;
    srv.admission.on_wait = cd_daemon_on_wait;
    status = srpc_server_start(&srv, cd_method_table, cd_method_table_len, &d->server);
    if (status != ST_OK) {
        lg_error("cannot serve address=%s: %s", d->cfg.listen, st_strerror(status));
        return status;
    }
    if (d->cfg.transport_calls && d->dp != NULL && !cd_dp_serve_calls(d->dp, d->server)) {
        lg_info("transport_calls: the %s transport has no messages: Locate, Release and "
                "Lookup over gRPC only",
                d->cfg.transport);
    }
    return ST_OK;
}

st_status_t cd_daemon_start(cd_daemon_t *d, cd_config_t *cfg)
{
    cd_store_config_t sc;
    cd_err_t err = {""};
    const char *secret;
    st_status_t status;

    status = cd_daemon_init(d, cfg);
    if (status == ST_OK) {
        status = cd_daemon_peers_setup(d);
    }
    if (status == ST_OK) {
        status = cd_etcd_check(d); /* daemon_etcd.c */
    }
    if (status == ST_OK) {
        status = cd_daemon_secrets(d, &secret);
    }
    if (status != ST_OK) {
        return status;
    }
    status =
        cd_au_init(&d->auth, d->cfg.tenants_file, d->cfg.auth_token, d->cfg.protected_mode, secret);
    d->auth_ready = 1;
    if (status != ST_OK) {
        return status;
    }

    cd_daemon_store_config(d, secret, &sc);
    status = cd_dp_create(d->cfg.transport, d->cfg.fabric_provider, &d->dp);
    if (status != ST_OK) {
        return status;
    }
    status = cd_daemon_isolation(d, cd_daemon_n_tenants(d), "refusing to start");
    if (status != ST_OK) {
        return status;
    }
    d->auth.au_check = cd_daemon_reload_check;
    d->auth.au_check_arg = d;
    if (d->dp != NULL) {
        sc.chunk_alloc = cd_dp_chunk_alloc;
        sc.chunk_free = cd_dp_chunk_free;
        sc.chunk_ctx = d->dp;
        sc.resv_end = cd_dp_resv_end;
    }
    if (d->cfg.data_dir[0] != '\0') {
        /* stratad does not fork, so the environment is opened in the serving process. */
        status = cd_daemon_tier_open(d); /* daemon_tier.c */
        if (status != ST_OK) {
            return status;
        }
        sc.evicted = cd_tier_evicted;
        sc.session_expired = cd_tier_session_expired;
        sc.evicted_ctx = d->tier;
    }
    status = cd_store_create(&sc, &d->store, &err);
    if (status != ST_OK) {
        lg_error("cannot create the store: %s", err.msg);
        return status;
    }
    status = cd_daemon_apply_quotas(d); /* before the tier recovers namespaces */
    if (status != ST_OK) {
        return status;
    }
    status = cd_daemon_metrics_start(d);
    if (status != ST_OK) {
        return status;
    }

    /* Before recovery and serving: both note durable objects in its catalog. */
    status = cd_rb_create(d, d->cfg.rebalance_rate, &d->rb);
    if (status != ST_OK) {
        return status;
    }
    if (d->tier != NULL) {
        /* Before serving: namespaces, sessions and the index of what is on SSD. */
        cd_notify_send(&d->notify, "STATUS=recovering the SSD tier");
        status = cd_tier_recover(d->tier, d->store);
        if (status != ST_OK) {
            return status;
        }
    }

    status = cd_daemon_serve(d);
    if (status != ST_OK) {
        return status;
    }
    if (pthread_create(&d->reaper, NULL, cd_reaper_main, d) != 0) {
        lg_error("cannot start the reaper thread: %s", strerror(errno));
        return ST_ERR_INTERNAL;
    }
    d->reaper_running = 1;
    status =
        cd_etcd_start(d, cd_daemon_port(d)); /* membership on etcd, once the listeners are up */
    if (status != ST_OK) {
        return status;
    }
    lg_info("serving node=%s address=%s port=%d memory_limit=%llu threads=%lld peers=%u "
            "data_dir=%s tls=%s",
            d->cfg.node_id, d->cfg.listen, cd_daemon_port(d),
            (unsigned long long)d->cfg.memory_limit, (long long)d->cfg.threads,
            d->view != NULL ? d->view->n : 0, d->tier != NULL ? d->cfg.data_dir : "(none)",
            d->tls_cert_pem ? "on" : "off");
    return ST_OK;
}

void cd_daemon_stop(cd_daemon_t *d, int grace_ms)
{
    /* Deregister first: the others drop this node while its calls finish. */
    cd_etcd_stop(d);
    if (d->server != NULL) {
        lg_info("stopping: finishing calls in flight grace_ms=%d", grace_ms);
        srpc_server_stop(d->server, grace_ms);
    }
    (void)cd_dp_serve_calls(d->dp, NULL); /* no call is served after this */
    pthread_mutex_lock(&d->stop_lock);
    d->stopping = 1;
    pthread_cond_broadcast(&d->stop_cond);
    pthread_mutex_unlock(&d->stop_lock);
    if (d->reaper_running) {
        pthread_join(d->reaper, NULL);
        d->reaper_running = 0;
    }
    cd_rb_destroy(d->rb); /* a push in flight finishes first */
    d->rb = NULL;
    /* The server drained: commit what is queued and close the environment. */
    cd_tier_shutdown(d->tier);
}

void cd_daemon_destroy(cd_daemon_t *d)
{
    srpc_server_destroy(d->server);
    d->server = NULL;
    cd_etcd_free(d);
    cd_obs_destroy(d->obs);
    d->obs = NULL;
    cd_daemon_peers_free(d);
    cd_batch_expire(d, UINT64_MAX);
    if (d->store != NULL) {
        cd_store_destroy(d->store);
    }
    cd_tier_free(d->tier); /* after the store: its eviction hook points here */
    d->tier = NULL;
    cd_dp_destroy(d->dp); /* after the store: its chunks are the transport's */
    d->dp = NULL;
    for (uint32_t i = 0; i < d->n_ns; i++) {
        free(d->ns[i]->mx);
        free(d->ns[i]);
    }
    for (uint32_t i = 0; i <= CD_MAX_NS; i++) {
        free(d->regions[i]);
    }
    if (d->auth_ready) {
        cd_au_destroy(&d->auth);
        d->auth_ready = 0;
    }
    cd_tls_free(d);
    cfg_free(&cd_config_table, &d->cfg);
    cd_notify_close(&d->notify);
    pthread_mutex_destroy(&d->ns_lock);
    pthread_mutex_destroy(&d->region_lock);
    pthread_mutex_destroy(&d->batch_lock);
    pthread_mutex_destroy(&d->peer_lock);
    pthread_mutex_destroy(&d->stop_lock);
    pthread_cond_destroy(&d->stop_cond);
}
