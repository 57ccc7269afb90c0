/*
 * daemon.h - stratad: the configuration, the life cycle and the glue between
 * the control plane (rpc/), the storage core (store.h) and the tiers.
 *
 * A daemon owns one store, one gRPC server serving strata.v1.Cache, a reaper
 * thread that expires leases, reservations and sessions, and the table that
 * maps the cluster-wide namespace ids of the protocol to the store's local
 * ones. Handlers live in handlers_*.c and reach the daemon through
 * srpc_ctx_server_arg().
 *
 * Thread safety: cd_daemon_start/stop/destroy run on the main thread; the
 * handlers run on the server's workers and use only the thread-safe store
 * API and the locked tables below.
 */
#ifndef STRATA_CACHED_DAEMON_H
#define STRATA_CACHED_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "auth.h"
#include "notify.h"
#include "members.h"
#include "observe.h"
#include "ring.h"
#include "srpc.h"
#include "config.h"
#include "store.h"

#define CD_VERSION       "0.1.0"
#define CD_MAX_NS        64
#define CD_MAX_REGIONS   1024
#define CD_MAX_PEERS     256
#define CD_MAX_CHANNELS  (2 * CD_MAX_PEERS) /* peer channels kept, by address */
#define CD_BATCH_RETIRED 4096 /* finished batch ids remembered, so that Abort stays idempotent */

/* stratad's settings, filled from the config table (cd_config_table). */
typedef struct cd_config {
    char *listen;
    char *node_id;
    char *peers;               /* "host:port,..." of the whole cluster, this node included */
    char *etcd;                /* etcd endpoints (membership on etcd); "" static peers */
    char *etcd_prefix;         /* key prefix of the cluster in etcd */
    int64_t etcd_ttl;          /* lease TTL in seconds */
    char *advertise;           /* host others reach this node at; "" the listen host */
    char *cluster_secret;      /* sensitive */
    char *auth_token;          /* sensitive */
    char *auth_token_file;     /* auth_token read from this file */
    char *cluster_secret_file; /* cluster_secret read from this file */
    char *tenants_file;        /* per-tenant tokens and quotas (tenants.h) */
    char *data_dir;
    char *pid_file;
    char *metrics_listen; /* "host:port" of /metrics, /stats, /dashboard; "" off */
    char *metrics_peers;  /* other nodes' metrics host:port, for the dashboard */
    uint64_t memory_limit;
    uint64_t chunk_bytes;
    int64_t threads;
    int64_t max_serving_calls; /* fair queueing: handlers at once; 0 off */
    uint64_t slice_bytes;      /* fair queueing: a Get's or Put's slice; 0 whole */
    int64_t max_queued_calls;  /* admission control, the daemon; 0 no limit */
    uint64_t max_queued_bytes;
    int64_t tenant_max_queued_calls; /* admission control, one tenant; 0 no limit */
    uint64_t tenant_max_queued_bytes;
    int64_t block_tokens;
    int64_t segment_blocks;
    int64_t kda_interval;
    int64_t replicas;
    int64_t vnodes;
    uint64_t lease_ms;
    uint64_t max_lease_ms;
    uint64_t max_pin_ms;
    uint64_t reservation_ms;
    uint64_t session_ttl_ms;
    uint64_t max_message_bytes;
    uint64_t max_object_bytes;
    int64_t max_hashes;
    int64_t max_batch;
    int64_t max_sessions;
    int log_level;
    int protected_mode;
    char *transport;           /* data plane: none, ucx, libfabric (dataplane.h) */
    char *fabric_provider;     /* libfabric provider; "" the first with RMA */
    int transport_calls;       /* serve Locate, Release, Lookup over the transport too */
    int shared_dataplane;      /* allow_shared_dataplane: several tenants, keys unchecked */
    uint64_t ssd_map_size;     /* SSD tier (tier.h): LMDB map size */
    int ssd_spill;             /* spill evicted KV and IDX objects to the tier */
    uint64_t ssd_spill_budget; /* bytes of spilled objects kept; 0: half the map */
    int ssd_sync;              /* 0 durable, 1 none (ssd_sync_t) */
    uint64_t ssd_writeback;    /* bytes at each namespace's cold end written ahead of eviction */
    char *tls_cert;            /* PEM files of the gRPC server's TLS; "" off (daemon_tls.c) */
    char *tls_key;
    char *tls_ca;           /* CA of client certificates and of peers' certificates */
    int tls_client_auth;    /* srpc_tls_client_auth_t: none, request, require */
    char *metrics_tls_cert; /* PEM files: /metrics over HTTPS; "" HTTP */
    char *metrics_tls_key;
    char *metrics_token;       /* sensitive: bearer token of /metrics and /stats; "" none */
    char *metrics_token_file;  /* or read from this file */
    char *metrics_cors_origin; /* origins that may read /stats from a browser */
    int huge_pages;            /* cd_huge_mode_t of the arenas: off, thp, hugetlb */
    uint64_t rebalance_rate;   /* bytes/s of the rebalancer's pushes; 0 unbounded */
    int drain_on_term;         /* SIGTERM drains before it stops (static mode) */
    uint64_t drain_timeout_ms; /* how long a drain waits for its objects to be handed over */
} cd_config_t;

