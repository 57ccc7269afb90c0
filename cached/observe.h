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

#include "metrics.h"
#include "metrics_http.h"
#include "srpc.h"

struct cd_daemon;
struct cd_ns_entry;

/* The outcomes of an object asked for by key (strata_object_gets_total):
 * found in DRAM, found after a promotion from the SSD tier, missed. */
typedef enum cd_obs_get_outcome {
    CD_OBS_GET_DRAM = 0,
    CD_OBS_GET_SSD = 1,
    CD_OBS_GET_MISS = 2,
    CD_OBS_GET_OUTCOMES = 3
} cd_obs_get_outcome_t;

/* The kinds a Lookup is counted under (strata_lookup_blocks_total): "kv", or
 * "vis" for a Lookup whose kinds_mask asks for VIS objects only. */
#define CD_OBS_LOOKUP_KV    0
#define CD_OBS_LOOKUP_VIS   1
#define CD_OBS_LOOKUP_KINDS 2

/* The counters of one namespace that the handlers bump. */
typedef struct cd_ns_metrics {
    mx_counter_t *lookups, *lookups_hit, *lookup_tokens, *matched_tokens, *resumable_tokens;
    mx_counter_t *stored_bytes[5], *stored_objects[5]; /* by cd_kind_t, transport inline */
    mx_counter_t *served_bytes[5], *served_objects[5];
    /* Per kind and outcome: objects asked for by Get, Locate and GetSession
     * (by cd_kind_t, SESSION included), blocks asked about by Lookup. */
    mx_counter_t *gets[5][CD_OBS_GET_OUTCOMES];
    mx_counter_t *lookup_blocks[CD_OBS_LOOKUP_KINDS][2]; /* [kind][0 hit, 1 miss] */
    /* Collected from the store at scrape time. */
    mx_gauge_t *dram_used, *dram_objects, *leases_active;
    mx_gauge_t *reservations_active, *pins_active, *sessions_active;
    mx_counter_t *evictions, *evicted_bytes, *leases_granted, *leases_expired;
    uint64_t last_evictions, last_evicted_bytes, last_granted, last_expired;
    /* Collected from the SSD tier (when there is one): by kind kv, idx, kda. */
    mx_counter_t *spills[3], *promotions[3];
    uint64_t last_spills[3], last_promotions[3];
    /* Score calls (handlers_score.c): calls answered, blocks asked, blocks and rows scored. */
    mx_counter_t *score_calls, *score_blocks, *score_blocks_scored, *score_rows;
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
                         const mx_http_opts_t *sec, int *port_p);

/* Replaces the HTTPS server's certificate and key (mx_http_reload_tls). */
st_status_t cd_obs_reload_tls(cd_obs_t *obs, const char *cert_pem, const char *key_pem);

/* The registry, for a module that adds its own families (daemon_etcd.c). */
mx_metrics_t *cd_obs_registry(cd_obs_t *obs);

/* Stops the HTTP server and frees everything. NULL is a no-op. */
void cd_obs_destroy(cd_obs_t *obs);

/* Creates the children of a new namespace named name ("tenant/model"). */
st_status_t cd_obs_ns_add(cd_obs_t *obs, const char *name, cd_ns_metrics_t **mx_p);

/* Counts one object of kind (cd_kind_t) asked for by key, with its outcome. */
static inline void cd_obs_get(cd_ns_metrics_t *mx, uint32_t kind, cd_obs_get_outcome_t outcome)
{
    if (mx != NULL && kind < 5 && (unsigned)outcome < CD_OBS_GET_OUTCOMES) {
        mx_counter_inc(mx->gets[kind][outcome]);
    }
}

/* The per-kind totals of one namespace or of all (cd_obs_kind_totals). */
typedef struct cd_obs_kinds {
    uint64_t gets[5][CD_OBS_GET_OUTCOMES];
    uint64_t lookup_blocks[CD_OBS_LOOKUP_KINDS][2];
} cd_obs_kinds_t;

/* The names of the kinds, by cd_kind_t ("kv", "idx", "kda", "session", "vis"),
 * and of the lookup kinds by CD_OBS_LOOKUP_* ("kv", "vis"). */
extern const char *const cd_obs_kind_names[5];
extern const char *const cd_obs_lookup_kind_names[CD_OBS_LOOKUP_KINDS];

/*
 * Sums the per-kind counters of the namespace of local id local (or of every
 * namespace when all is set) into *out. Takes the daemon's ns_lock.
 */
void cd_obs_kind_totals(struct cd_daemon *d, int all, uint32_t local, cd_obs_kinds_t *out);

/* Records one answered call of method index m (srpc_cache_method_id_t). */
void cd_obs_call(cd_obs_t *obs, int m, uint64_t ns, st_status_t status);

/* observe_admission.c: fair queueing and admission control's metrics. */
typedef struct cd_obs_adm cd_obs_adm_t;
st_status_t cd_obs_adm_create(mx_metrics_t *reg, cd_obs_adm_t **adm_p);
/* Records one served call's time in the queue. Thread-safe (atomics). */
void cd_obs_adm_wait(cd_obs_adm_t *adm, uint64_t wait_ns);
/* Scrape time: the server's scheduler and refusal counters. */
void cd_obs_adm_collect(cd_obs_adm_t *adm, const srpc_server_t *srv);
void cd_obs_adm_destroy(cd_obs_adm_t *adm);
/* The daemon's admission metrics (NULL: none). */
cd_obs_adm_t *cd_obs_admission(cd_obs_t *obs);

#endif /* STRATA_CACHED_OBSERVE_H */
