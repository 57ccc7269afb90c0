/*
 * daemon_config.c - stratad's config table (the file, the flags, --help and
 * docs/configuration.md come from it) and the secrets a start reads and
 * checks.
 */
#include "daemon.h"

#include <string.h>

#include "log.h"

/* ------------------------------------------------------------ config -- */

static const char *const cd_ssd_syncs[] = {"durable", "none", NULL};
static const char *const cd_tls_client_auths[] = {"none", "request", "require", NULL};
static const char *const cd_huge_modes[] = {"off", "thp", "hugetlb", NULL}; /* cd_huge_mode_t */

#define CD_OFF(m) offsetof(cd_config_t, m)
static const cfg_option_t cd_options[] = {
    {"listen", CFG_STRING, CD_OFF(listen), "127.0.0.1:7700", 0, 0, 0, NULL, 'l',
     "gRPC address to listen on (host:port; port 0 picks a free one)"},
    {"node_id", CFG_STRING, CD_OFF(node_id), "", 0, 0, 0, NULL, 0,
     "name of this node in the cluster (default: the listen address)"},
    {"peers", CFG_STRING, CD_OFF(peers), "", 0, 0, 0, NULL, 0,
     "every node of the cluster, this one included, as host:port,host:port; re-read from the "
     "config file on SIGHUP: a member change (docs/daemon.md, Membership changes)"},
    {"etcd", CFG_STRING, CD_OFF(etcd), "", 0, 0, 0, NULL, 0,
     "etcd endpoints (http://host:port,...): membership on etcd in place of peers; "
     "empty: the static peers list"},
    {"etcd_prefix", CFG_STRING, CD_OFF(etcd_prefix), "/strata/", 0, 0, 0, NULL, 0,
     "key prefix of this cluster in etcd (members under <prefix>members/)"},
    {"etcd_ttl", CFG_INT, CD_OFF(etcd_ttl), "10", 2, 3600, 0, NULL, 0,
     "seconds of this node's etcd lease: a node that stops renewing it leaves the ring "
     "this long after"},
    {"advertise", CFG_STRING, CD_OFF(advertise), "", 0, 0, 0, NULL, 0,
     "host the other nodes and clients reach this node at (default: the listen host; "
     "required with etcd when listening on 0.0.0.0)"},
    {"cluster_secret", CFG_STRING, CD_OFF(cluster_secret), "", 0, 0, CFG_SENSITIVE, NULL, 0,
     "secret shared by the cluster's nodes, from which namespace seeds and the daemons' peer "
     "credential derive (16+ bytes; else cluster_secret_file, else $STRATA_CLUSTER_SECRET)"},
    {"cluster_secret_file", CFG_STRING, CD_OFF(cluster_secret_file), "", 0, 0, 0, NULL, 0,
     "file whose first line is the cluster_secret (kept out of argv)"},
    {"auth_token", CFG_STRING, CD_OFF(auth_token), "", 0, 0, CFG_SENSITIVE, NULL, 0,
     "the one token clients must present (authorization: Bearer), allowed every tenant; else "
     "auth_token_file, else $STRATA_AUTH_TOKEN; empty: no authentication"},
    {"auth_token_file", CFG_STRING, CD_OFF(auth_token_file), "", 0, 0, 0, NULL, 0,
     "file whose first line is the auth_token (kept out of argv)"},
    {"tenants_file", CFG_STRING, CD_OFF(tenants_file), "", 0, 0, 0, NULL, 0,
     "tenants, their token hashes, client certificate CNs (cert=), models and quotas, one per "
     "line (docs/security.md); re-read on SIGHUP"},
    {"protected_mode", CFG_BOOL, CD_OFF(protected_mode), "true", 0, 0, 0, NULL, 0,
     "without an auth_token or tenants_file, refuse clients that are not on loopback "
     "unless they present a verified client certificate (tls_client_auth)"},
    {"data_dir", CFG_STRING, CD_OFF(data_dir), "", 0, 0, 0, NULL, 'd',
     "directory of the SSD tier, an LMDB environment (empty: DRAM only)"},
    {"ssd_map_size", CFG_SIZE, CD_OFF(ssd_map_size), "64G", 1ll << 20, 1ll << 46, 0, NULL, 0,
     "LMDB map size of the SSD tier: bounds its data file"},
    {"ssd_spill", CFG_BOOL, CD_OFF(ssd_spill), "true", 0, 0, 0, NULL, 0,
     "spill KV and IDX objects evicted from DRAM to the SSD tier"},
    {"ssd_spill_budget", CFG_SIZE, CD_OFF(ssd_spill_budget), "0", 0, 1ll << 46, 0, NULL, 0,
     "bytes of spilled KV and IDX objects the SSD tier keeps (0: half the map)"},
    {"ssd_writeback", CFG_SIZE, CD_OFF(ssd_writeback), "256M", 0, 1ll << 46, 0, NULL, 0,
     "bytes of each namespace's coldest KV and IDX objects the SSD tier writes out ahead of "
     "eviction, so that evicting them writes nothing (0: off; needs ssd_spill)"},
    {"ssd_sync", CFG_ENUM, CD_OFF(ssd_sync), "durable", 0, 0, 0, cd_ssd_syncs, 0,
     "how SSD commits reach the disk: durable (fdatasync per commit) or none (tests only)"},
    {"pid_file", CFG_STRING, CD_OFF(pid_file), "", 0, 0, 0, NULL, 0,
     "write the process id here once serving"},
    {"metrics_listen", CFG_STRING, CD_OFF(metrics_listen), "", 0, 0, 0, NULL, 0,
     "HTTP address of /metrics, /stats and /dashboard, host:port (empty: off)"},
    {"metrics_peers", CFG_STRING, CD_OFF(metrics_peers), "", 0, 0, 0, NULL, 0,
     "the other nodes' metrics host:port, for the dashboard's cluster view"},
    {"metrics_tls_cert", CFG_STRING, CD_OFF(metrics_tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate chain of the metrics server: HTTPS only (empty: HTTP)"},
    {"metrics_tls_key", CFG_STRING, CD_OFF(metrics_tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of metrics_tls_cert (unencrypted)"},
    {"metrics_token", CFG_STRING, CD_OFF(metrics_token), "", 0, 0, CFG_SENSITIVE, NULL, 0,
     "bearer token that /metrics and /stats require (Authorization: Bearer); empty: none"},
    {"metrics_token_file", CFG_STRING, CD_OFF(metrics_token_file), "", 0, 0, 0, NULL, 0,
     "file holding metrics_token (kept out of argv and the config file)"},
    {"metrics_cors_origin", CFG_STRING, CD_OFF(metrics_cors_origin), "", 0, 0, 0, NULL, 0,
     "origins whose pages may read /stats (scheme://host:port, comma separated; empty: same "
     "origin only; * is refused)"},
    {"memory_limit", CFG_SIZE, CD_OFF(memory_limit), "1G", 64ll << 20, 1ll << 42, 0, NULL, 'm',
     "memory the arenas and the index may use, in all"},
    {"chunk_bytes", CFG_SIZE, CD_OFF(chunk_bytes), "64M", 2ll << 20, 1ll << 32, 0, NULL, 0,
     "arena growth unit (one transport region each)"},
    {"threads", CFG_INT, CD_OFF(threads), "4", 1, 256, 0, NULL, 't', "gRPC worker threads"},
    {"max_serving_calls", CFG_INT, CD_OFF(max_serving_calls), "0", 0, 255, 0, NULL, 0,
     "fair queueing: gRPC handlers that run at once, the rest queued per tenant and served "
     "round robin (at most threads - 1; 0: off, no queue and no admission control)"},
    {"slice_bytes", CFG_SIZE, CD_OFF(slice_bytes), "1M", 0, 1ll << 30, 0, NULL, 0,
     "fair queueing: a Get or Put lets one waiting call of another tenant (or connection) "
     "run after every slice_bytes of objects it served or stored (0: a call runs whole)"},
    {"max_queued_calls", CFG_INT, CD_OFF(max_queued_calls), "0", 0, 1ll << 30, 0, NULL, 0,
     "admission control: calls queued on the node beyond which new ones are refused "
     "(RESOURCE_EXHAUSTED + strata-retry-after-ms; 0: no limit; needs max_serving_calls)"},
    {"max_queued_bytes", CFG_SIZE, CD_OFF(max_queued_bytes), "0", 0, 1ll << 40, 0, NULL, 0,
     "admission control: request bytes queued on the node (0: no limit)"},
    {"tenant_max_queued_calls", CFG_INT, CD_OFF(tenant_max_queued_calls), "0", 0, 1ll << 30, 0,
     NULL, 0, "admission control: calls queued for one tenant (or connection) (0: no limit)"},
    {"tenant_max_queued_bytes", CFG_SIZE, CD_OFF(tenant_max_queued_bytes), "0", 0, 1ll << 40, 0,
     NULL, 0, "admission control: request bytes queued for one tenant (0: no limit)"},
    {"block_tokens", CFG_INT, CD_OFF(block_tokens), "64", 16, 4096, 0, NULL, 0,
     "tokens per block of new namespaces (a multiple of 16)"},
    {"segment_blocks", CFG_INT, CD_OFF(segment_blocks), "16", 1, 65536, 0, NULL, 0,
     "blocks per segment, the unit of placement"},
    {"kda_interval", CFG_INT, CD_OFF(kda_interval), "16", 1, 65536, 0, NULL, 0,
     "blocks between KDA checkpoints"},
    {"replicas", CFG_INT, CD_OFF(replicas), "2", 1, 16, 0, NULL, 0,
     "copies of KDA and SESSION objects"},
    {"vnodes", CFG_INT, CD_OFF(vnodes), "128", 1, 4096, 0, NULL, 0,
     "virtual nodes per daemon on the ring"},
    {"lease", CFG_DURATION, CD_OFF(lease_ms), "5s", 10, 600000, 0, NULL, 0, "default read lease"},
    {"max_lease", CFG_DURATION, CD_OFF(max_lease_ms), "60s", 10, 3600000, 0, NULL, 0,
     "longest lease a client may ask for"},
    {"max_pin", CFG_DURATION, CD_OFF(max_pin_ms), "1h", 1000, 2592000000ll, 0, NULL, 0,
     "longest pin, and the time a pin with ttl_ms 0 lasts"},
    {"reservation_ttl", CFG_DURATION, CD_OFF(reservation_ms), "30s", 10, 3600000, 0, NULL, 0,
     "time a writer has between Reserve and Commit"},
    {"session_ttl", CFG_DURATION, CD_OFF(session_ttl_ms), "1d", 1000, 2592000000ll, 0, NULL, 0,
     "default time to live of a session"},
    {"max_message", CFG_SIZE, CD_OFF(max_message_bytes), "64M", 1ll << 20, 1ll << 30, 0, NULL, 0,
     "largest request message accepted"},
    {"max_object", CFG_SIZE, CD_OFF(max_object_bytes), "32M", 1024, 1ll << 30, 0, NULL, 0,
     "largest object accepted"},
    {"max_hashes", CFG_INT, CD_OFF(max_hashes), "65536", 1, 1 << 24, 0, NULL, 0,
     "block hashes per lookup"},
    {"max_batch", CFG_INT, CD_OFF(max_batch), "4096", 1, 1 << 20, 0, NULL, 0,
     "keys per batch call, segments per lookup"},
    {"max_sessions", CFG_INT, CD_OFF(max_sessions), "1000000", 1, 1ll << 32, 0, NULL, 0,
     "open sessions per namespace"},
    {"transport", CFG_STRING, CD_OFF(transport), "ucx", 0, 0, 0, NULL, 0,
     "one-sided data plane: ucx, libfabric or none (falls back to none, with a warning, "
     "when it cannot start)"},
    {"fabric_provider", CFG_STRING, CD_OFF(fabric_provider), "", 0, 0, 0, NULL, 0,
     "libfabric provider of the data plane (tcp;ofi_rxm, shm, verbs;ofi_rxm; empty: the first "
     "with RMA)"},
    {"transport_calls", CFG_BOOL, CD_OFF(transport_calls), "true", 0, 0, 0, NULL, 0,
     "also serve Locate, Release, Lookup and Score over the data plane's transport (ucx), "
     "without gRPC's round trip"},
    {"allow_shared_dataplane", CFG_BOOL, CD_OFF(shared_dataplane), "false", 0, 0, 0, NULL, 0,
     "start with several tenants over a data plane that checks no remote key (ucx over sm, "
     "posix, cma, tcp): any client can then read every tenant's memory "
     "(docs/security.md); without it such a start or reload is refused"},
    {"log_level", CFG_ENUM, CD_OFF(log_level), "info", 0, 0, 0, lg_level_names, 0,
     "lowest level logged"},
    {"tls_cert", CFG_STRING, CD_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate chain of the gRPC server: serve TLS only (empty: plaintext); re-read on "
     "SIGHUP"},
    {"tls_key", CFG_STRING, CD_OFF(tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of tls_cert (unencrypted; keep it mode 0600); re-read on SIGHUP"},
    {"tls_ca", CFG_STRING, CD_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
     "PEM CA bundle that client certificates and peer daemons' certificates must chain to; "
     "re-read on SIGHUP"},
    {"rebalance_rate", CFG_SIZE, CD_OFF(rebalance_rate), "256M", 0, 1ll << 40, 0, NULL, 0,
     "bytes per second the rebalancer pushes durable objects at when members change (0: "
     "unbounded)"},
    {"drain_on_term", CFG_BOOL, CD_OFF(drain_on_term), "false", 0, 0, 0, NULL, 0,
     "on SIGTERM, hand this node's durable objects to the ring without it before stopping "
     "(as `strata drain` does); without it SIGTERM just stops (static mode: with etcd "
     "membership SIGTERM always drains)"},
    {"drain_timeout", CFG_DURATION, CD_OFF(drain_timeout_ms), "10m", 1000, 86400000ll, 0, NULL, 0,
     "how long a drain waits for its durable objects to be handed over before it stops "
     "anyway (exit status 1)"},
    {"tls_client_auth", CFG_ENUM, CD_OFF(tls_client_auth), "none", 0, 0, 0, cd_tls_client_auths, 0,
     "client certificates (mutual TLS): none, request (verified when sent) or require; a "
     "verified certificate authenticates the tenant whose cert= (tenants_file) is its CN"},
    {"huge_pages", CFG_ENUM, CD_OFF(huge_pages), "thp", 0, 0, 0, cd_huge_modes, 0,
     "pages of the arenas: off, thp (transparent huge pages, madvise) or hugetlb (the first "
     "namespace reserves memory_limit of 2 MiB pages up front: vm.nr_hugepages, a pod's "
     "hugepages-2Mi; too few pages, or a later namespace, falls back to thp with a warning)"},
};

const cfg_table_t cd_config_table = {
    "stratad", "strata cache daemon: stores KV blocks, KDA states and sessions for a cluster", NULL,
    cd_options, sizeof(cd_options) / sizeof(cd_options[0])};

/* A development secret, used (with a warning) when none is configured, so a
 * local cluster started without one still agrees on namespace seeds. */
static const char cd_dev_secret[] = "strata-development-secret-not-for-production";
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
st_status_t cd_daemon_secrets(cd_daemon_t *d, const char **secret_p)
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
        lg_error("listen=%s is not a loopback address and no cluster_secret is set "
                 "(cluster_secret_file or STRATA_CLUSTER_SECRET): refusing to start with the "
                 "public development secret",
                 d->cfg.listen);
        return ST_ERR_INVALID;
    }
    if (!loopback && d->cfg.auth_token[0] == '\0' && d->cfg.tenants_file[0] == '\0' &&
        d->cfg.tls_client_auth != SRPC_TLS_CLIENT_AUTH_REQUIRE) {
        /* tls_client_auth=require authenticates every client by its certificate. */
        lg_error("listen=%s is not a loopback address and neither tenants_file nor auth_token "
                 "is set (nor tls_client_auth=require): refusing to serve without "
                 "authentication",
                 d->cfg.listen);
        return ST_ERR_INVALID;
    }
    if (d->cfg.cluster_secret[0] == '\0' &&
        (d->cfg.auth_token[0] != '\0' || d->cfg.tenants_file[0] != '\0')) {
        /* With the public development secret anyone could compute the seeds and the
         * peer credential (a Lookup on any namespace): authentication would be moot. */
        lg_error("auth_token or tenants_file is set but no cluster_secret (cluster_secret_file "
                 "or STRATA_CLUSTER_SECRET): the namespace seeds and the peer credential must "
                 "not derive from the public development secret");
        return ST_ERR_INVALID;
    }
    *secret_p = d->cfg.cluster_secret;
    if ((*secret_p)[0] == '\0') {
        lg_warn("cluster_secret is not set: namespace seeds are predictable (loopback only); "
                "set it in production");
        *secret_p = cd_dev_secret;
    } else if (strlen(*secret_p) < 16) {
        lg_error("cluster_secret is too short (%zu bytes, need at least 16)", strlen(*secret_p));
        return ST_ERR_INVALID;
    }
    return ST_OK;
}