extern const cfg_table_t cd_config_table;

/* One arena chunk of a namespace, as Hello hands it out. */
typedef struct cd_region {
    uint32_t id;
    void *base;
    size_t len;
} cd_region_t;

/* A namespace as the protocol names it. */
typedef struct cd_ns_entry {
    uint64_t wire_id;  /* namespace_id on the wire, the same on every daemon */
    uint32_t local_id; /* the store's id */
    uint32_t block_tokens;
    st_hash_t seed;
    cd_ns_metrics_t *mx; /* its counters (never NULL once the entry is listed) */
    char tenant[CD_NAME_MAX + 1];
} cd_ns_entry_t;

/* The arena chunks of one local namespace (filled by the store's callbacks). */
typedef struct cd_region_table {
    cd_region_t r[CD_MAX_REGIONS];
    uint32_t n;
    uint64_t epoch;
} cd_region_table_t;

/* A reservation batch of the protocol: one id, the store's per-key ids. */
typedef struct cd_batch {
    uint64_t id;
    uint32_t ns_local;
    uint64_t expires_ms;
    size_t n;
    uint64_t *resv;  /* per key: the store's reservation id, 0 for KEY_EXISTS */
    uint64_t client; /* the Hello client id that made it; 0: bound to the namespace only */
    struct cd_batch *next;
} cd_batch_t;

typedef struct cd_daemon {
    cd_config_t cfg;
    cd_auth_t auth; /* principals, tenants, transport keys (auth.h) */
    int auth_ready;
    cd_store_t *store;
    srpc_server_t *server;
    cd_obs_t *obs;
    int metrics_port;
    uint64_t started_ms;

    pthread_mutex_t ns_lock; /* guards ns[] and n_ns */
    cd_ns_entry_t *ns[CD_MAX_NS];
    uint32_t n_ns;

    pthread_mutex_t region_lock;               /* guards regions[] */
    cd_region_table_t *regions[CD_MAX_NS + 1]; /* by local namespace id */

    pthread_mutex_t batch_lock; /* guards batches and retired */
    cd_batch_t *batches;
    struct cd_batch_retired {
        uint64_t id, client;
        uint32_t ns_local;
    } retired[CD_BATCH_RETIRED];
    uint32_t n_retired;

    /* The member list and the ring over it (members.h): swapped by
     * cd_members_apply(), taken by handlers with cd_view_get(). */
    cd_view_t *view; /* under peer_lock */
    struct cd_peer_ch {
        char *addr;
        srpc_channel_t *ch;     /* lazily opened */
    } peer_ch[CD_MAX_CHANNELS]; /* under peer_lock; kept until destroy */
    uint32_t n_peer_ch;
    cd_membership_ops_t mops; /* the membership source's (static: no-ops); under peer_lock */
    struct cd_etcd *etcd;     /* membership on etcd (daemon_etcd.h); NULL: static peers */
    pthread_mutex_t peer_lock;
    struct cd_rb *rb;           /* the rebalancer (rebalance.h) */
    atomic_int draining;        /* a drain was asked for (Drain, or SIGTERM with drain_on_term) */
    uint64_t drain_timeout_req; /* the Drain call's timeout_ms (0: drain_timeout) */

    char *tls_cert_pem; /* the files of cfg.tls_*, NULL when not set; under peer_lock */
    char *tls_key_pem;
    char *tls_ca_pem;
    char *mx_cert_pem; /* the files of metrics_tls_*, and the metrics token */
    char *mx_key_pem;
    char *mx_token;

    struct cd_dataplane *dp; /* NULL: no one-sided transport (dataplane.h) */
    struct cd_tier *tier;    /* NULL: no SSD tier (data_dir empty; tier.h) */

    pthread_t reaper;
    int reaper_running;
    pthread_mutex_t stop_lock;
    pthread_cond_t stop_cond;
    int stopping;

    cd_notify_t notify; /* READY=1, STATUS=, WATCHDOG=1 to $NOTIFY_SOCKET (notify.h) */
} cd_daemon_t;

