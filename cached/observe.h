/*
 * observe.h - stratad's metrics: the families of docs/observability.md §2,
 * their per-namespace children, the per-method latency and error counts
 * (every handler runs through cd_obs_dispatch), gauges and store counters
 * collected at scrape time, and the HTTP server for /metrics, /stats and
 * /dashboard.
 *
 * Thread safety: the counters are atomics; cd_obs_ns_add() runs under the
 * daemon's ns_lock; the collect hook runs on the HTTP thread and reads the
 * store through its thread-safe API.
 */
#ifndef STRATA_CACHED_OBSERVE_H
#define STRATA_CACHED_OBSERVE_H

#include <stdint.h>

#include "st_metrics.h"
#include "st_metrics_http.h"

struct cd_daemon;
struct cd_ns_entry;

/* The counters of one namespace that the handlers bump. */
typedef struct cd_ns_metrics {
    st_counter_t *lookups, *lookups_hit, *lookup_tokens, *matched_tokens, *resumable_tokens;
    st_counter_t *stored_bytes[5], *stored_objects[5]; /* by cd_kind_t, transport inline */
    st_counter_t *served_bytes[5], *served_objects[5];
    /* Collected from the store at scrape time. */
    st_gauge_t *dram_used, *dram_objects, *leases_active;
    st_counter_t *evictions, *evicted_bytes, *leases_granted, *leases_expired;
    uint64_t last_evictions, last_evicted_bytes, last_granted, last_expired;
    /* Collected from the SSD tier (when there is one): by kind kv, idx, kda. */
    st_counter_t *spills[3], *promotions[3];
    uint64_t last_spills[3], last_promotions[3];
} cd_ns_metrics_t;

typedef struct cd_obs cd_obs_t;

/* Creates the registry and its families. Returns ST_OK or ST_ERR_NOMEM. */
st_status_t cd_obs_create(struct cd_daemon *d, cd_obs_t **obs_p);

/*
 * Starts the HTTP server on listen ("host:port"); *port_p gets the port. sec
 * (may be NULL) gives the server's TLS certificate and key, bearer token and
 * CORS origins (the other fields of sec are ignored).
 */
st_status_t cd_obs_serve(cd_obs_t *obs, const char *listen, const char *node, const char *peers,
                         const st_metrics_http_opts_t *sec, int *port_p);

/* Replaces the HTTPS server's certificate and key (st_metrics_http_reload_tls). */
st_status_t cd_obs_reload_tls(cd_obs_t *obs, const char *cert_pem, const char *key_pem);

/* Stops the HTTP server and frees everything. NULL is a no-op. */
void cd_obs_destroy(cd_obs_t *obs);

/* Creates the children of a new namespace named name ("tenant/model"). */
st_status_t cd_obs_ns_add(cd_obs_t *obs, const char *name, cd_ns_metrics_t **mx_p);

/* Records one answered call of method index m (srpc_cache_method_id_t). */
void cd_obs_call(cd_obs_t *obs, int m, uint64_t ns, st_status_t status);

#endif /* STRATA_CACHED_OBSERVE_H */
