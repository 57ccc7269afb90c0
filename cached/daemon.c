/*
 * daemon.c - stratad's life cycle: config table, store, server, reaper,
 * namespace and region tables, reservation batches, peers.
 */
#include "daemon.h"

#include "dataplane.h"
#include "tier.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "st_log.h"

/* ------------------------------------------------------------ config -- */

static const char *const cd_log_levels[] = {"error", "warn", "info", "debug", "trace", NULL};
static const char *const cd_ssd_syncs[] = {"durable", "none", NULL};
static const char *const cd_tls_client_auths[] = {"none", "request", "require", NULL};

#define CD_OFF(m) offsetof(cd_config_t, m)
static const st_cfg_option_t cd_options[] = {
    {"listen", ST_CFG_STRING, CD_OFF(listen), "127.0.0.1:7700", 0, 0, 0, NULL, 'l',
     "gRPC address to listen on (host:port; port 0 picks a free one)"},
    {"node_id", ST_CFG_STRING, CD_OFF(node_id), "", 0, 0, 0, NULL, 0,
     "name of this node in the cluster (default: the listen address)"},
    {"peers", ST_CFG_STRING, CD_OFF(peers), "", 0, 0, 0, NULL, 0,
     "every node of the cluster, this one included, as host:port,host:port"},
    {"cluster_secret", ST_CFG_STRING, CD_OFF(cluster_secret), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0,
     "secret shared by the cluster's nodes, from which namespace seeds and the daemons' peer "
     "credential derive (16+ bytes; else cluster_secret_file, else $STRATA_CLUSTER_SECRET)"},
    {"cluster_secret_file", ST_CFG_STRING, CD_OFF(cluster_secret_file), "", 0, 0, 0, NULL, 0,
     "file whose first line is the cluster_secret (kept out of argv)"},
    {"auth_token", ST_CFG_STRING, CD_OFF(auth_token), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0,
     "the one token clients must present (authorization: Bearer), allowed every tenant; else "
     "auth_token_file, else $STRATA_AUTH_TOKEN; empty: no authentication"},
    {"auth_token_file", ST_CFG_STRING, CD_OFF(auth_token_file), "", 0, 0, 0, NULL, 0,
     "file whose first line is the auth_token (kept out of argv)"},
    {"tenants_file", ST_CFG_STRING, CD_OFF(tenants_file), "", 0, 0, 0, NULL, 0,
     "tenants, their token hashes, client certificate CNs (cert=), models and quotas, one per "
     "line (docs/security.md); re-read on SIGHUP"},
    {"protected_mode", ST_CFG_BOOL, CD_OFF(protected_mode), "true", 0, 0, 0, NULL, 0,
     "without an auth_token or tenants_file, refuse clients that are not on loopback "
     "unless they present a verified client certificate (tls_client_auth)"},
    {"data_dir", ST_CFG_STRING, CD_OFF(data_dir), "", 0, 0, 0, NULL, 'd',
     "directory of the SSD tier, an LMDB environment (empty: DRAM only)"},
    {"ssd_map_size", ST_CFG_SIZE, CD_OFF(ssd_map_size), "64G", 1ll << 20, 1ll << 46, 0, NULL, 0,
     "LMDB map size of the SSD tier: bounds its data file"},
    {"ssd_spill", ST_CFG_BOOL, CD_OFF(ssd_spill), "true", 0, 0, 0, NULL, 0,
     "spill KV and IDX objects evicted from DRAM to the SSD tier"},
    {"ssd_spill_budget", ST_CFG_SIZE, CD_OFF(ssd_spill_budget), "0", 0, 1ll << 46, 0, NULL, 0,
     "bytes of spilled KV and IDX objects the SSD tier keeps (0: half the map)"},
    {"ssd_writeback", ST_CFG_SIZE, CD_OFF(ssd_writeback), "256M", 0, 1ll << 46, 0, NULL, 0,
     "bytes of each namespace's coldest KV and IDX objects the SSD tier writes out ahead of "
     "eviction, so that evicting them writes nothing (0: off; needs ssd_spill)"},
    {"ssd_sync", ST_CFG_ENUM, CD_OFF(ssd_sync), "durable", 0, 0, 0, cd_ssd_syncs, 0,
     "how SSD commits reach the disk: durable (fdatasync per commit) or none (tests only)"},
    {"pid_file", ST_CFG_STRING, CD_OFF(pid_file), "", 0, 0, 0, NULL, 0,
     "write the process id here once serving"},
    {"metrics_listen", ST_CFG_STRING, CD_OFF(metrics_listen), "", 0, 0, 0, NULL, 0,
     "HTTP address of /metrics, /stats and /dashboard, host:port (empty: off)"},
    {"metrics_peers", ST_CFG_STRING, CD_OFF(metrics_peers), "", 0, 0, 0, NULL, 0,
     "the other nodes' metrics host:port, for the dashboard's cluster view"},
    {"metrics_tls_cert", ST_CFG_STRING, CD_OFF(metrics_tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate chain of the metrics server: HTTPS only (empty: HTTP)"},
    {"metrics_tls_key", ST_CFG_STRING, CD_OFF(metrics_tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of metrics_tls_cert (unencrypted)"},
    {"metrics_token", ST_CFG_STRING, CD_OFF(metrics_token), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0,
     "bearer token that /metrics and /stats require (Authorization: Bearer); empty: none"},
    {"metrics_token_file", ST_CFG_STRING, CD_OFF(metrics_token_file), "", 0, 0, 0, NULL, 0,
     "file holding metrics_token (kept out of argv and the config file)"},
    {"metrics_cors_origin", ST_CFG_STRING, CD_OFF(metrics_cors_origin), "", 0, 0, 0, NULL, 0,
     "origins whose pages may read /stats (scheme://host:port, comma separated; empty: same "
     "origin only; * is refused)"},
    {"memory_limit", ST_CFG_SIZE, CD_OFF(memory_limit), "1G", 64ll << 20, 1ll << 42, 0, NULL, 'm',
     "memory the arenas and the index may use, in all"},
    {"chunk_bytes", ST_CFG_SIZE, CD_OFF(chunk_bytes), "64M", 2ll << 20, 1ll << 32, 0, NULL, 0,
     "arena growth unit (one transport region each)"},
    {"threads", ST_CFG_INT, CD_OFF(threads), "4", 1, 256, 0, NULL, 't', "gRPC worker threads"},
    {"block_tokens", ST_CFG_INT, CD_OFF(block_tokens), "64", 16, 4096, 0, NULL, 0,
     "tokens per block of new namespaces (a multiple of 16)"},
    {"segment_blocks", ST_CFG_INT, CD_OFF(segment_blocks), "16", 1, 65536, 0, NULL, 0,
     "blocks per segment, the unit of placement"},
    {"kda_interval", ST_CFG_INT, CD_OFF(kda_interval), "16", 1, 65536, 0, NULL, 0,
     "blocks between KDA checkpoints"},
    {"replicas", ST_CFG_INT, CD_OFF(replicas), "2", 1, 16, 0, NULL, 0,
     "copies of KDA and SESSION objects"},
    {"vnodes", ST_CFG_INT, CD_OFF(vnodes), "128", 1, 4096, 0, NULL, 0,
     "virtual nodes per daemon on the ring"},
    {"lease", ST_CFG_DURATION, CD_OFF(lease_ms), "5s", 10, 600000, 0, NULL, 0,
     "default read lease"},
    {"max_lease", ST_CFG_DURATION, CD_OFF(max_lease_ms), "60s", 10, 3600000, 0, NULL, 0,
     "longest lease a client may ask for"},
    {"max_pin", ST_CFG_DURATION, CD_OFF(max_pin_ms), "1h", 1000, 2592000000ll, 0, NULL, 0,
     "longest pin, and the time a pin with ttl_ms 0 lasts"},
    {"reservation_ttl", ST_CFG_DURATION, CD_OFF(reservation_ms), "30s", 10, 3600000, 0, NULL, 0,
     "time a writer has between Reserve and Commit"},
    {"session_ttl", ST_CFG_DURATION, CD_OFF(session_ttl_ms), "1d", 1000, 2592000000ll, 0, NULL, 0,
     "default time to live of a session"},
    {"max_message", ST_CFG_SIZE, CD_OFF(max_message_bytes), "64M", 1ll << 20, 1ll << 30, 0, NULL, 0,
     "largest request message accepted"},
    {"max_object", ST_CFG_SIZE, CD_OFF(max_object_bytes), "32M", 1024, 1ll << 30, 0, NULL, 0,
     "largest object accepted"},
    {"max_hashes", ST_CFG_INT, CD_OFF(max_hashes), "65536", 1, 1 << 24, 0, NULL, 0,
     "block hashes per lookup"},
    {"max_batch", ST_CFG_INT, CD_OFF(max_batch), "4096", 1, 1 << 20, 0, NULL, 0,
     "keys per batch call, segments per lookup"},
    {"max_sessions", ST_CFG_INT, CD_OFF(max_sessions), "1000000", 1, 1ll << 32, 0, NULL, 0,
     "open sessions per namespace"},
    {"transport", ST_CFG_STRING, CD_OFF(transport), "ucx", 0, 0, 0, NULL, 0,
     "one-sided data plane: ucx, libfabric or none (falls back to none, with a warning, "
     "when it cannot start)"},
    {"fabric_provider", ST_CFG_STRING, CD_OFF(fabric_provider), "", 0, 0, 0, NULL, 0,
     "libfabric provider of the data plane (tcp;ofi_rxm, shm, verbs;ofi_rxm; empty: the first "
     "with RMA)"},
    {"transport_calls", ST_CFG_BOOL, CD_OFF(transport_calls), "true", 0, 0, 0, NULL, 0,
     "also serve Locate, Release and Lookup over the data plane's transport (ucx), without "
     "gRPC's round trip"},
    {"allow_shared_dataplane", ST_CFG_BOOL, CD_OFF(shared_dataplane), "false", 0, 0, 0, NULL, 0,
     "start with several tenants over a data plane that checks no remote key (ucx over sm, "
     "posix, cma, tcp): any client can then read every tenant's memory "
     "(docs/security.md); without it such a start or reload is refused"},
    {"log_level", ST_CFG_ENUM, CD_OFF(log_level), "info", 0, 0, 0, cd_log_levels, 0,
     "lowest level logged"},
    {"tls_cert", ST_CFG_STRING, CD_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate chain of the gRPC server: serve TLS only (empty: plaintext); re-read on "
     "SIGHUP"},
    {"tls_key", ST_CFG_STRING, CD_OFF(tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of tls_cert (unencrypted; keep it mode 0600); re-read on SIGHUP"},
    {"tls_ca", ST_CFG_STRING, CD_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
     "PEM CA bundle that client certificates and peer daemons' certificates must chain to; "
     "re-read on SIGHUP"},
    {"tls_client_auth", ST_CFG_ENUM, CD_OFF(tls_client_auth), "none", 0, 0, 0, cd_tls_client_auths,
     0,
     "client certificates (mutual TLS): none, request (verified when sent) or require; a "
     "verified certificate authenticates the tenant whose cert= (tenants_file) is its CN"},
};

const st_cfg_table_t cd_config_table = {
    "stratad", "strata cache daemon: stores KV blocks, KDA states and sessions for a cluster", NULL,
    cd_options, sizeof(cd_options) / sizeof(cd_options[0])};

/* A development secret, used (with a warning) when none is configured, so a
 * local cluster started without one still agrees on namespace seeds. */
static const char cd_dev_secret[] = "strata-development-secret-not-for-production";

/* ------------------------------------------------------- namespaces -- */

uint64_t cd_wire_ns_id(const char *tenant, const char *model)
{
    XXH3_state_t st;
    uint32_t len;
    uint64_t id;

    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, "strata-nsid-v1", 14);
    len = (uint32_t)strlen(tenant);
    XXH3_64bits_update(&st, &len, 4);
    XXH3_64bits_update(&st, tenant, len);
    len = (uint32_t)strlen(model);
    XXH3_64bits_update(&st, &len, 4);
    XXH3_64bits_update(&st, model, len);
    id = XXH3_64bits_digest(&st);
    return id == 0 ? 1 : id; /* 0 means "no namespace" on the wire */
}

st_status_t cd_daemon_ns_open(cd_daemon_t *d, const char *tenant, const char *model,
                              uint32_t block_tokens, cd_ns_entry_t **entry_p, cd_err_t *err)
{
    uint64_t wire = cd_wire_ns_id(tenant, model);
    cd_ns_entry_t *e;
    cd_ns_info_t info;
    uint32_t local;
    st_status_t status;

    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        if (d->ns[i]->wire_id == wire) {
            e = d->ns[i];
            pthread_mutex_unlock(&d->ns_lock);
            if (block_tokens != 0 && block_tokens != e->block_tokens) {
                snprintf(err->msg, sizeof(err->msg),
                         "namespace tenant=%s model=%s has block_tokens=%u, not %u", tenant, model,
                         e->block_tokens, block_tokens);
                return ST_ERR_EXISTS;
            }
            *entry_p = e;
            return ST_OK;
        }
    }
    if (d->n_ns == CD_MAX_NS) {
        pthread_mutex_unlock(&d->ns_lock);
        snprintf(err->msg, sizeof(err->msg), "no room for another namespace (limit %d)", CD_MAX_NS);
        return ST_ERR_EXHAUSTED;
    }
    status = cd_store_ns_create(d->store, tenant, model,
                                block_tokens ? block_tokens : (uint32_t)d->cfg.block_tokens, &local,
                                err);
    if (status == ST_OK) {
        status = cd_store_ns_info(d->store, local, &info);
    }
    if (status != ST_OK) {
        pthread_mutex_unlock(&d->ns_lock);
        return status;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL || d->n_ns == CD_MAX_NS) {
        pthread_mutex_unlock(&d->ns_lock);
        free(e);
        snprintf(err->msg, sizeof(err->msg), "no room for another namespace (limit %d)", CD_MAX_NS);
        return e == NULL ? ST_ERR_NOMEM : ST_ERR_EXHAUSTED;
    }
    e->wire_id = wire;
    e->local_id = local;
    snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
    e->block_tokens = info.block_tokens;
    e->seed = info.seed;
    {
        char name[2 * CD_NAME_MAX + 2];

        snprintf(name, sizeof(name), "%s/%s", tenant, model);
        status = cd_obs_ns_add(d->obs, name, &e->mx);
    }
    if (status != ST_OK) {
        pthread_mutex_unlock(&d->ns_lock);
        free(e);
        snprintf(err->msg, sizeof(err->msg), "no memory for the namespace's metrics");
        return status;
    }
    cd_tier_ns_bind(d->tier, local, wire);
    d->ns[d->n_ns++] = e;
    pthread_mutex_unlock(&d->ns_lock);
    *entry_p = e;
    /* The record recovery re-creates the namespace from (durable, rare). */
    status = cd_tier_ns_put(d->tier, wire, tenant, model, e->block_tokens, err);
    if (status != ST_OK) {
        /* Served from DRAM all the same; only its recovery after a restart is at stake. */
        st_warn("namespace record not stored in the SSD tier tenant=%s model=%s: %s", tenant, model,
                err->msg);
        err->msg[0] = '\0';
    }
    return ST_OK;
}

cd_ns_entry_t *cd_daemon_ns_find(cd_daemon_t *d, uint64_t wire_id)
{
    cd_ns_entry_t *found = NULL;

    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        if (d->ns[i]->wire_id == wire_id) {
            found = d->ns[i];
            break;
        }
    }
    pthread_mutex_unlock(&d->ns_lock);
    return found;
}

/* Store callback: a chunk of a namespace's arena became a region. Runs with
 * the namespace lock held; takes only region_lock. */
static void cd_region_added(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len)
{
    cd_daemon_t *d = ctx;
    cd_region_table_t *t;

    if (ns_id == 0 || ns_id > CD_MAX_NS) {
        return;
    }
    pthread_mutex_lock(&d->region_lock);
    t = d->regions[ns_id];
    if (t == NULL) {
        t = d->regions[ns_id] = calloc(1, sizeof(*t));
    }
    if (t != NULL && t->n < CD_MAX_REGIONS) {
        t->r[t->n].id = region;
        t->r[t->n].base = base;
        t->r[t->n].len = len;
        t->n++;
        t->epoch++;
    } else {
        st_warn_ratelimited("region table full ns=%u region=%u", ns_id, region);
    }
    pthread_mutex_unlock(&d->region_lock);
}

static void cd_region_removed(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len)
{
    cd_daemon_t *d = ctx;
    cd_region_table_t *t;

    if (ns_id == 0 || ns_id > CD_MAX_NS) {
        return;
    }
    pthread_mutex_lock(&d->region_lock);
    t = d->regions[ns_id];
    for (uint32_t i = 0; t != NULL && i < t->n; i++) {
        if (t->r[i].id == region) {
            t->r[i] = t->r[--t->n];
            t->epoch++;
            break;
        }
    }
    pthread_mutex_unlock(&d->region_lock);
}

uint64_t cd_daemon_ns_region_epoch(cd_daemon_t *d, const cd_ns_entry_t *e)
{
    uint64_t epoch;

    cd_daemon_ns_regions(d, e, NULL, 0, &epoch);
    return epoch;
}

uint32_t cd_daemon_ns_regions(cd_daemon_t *d, const cd_ns_entry_t *e, cd_region_t *out,
                              uint32_t max, uint64_t *epoch_p)
{
    cd_region_table_t *t;
    uint32_t n = 0;

    pthread_mutex_lock(&d->region_lock);
    t = e->local_id <= CD_MAX_NS ? d->regions[e->local_id] : NULL;
    if (t != NULL) {
        n = t->n < max ? t->n : max;
        if (n > 0) {
            memcpy(out, t->r, sizeof(*out) * n);
        }
        *epoch_p = t->epoch;
    } else {
        *epoch_p = 0;
    }
    pthread_mutex_unlock(&d->region_lock);
    return n;
}

/* ---------------------------------------------------- reservations -- */

/* Finds batch id among the live ones. batch_lock held. */
static cd_batch_t *cd_batch_find_locked(cd_daemon_t *d, uint64_t id)
{
    for (cd_batch_t *b = d->batches; b != NULL; b = b->next) {
        if (b->id == id) {
            return b;
        }
    }
    return NULL;
}

/* Remembers a finished batch. batch_lock held. */
static void cd_batch_retire_locked(cd_daemon_t *d, const cd_batch_t *b)
{
    struct cd_batch_retired *r = &d->retired[d->n_retired++ % CD_BATCH_RETIRED];

    r->id = b->id;
    r->client = b->client;
    r->ns_local = b->ns_local;
}

st_status_t cd_batch_add(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t *resv,
                         size_t n, uint64_t expires_ms, uint64_t *id_p)
{
    cd_batch_t *b = calloc(1, sizeof(*b));

    if (b == NULL) {
        return ST_ERR_NOMEM;
    }
    b->ns_local = ns_local;
    b->client = client;
    b->expires_ms = expires_ms;
    b->n = n;
    b->resv = resv;
    pthread_mutex_lock(&d->batch_lock);
    /* Random, so that nobody guesses another client's batch; never 0, never a live one. */
    do {
        b->id = cd_au_random64();
    } while (b->id != 0 && cd_batch_find_locked(d, b->id) != NULL);
    if (b->id == 0) {
        pthread_mutex_unlock(&d->batch_lock);
        free(b);
        return ST_ERR_INTERNAL;
    }
    b->next = d->batches;
    d->batches = b;
    pthread_mutex_unlock(&d->batch_lock);
    *id_p = b->id;
    return ST_OK;
}

cd_batch_t *cd_batch_take(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id)
{
    cd_batch_t **pp, *b = NULL;

    pthread_mutex_lock(&d->batch_lock);
    for (pp = &d->batches; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == id && (*pp)->ns_local == ns_local &&
            ((*pp)->client == 0 || (*pp)->client == client)) {
            b = *pp;
            *pp = b->next;
            cd_batch_retire_locked(d, b);
            break;
        }
    }
    pthread_mutex_unlock(&d->batch_lock);
    return b;
}

int cd_batch_issued(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id)
{
    int found = 0;

    pthread_mutex_lock(&d->batch_lock);
    for (uint32_t i = 0; i < CD_BATCH_RETIRED && i < d->n_retired && !found; i++) {
        const struct cd_batch_retired *r = &d->retired[i];

        found = id != 0 && r->id == id && r->ns_local == ns_local &&
                (r->client == 0 || r->client == client);
    }
    pthread_mutex_unlock(&d->batch_lock);
    return found;
}

void cd_batch_free(cd_batch_t *b)
{
    if (b != NULL) {
        free(b->resv);
        free(b);
    }
}

/* Drops batches past their expiry; the store expires the reservations. */
void cd_batch_expire(cd_daemon_t *d, uint64_t now_ms)
{
    cd_batch_t **pp = &d->batches, *dead = NULL;

    pthread_mutex_lock(&d->batch_lock);
    while (*pp != NULL) {
        cd_batch_t *b = *pp;

        if (b->expires_ms <= now_ms) {
            cd_batch_retire_locked(d, b);
            *pp = b->next;
            b->next = dead;
            dead = b;
        } else {
            pp = &b->next;
        }
    }
    pthread_mutex_unlock(&d->batch_lock);
    while (dead != NULL) {
        cd_batch_t *next = dead->next;

        cd_batch_free(dead);
        dead = next;
    }
}

/* ------------------------------------------------------------- peers -- */

static st_status_t cd_parse_peers(cd_daemon_t *d)
{
    char *list, *save = NULL, *tok;

    if (d->cfg.peers == NULL || d->cfg.peers[0] == '\0') {
        return ST_OK;
    }
    list = strdup(d->cfg.peers);
    if (list == NULL) {
        return ST_ERR_NOMEM;
    }
    for (tok = strtok_r(list, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        if (strchr(tok, ':') == NULL || d->n_peers == CD_MAX_PEERS) {
            st_error("bad peer list entry peer=%s (want host:port, at most %d peers)", tok,
                     CD_MAX_PEERS);
            free(list);
            return ST_ERR_INVALID;
        }
        d->peer_list[d->n_peers] = strdup(tok);
        if (d->peer_list[d->n_peers] == NULL) {
            free(list);
            return ST_ERR_NOMEM;
        }
        d->n_peers++;
    }
    free(list);
    return ST_OK;
}

srpc_channel_t *cd_daemon_peer(cd_daemon_t *d, uint32_t i)
{
    srpc_channel_t *ch;

    if (i >= d->n_peers) {
        return NULL;
    }
    pthread_mutex_lock(&d->peer_lock);
    if (d->peer_ch[i] == NULL) {
        srpc_channel_config_t cc = {0};

        /* The cluster credential, never a client's token (auth.h). */
        cc.token = d->auth.au_peer_token;
        cd_tls_peer_config(d, &cc);
        if (srpc_channel_open(d->peer_list[i], &cc, &d->peer_ch[i]) != ST_OK) {
            d->peer_ch[i] = NULL;
        }
    }
    ch = d->peer_ch[i];
    pthread_mutex_unlock(&d->peer_lock);
    return ch;
}

/* ------------------------------------------------------------ reaper -- */

static void *cd_reaper_main(void *arg)
{
    cd_daemon_t *d = arg;

    pthread_mutex_lock(&d->stop_lock);
    while (!d->stopping) {
        struct timespec ts;
        cd_reaped_t r;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&d->stop_cond, &d->stop_lock, &ts);
        if (d->stopping) {
            break;
        }
        pthread_mutex_unlock(&d->stop_lock);
        cd_store_reap(d->store, cd_store_now(d->store), &r);
        cd_batch_expire(d, cd_store_now(d->store));
        if (r.reservations || r.leases || r.sessions) {
            st_debug("reaped reservations=%llu leases=%llu sessions=%llu",
                     (unsigned long long)r.reservations, (unsigned long long)r.leases,
                     (unsigned long long)r.sessions);
        }
        pthread_mutex_lock(&d->stop_lock);
    }
    pthread_mutex_unlock(&d->stop_lock);
    return NULL;
}

/* ---------------------------------------------------------- lifecycle -- */

/* Whether a listen address (host:port) is on loopback only. */
static int cd_listen_is_loopback(const char *listen)
{
    return strncmp(listen, "127.", 4) == 0 || strncmp(listen, "localhost:", 10) == 0 ||
           strncmp(listen, "[::1]:", 6) == 0 || strncmp(listen, "unix:", 5) == 0;
}

/*
 * Reads the secrets from their files or the environment (docs/security.md:
 * the value in the config or argv, else the *_file, else the environment;
 * a value and a file both set is an error), and refuses to serve a
 * non-loopback address without a cluster secret and without authentication.
 * Sets *secret_p to the cluster secret to use.
 */
static st_status_t cd_daemon_secrets(cd_daemon_t *d, const char **secret_p)
{
    st_status_t status;
    int loopback = cd_listen_is_loopback(d->cfg.listen);

    status = cd_tn_read_secret(&d->cfg.auth_token, d->cfg.auth_token_file, "STRATA_AUTH_TOKEN",
                               "auth_token");
    if (status == ST_OK) {
        status = cd_tn_read_secret(&d->cfg.cluster_secret, d->cfg.cluster_secret_file,
                                   "STRATA_CLUSTER_SECRET", "cluster_secret");
    }
    if (status != ST_OK) {
        return status;
    }
    if (!loopback && d->cfg.cluster_secret[0] == '\0') {
        st_error("listen=%s is not a loopback address and no cluster_secret is set "
                 "(cluster_secret_file or STRATA_CLUSTER_SECRET): refusing to start with the "
                 "public development secret",
                 d->cfg.listen);
        return ST_ERR_INVALID;
    }
    if (!loopback && d->cfg.auth_token[0] == '\0' && d->cfg.tenants_file[0] == '\0' &&
        d->cfg.tls_client_auth != SRPC_TLS_CLIENT_AUTH_REQUIRE) {
        /* tls_client_auth=require authenticates every client by its certificate. */
        st_error("listen=%s is not a loopback address and neither tenants_file nor auth_token "
                 "is set (nor tls_client_auth=require): refusing to serve without "
                 "authentication",
                 d->cfg.listen);
        return ST_ERR_INVALID;
    }
    if (d->cfg.cluster_secret[0] == '\0' &&
        (d->cfg.auth_token[0] != '\0' || d->cfg.tenants_file[0] != '\0')) {
        /* With the public development secret anyone could compute the seeds and the
         * peer credential (a Lookup on any namespace): authentication would be moot. */
        st_error("auth_token or tenants_file is set but no cluster_secret (cluster_secret_file "
                 "or STRATA_CLUSTER_SECRET): the namespace seeds and the peer credential must "
                 "not derive from the public development secret");
        return ST_ERR_INVALID;
    }
    *secret_p = d->cfg.cluster_secret;
    if ((*secret_p)[0] == '\0') {
        st_warn("cluster_secret is not set: namespace seeds are predictable (loopback only); "
                "set it in production");
        *secret_p = cd_dev_secret;
    } else if (strlen(*secret_p) < 16) {
        st_error("cluster_secret is too short (%zu bytes, need at least 16)", strlen(*secret_p));
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* Tenants of the current table (0 without a tenants file). */
static size_t cd_daemon_n_tenants(const cd_daemon_t *d)
{
    const cd_tn_table_t *t = cd_tn_current(&d->auth.au_tenants);

    return t != NULL ? t->tt_n : 0;
}

/* 1 when the data plane runs and checks no remote key. */
static int cd_daemon_dp_open(const cd_daemon_t *d)
{
    return d->dp != NULL && !cd_dp_committed_read_only(d->dp);
}

int cd_daemon_dataplane_isolated(cd_daemon_t *d)
{
    return !cd_daemon_dp_open(d) || cd_daemon_n_tenants(d) <= 1;
}

/*
 * Whether n_tenants tenants may share this daemon's data plane: refused
 * (ST_ERR_INVALID, logged as an error naming the fixes) when there are
 * several and the transport checks no remote key, unless
 * allow_shared_dataplane (then a warning, at start and at every reload).
 * `what` says what is refused ("refusing to start", "reload refused ...").
 * Also the reload check of the auth module (cd_auth_t's au_check).
 */
static st_status_t cd_daemon_isolation(cd_daemon_t *d, size_t n_tenants, const char *what)
{
    if (n_tenants <= 1 || !cd_daemon_dp_open(d)) {
        return ST_OK;
    }
    if (d->cfg.shared_dataplane) {
        st_warn("allow_shared_dataplane=true: tenants_file names %zu tenants and transport=%s "
                "does not enforce remote keys: any client that reaches this daemon's data plane "
                "can read and write every tenant's memory (strata_dataplane_isolated 0; "
                "docs/security.md)",
                n_tenants, d->cfg.transport);
        return ST_OK;
    }
    st_error("%s: tenants_file names %zu tenants but transport=%s does not enforce remote keys "
             "(%s): any client that reaches this "
             "daemon's data plane could read and write every tenant's memory. Use "
             "transport=libfabric (tcp;ofi_rxm, shm, sockets and udp;ofi_rxd enforce keys), or "
             "one daemon per tenant, or UCX over InfiniBand verbs, whose NIC checks keys but "
             "which stratad cannot measure here and so counts as not enforcing; or set "
             "allow_shared_dataplane=true to accept the risk (docs/security.md)",
             what, n_tenants, d->cfg.transport,
             strcmp(d->cfg.transport, "libfabric") == 0
                 ? "this fabric_provider is not one measured to enforce them"
                 : "UCX over sm, posix, cma and tcp checks none");
    return ST_ERR_INVALID;
}

/* The auth module's reload check (au_check). */
static st_status_t cd_daemon_reload_check(void *arg, size_t n_tenants)
{
    return cd_daemon_isolation(arg, n_tenants, "tenants_file reload refused, the old table stays");
}

/* What cd_daemon_quota_one does with each tenant of the tenants file. */
typedef struct cd_quota_walk {
    cd_store_t *qw_store;
    st_status_t qw_status;
} cd_quota_walk_t;

/* Hands tenant t's quotas of the tenants file to the store. */
static void cd_daemon_quota_one(void *arg, const cd_tn_tenant_t *t)
{
    cd_quota_walk_t *w = arg;
    const cd_tn_quota_t *f = cd_tn_quota(t);
    cd_tenant_quota_t q = {
        .memory_bytes = f->memory,
        .ssd_bytes = f->ssd,
        .sessions = f->sessions,
        .pins = f->pins,
        .leases = f->leases,
        .reservations = f->reservations,
        .namespaces = f->namespaces,
    };
    cd_err_t err = {""};
    st_status_t status = cd_store_tenant_set(w->qw_store, t->tn_name, &q, &err);

    if (status != ST_OK) {
        st_error("cannot set the quotas of tenant %s: %s", t->tn_name, err.msg);
        w->qw_status = status;
    }
}

/*
 * Hands every tenant's quotas of the current tenants table to the store
 * (after the load and after each reload). A tenant the store knows that the
 * table no longer names (a reload removed it) keeps its last quotas, except
 * memory, lowered to 1 byte: no principal can reach its namespaces any more
 * (cached/auth.c refuses it), and its DRAM is what eviction takes first.
 * Returns ST_OK, or the first error of the store (logged).
 */
static st_status_t cd_daemon_apply_quotas(cd_daemon_t *d)
{
    cd_quota_walk_t w = {d->store, ST_OK};
    cd_tenant_usage_t *u;
    size_t n;

    if (!d->auth.au_has_tenants || d->store == NULL) {
        return ST_OK; /* no tenants file: no quotas (docs/security.md) */
    }
    cd_tn_foreach(&d->auth.au_tenants, cd_daemon_quota_one, &w);
    n = cd_store_tenants(d->store, NULL, 0);
    u = n != 0 ? calloc(n, sizeof(*u)) : NULL;
    if (n != 0 && u == NULL) {
        return ST_ERR_NOMEM;
    }
    n = cd_store_tenants(d->store, u, n);
    for (size_t i = 0; u != NULL && i < n; i++) {
        cd_err_t err = {""};

        if (cd_tn_find_name(&d->auth.au_tenants, u[i].tenant) != NULL ||
            u[i].quota.memory_bytes == 1) {
            continue;
        }
        u[i].quota.memory_bytes = 1;
        if (cd_store_tenant_set(d->store, u[i].tenant, &u[i].quota, &err) != ST_OK) {
            st_error("cannot lower the quotas of removed tenant %s: %s", u[i].tenant, err.msg);
            w.qw_status = ST_ERR_NOMEM;
        } else {
            st_info("tenant removed by the tenants file: its namespaces are refused and its "
                    "memory is evicted first tenant=%s",
                    u[i].tenant);
        }
    }
    free(u);
    return w.qw_status;
}

st_status_t cd_daemon_reload(cd_daemon_t *d)
{
    st_status_t status = cd_au_reload(&d->auth);

    if (status != ST_OK) {
        return status;
    }
    return cd_daemon_apply_quotas(d);
}

int cd_daemon_tenant_known(cd_daemon_t *d, const char *tenant)
{
    return !d->auth.au_has_tenants || cd_tn_find_name(&d->auth.au_tenants, tenant) != NULL;
}

int cd_daemon_port(const cd_daemon_t *d)
{
    return srpc_server_port(d->server);
}

static uint64_t cd_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

st_status_t cd_daemon_start(cd_daemon_t *d, cd_config_t *cfg)
{
    cd_store_config_t sc;
    srpc_server_config_t srv = {0};
    cd_err_t err = {""};
    const char *secret;
    st_status_t status;

    memset(d, 0, sizeof(*d));
    d->cfg = *cfg;
    memset(cfg, 0, sizeof(*cfg));
    d->started_ms = cd_now_ms();
    pthread_mutex_init(&d->ns_lock, NULL);
    pthread_mutex_init(&d->region_lock, NULL);
    pthread_mutex_init(&d->batch_lock, NULL);
    pthread_mutex_init(&d->peer_lock, NULL);
    pthread_mutex_init(&d->stop_lock, NULL);
    pthread_cond_init(&d->stop_cond, NULL);

    if (d->cfg.block_tokens % 16 != 0) {
        st_error("block_tokens=%lld is not a multiple of 16", (long long)d->cfg.block_tokens);
        return ST_ERR_INVALID;
    }
    if (d->cfg.node_id == NULL || d->cfg.node_id[0] == '\0') {
        free(d->cfg.node_id);
        d->cfg.node_id = strdup(d->cfg.listen);
        if (d->cfg.node_id == NULL) {
            return ST_ERR_NOMEM;
        }
    }
    status = cd_parse_peers(d);
    if (status != ST_OK) {
        return status;
    }
    d->self_peer = -1;
    if (d->n_peers > 0) {
        for (uint32_t i = 0; i < d->n_peers; i++) {
            if (strcmp(d->peer_list[i], d->cfg.node_id) == 0 ||
                strcmp(d->peer_list[i], d->cfg.listen) == 0) {
                d->self_peer = (int)i;
            }
        }
        if (d->self_peer < 0) {
            st_error("this node (node_id=%s, listen=%s) is not in peers=%s", d->cfg.node_id,
                     d->cfg.listen, d->cfg.peers);
            return ST_ERR_INVALID;
        }
        status = st_ring_init(&d->ring, (const char *const *)d->peer_list, d->n_peers,
                              (uint32_t)d->cfg.vnodes);
        if (status != ST_OK) {
            st_error("cannot build the ring over peers=%s: %s", d->cfg.peers, st_strerror(status));
            return status;
        }
    }
    status = cd_daemon_secrets(d, &secret);
    if (status != ST_OK) {
        return status;
    }
    status =
        cd_au_init(&d->auth, d->cfg.tenants_file, d->cfg.auth_token, d->cfg.protected_mode, secret);
    d->auth_ready = 1;
    if (status != ST_OK) {
        return status;
    }

    cd_store_config_defaults(&sc);
    sc.memory_limit = d->cfg.memory_limit;
    sc.chunk_bytes = d->cfg.chunk_bytes;
    sc.limits.max_object_bytes = d->cfg.max_object_bytes;
    sc.limits.max_hashes = (uint32_t)d->cfg.max_hashes;
    sc.limits.max_batch = (uint32_t)d->cfg.max_batch;
    sc.limits.max_sessions = (uint64_t)d->cfg.max_sessions;
    sc.limits.lease_ms = d->cfg.lease_ms;
    sc.limits.max_pin_ms = d->cfg.max_pin_ms;
    sc.limits.reservation_ms = d->cfg.reservation_ms;
    sc.limits.session_ttl_ms = d->cfg.session_ttl_ms;
    if (sc.limits.session_ttl_max_ms < d->cfg.session_ttl_ms) {
        sc.limits.session_ttl_max_ms = d->cfg.session_ttl_ms;
    }
    sc.cluster_secret = (const uint8_t *)secret;
    sc.cluster_secret_len = strlen(secret);
    sc.region_added = cd_region_added;
    sc.region_removed = cd_region_removed;
    sc.region_ctx = d;
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
        status = cd_tier_open(d, &d->tier);
        if (status != ST_OK) {
            return status;
        }
        sc.evicted = cd_tier_evicted;
        sc.session_expired = cd_tier_session_expired;
        sc.evicted_ctx = d->tier;
    }
    status = cd_store_create(&sc, &d->store, &err);
    if (status != ST_OK) {
        st_error("cannot create the store: %s", err.msg);
        return status;
    }
    status = cd_daemon_apply_quotas(d); /* before the tier recovers namespaces */
    if (status != ST_OK) {
        return status;
    }

    status = cd_obs_create(d, &d->obs);
    if (status != ST_OK) {
        st_error("cannot create the metrics registry: %s", st_strerror(status));
        return status;
    }
    if (d->cfg.metrics_listen[0] != '\0') {
        st_metrics_http_opts_t sec = {0};

        status = cd_tls_metrics(d, &sec);
        if (status != ST_OK) {
            return status;
        }
        status = cd_obs_serve(d->obs, d->cfg.metrics_listen, d->cfg.node_id, d->cfg.metrics_peers,
                              &sec, &d->metrics_port);
        if (status != ST_OK) {
            st_error("cannot serve metrics metrics_listen=%s: %s", d->cfg.metrics_listen,
                     st_strerror(status));
            return status;
        }
    }

    if (d->tier != NULL) {
        /* Before serving: namespaces, sessions and the index of what is on SSD. */
        status = cd_tier_recover(d->tier);
        if (status != ST_OK) {
            return status;
        }
    }

    status = cd_tls_load(d);
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
    srv.authenticate = cd_au_authenticate;
    status = srpc_server_start(&srv, cd_method_table, cd_method_table_len, &d->server);
    if (status != ST_OK) {
        st_error("cannot serve address=%s: %s", d->cfg.listen, st_strerror(status));
        return status;
    }
    if (d->cfg.transport_calls && d->dp != NULL && !cd_dp_serve_calls(d->dp, d->server)) {
        st_info("transport_calls: the %s transport has no messages: Locate, Release and "
                "Lookup over gRPC only",
                d->cfg.transport);
    }
    if (pthread_create(&d->reaper, NULL, cd_reaper_main, d) != 0) {
        st_error("cannot start the reaper thread: %s", strerror(errno));
        return ST_ERR_INTERNAL;
    }
    d->reaper_running = 1;
    st_info("serving node=%s address=%s port=%d memory_limit=%llu threads=%lld peers=%u "
            "data_dir=%s tls=%s",
            d->cfg.node_id, d->cfg.listen, cd_daemon_port(d),
            (unsigned long long)d->cfg.memory_limit, (long long)d->cfg.threads, d->n_peers,
            d->tier != NULL ? d->cfg.data_dir : "(none)", d->tls_cert_pem ? "on" : "off");
    return ST_OK;
}

void cd_daemon_stop(cd_daemon_t *d, int grace_ms)
{
    if (d->server != NULL) {
        st_info("stopping: finishing calls in flight grace_ms=%d", grace_ms);
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
    /* The server drained: commit what is queued and close the environment. */
    cd_tier_shutdown(d->tier);
}

void cd_daemon_destroy(cd_daemon_t *d)
{
    srpc_server_destroy(d->server);
    d->server = NULL;
    cd_obs_destroy(d->obs);
    d->obs = NULL;
    for (uint32_t i = 0; i < d->n_peers; i++) {
        srpc_channel_close(d->peer_ch[i]);
        free(d->peer_list[i]);
    }
    if (d->n_peers > 0) {
        st_ring_destroy(&d->ring);
    }
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
    st_config_free(&cd_config_table, &d->cfg);
    pthread_mutex_destroy(&d->ns_lock);
    pthread_mutex_destroy(&d->region_lock);
    pthread_mutex_destroy(&d->batch_lock);
    pthread_mutex_destroy(&d->peer_lock);
    pthread_mutex_destroy(&d->stop_lock);
    pthread_cond_destroy(&d->stop_cond);
}