/*
 * Creates the store and starts serving on cfg->listen. The daemon takes
 * ownership of the strings in cfg. Returns ST_OK, or the status of the part
 * that failed (logged with its reason): ST_ERR_INVALID (config), ST_ERR_IO
 * (address in use), ST_ERR_NOMEM.
 */
st_status_t cd_daemon_start(cd_daemon_t *d, cd_config_t *cfg);

/* Stops serving gracefully (calls in flight finish within grace_ms). */
void cd_daemon_stop(cd_daemon_t *d, int grace_ms);

/* Frees everything. After cd_daemon_stop(). */
void cd_daemon_destroy(cd_daemon_t *d);

/* The bound port. */
int cd_daemon_port(const cd_daemon_t *d);

/* The namespace id that the protocol uses for (tenant, model). */
uint64_t cd_wire_ns_id(const char *tenant, const char *model);

/*
 * Finds or creates the namespace of (tenant, model). The store counts the
 * tenant's namespaces quota (the one place it is enforced): creating one
 * more than it allows is ST_ERR_EXHAUSTED naming the quota and the numbers.
 * Returns ST_OK with *entry_p, or the store's error with a message in err.
 */
st_status_t cd_daemon_ns_open(cd_daemon_t *d, const char *tenant, const char *model,
                              uint32_t block_tokens, cd_ns_entry_t **entry_p, cd_err_t *err);

/*
 * Re-reads the tenants file (SIGHUP) and hands every tenant's quotas to the
 * store; a tenant the reload removed keeps its last quotas but memory,
 * lowered to 1 byte (its namespaces are refused, its DRAM evicted first).
 * Returns as cd_au_reload(), or the store's error; calls in flight are not
 * disturbed.
 */
st_status_t cd_daemon_reload(cd_daemon_t *d);

/*
 * 1 when no tenant's data-plane keys can reach another tenant's bytes: the
 * transport enforces keys (cd_dp_committed_read_only()), or there is no data
 * plane, or the tenants file names at most one tenant. 0 only when
 * allow_shared_dataplane let several tenants share a transport that checks
 * no key (UCX over sm, posix, cma, tcp; docs/security.md).
 */
int cd_daemon_dataplane_isolated(cd_daemon_t *d);

/* 1 when a namespace of tenant may be recovered from the SSD tier (the
 * tenants file, when there is one, still names the tenant). */
int cd_daemon_tenant_known(cd_daemon_t *d, const char *tenant);

/* Opens the SSD tier of cfg.data_dir into d->tier, with the ssd_* settings
 * and the daemon's namespace resolver (daemon_tier.c). As cd_tier_open. */
st_status_t cd_daemon_tier_open(cd_daemon_t *d);

/* Finds a namespace by its wire id; NULL if this daemon does not know it. */
cd_ns_entry_t *cd_daemon_ns_find(cd_daemon_t *d, uint64_t wire_id);

/* The namespace's region epoch (bumps whenever its regions change). */
uint64_t cd_daemon_ns_region_epoch(cd_daemon_t *d, const cd_ns_entry_t *e);

/* Copies the namespace's regions under the lock; returns how many. */
uint32_t cd_daemon_ns_regions(cd_daemon_t *d, const cd_ns_entry_t *e, cd_region_t *out,
                              uint32_t max, uint64_t *epoch_p);

/* Reservation batches (handlers_data.c). */
/* A batch gets a random id (never 0, unique among the live ones) bound to
 * its namespace and to the Hello client id client (0: none). */
st_status_t cd_batch_add(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t *resv,
                         size_t n, uint64_t expires_ms, uint64_t *id_p);
/* Takes batch id of ns_local made by client (a batch of another client, or
 * of a client when client is 0, is not found: it answers as an unknown id). */
cd_batch_t *cd_batch_take(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id);
/* 1 when this daemon handed out reservation id `id` to client in ns_local and
 * it finished or expired lately (the last CD_BATCH_RETIRED batches). */
int cd_batch_issued(cd_daemon_t *d, uint32_t ns_local, uint64_t client, uint64_t id);
void cd_batch_free(cd_batch_t *b);
void cd_batch_expire(cd_daemon_t *d, uint64_t now_ms);

/* The channel to the peer serving gRPC at addr (opened on first use, with the
 * cluster credential), or NULL when it cannot be opened. */
srpc_channel_t *cd_daemon_peer_ch(cd_daemon_t *d, const char *addr);

/*
 * TLS (daemon_tls.c). cd_tls_load() checks the tls_* settings and reads their
 * files (ST_ERR_INVALID, ST_ERR_IO; logged). cd_daemon_reload_tls() reads
 * them again for SIGHUP and hands them to the server and to peer channels
 * opened from then on, and the metrics_tls_* files to the metrics server; on
 * failure the old ones stay (logged). Main thread.
 * cd_tls_peer_config() fills a peer channel's TLS fields, under peer_lock.
 */
st_status_t cd_tls_load(cd_daemon_t *d);
/* Reads metrics_tls_* and metrics_token(_file) and fills sec's TLS, token and CORS fields. */
st_status_t cd_tls_metrics(cd_daemon_t *d, mx_http_opts_t *sec);
st_status_t cd_daemon_reload_tls(cd_daemon_t *d);
void cd_tls_peer_config(const cd_daemon_t *d, srpc_channel_config_t *cc);
void cd_tls_free(cd_daemon_t *d);

/*
 * Between the daemon's files. cd_daemon_secrets() (daemon_config.c) reads
 * the secrets from their files or the environment and refuses an insecure
 * start (ST_ERR_INVALID, logged); *secret_p is the cluster secret to use.
 * cd_region_added()/cd_region_removed() (daemon_ns.c) are the store's
 * region callbacks (ctx: the daemon), run with the namespace lock held.
 */
st_status_t cd_daemon_secrets(cd_daemon_t *d, const char **secret_p);
void cd_region_added(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len);
void cd_region_removed(void *ctx, uint32_t ns_id, uint32_t region, void *base, size_t len);

/* daemon_members.c: closes the peer channels and drops the view (destroy). */
void cd_daemon_peers_free(cd_daemon_t *d);

/*
 * Static mode's member change (SIGHUP): applies the peer list peers (the
 * config file's, re-read) through cd_members_apply() when it differs from
 * the current members. Returns ST_OK (also when unchanged) or as
 * cd_members_parse() / cd_members_apply() (logged; the old ring stays).
 */
st_status_t cd_members_reload_static(cd_daemon_t *d, const char *peers);

/*
 * Drain (docs/daemon.md "Membership changes"). cd_daemon_drain_start() marks
 * the node draining and asks the main thread to drain and stop (SIGTERM to
 * this process); timeout_ms 0 is drain_timeout. Any thread; ST_OK, also when
 * a drain is under way. cd_daemon_drain() (main thread): publishes the
 * draining state (ops.set_state), waits until the source applied the ring
 * without this node at the epoch of that change (or, without one, applies
 * its own ring without this node), waits until the rebalancer handed every
 * durable object over, deregisters (ops.leave). Returns ST_OK, or ST_ERR_TIMEOUT with objects left (logged).
 */
st_status_t cd_daemon_drain_start(cd_daemon_t *d, uint64_t timeout_ms);
st_status_t cd_daemon_drain(cd_daemon_t *d);

/*
 * daemon_tenancy.c. cd_daemon_n_tenants(): tenants of the current table (0
 * without a tenants file). cd_daemon_isolation(): whether n_tenants tenants
 * may share this daemon's data plane (ST_ERR_INVALID, logged, naming the
 * fixes; `what` says what is refused). cd_daemon_reload_check(): that check
 * as the auth module's au_check. cd_daemon_apply_quotas(): every tenant's
 * quotas to the store.
 */
size_t cd_daemon_n_tenants(const cd_daemon_t *d);
st_status_t cd_daemon_isolation(cd_daemon_t *d, size_t n_tenants, const char *what);
st_status_t cd_daemon_reload_check(void *arg, size_t n_tenants);
st_status_t cd_daemon_apply_quotas(cd_daemon_t *d);

/* The method table served by stratad (handlers_*.c). */
extern const srpc_method_def_t cd_method_table[SRPC_CACHE_N_METHODS];
extern const size_t cd_method_table_len;

#endif /* STRATA_CACHED_DAEMON_H */
