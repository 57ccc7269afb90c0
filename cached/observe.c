/*
 * observe.c - stratad's metrics; see observe.h and docs/observability.md.
 */
#include "observe.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dataplane.h"
#include "log.h"
#include "procstat.h"
#include "rebalance.h"
#include "tier.h"

#define CD_OBS_METHODS SRPC_CACHE_N_METHODS
#define CD_OBS_RB_N    6
#define CD_OBS_PROC_N  3

struct cd_obs {
    cd_daemon_t *d;
    mx_metrics_t *reg;
    mx_http_t *http;
    mx_metric_family_t *f_lookups, *f_lookups_hit, *f_lookup_tokens, *f_matched, *f_resumable;
    mx_metric_family_t *f_stored_bytes, *f_stored_objects, *f_served_bytes, *f_served_objects;
    mx_metric_family_t *f_evictions, *f_evicted_bytes, *f_tier_used, *f_tier_limit;
    mx_metric_family_t *f_object_gets, *f_lookup_blocks; /* per kind and outcome */
    mx_metric_family_t *f_tier_objects, *f_leases_active, *f_leases_granted, *f_leases_expired;
    mx_metric_family_t *f_duration, *f_errors, *f_spills, *f_promotions;
    mx_metric_family_t *f_tenant_quota, *f_tenant_used, *f_dp_isolated;
    mx_metric_family_t *f_reservations_active, *f_pins_active, *f_sessions_active;
    mx_metric_family_t *f_score_calls, *f_score_blocks, *f_score_scored, *f_score_rows;
    mx_gauge_t *dp_isolated; /* strata_dataplane_isolated, no labels */
    mx_histogram_t *duration[CD_OBS_METHODS];
    mx_gauge_t *dram_limit; /* process-wide: one series, tier="dram" */
    /* The SSD tier (daemon-wide: namespace label "*"), created at the first scrape. */
    mx_gauge_t *ssd_used, *ssd_limit, *ssd_objects;
    mx_counter_t *ssd_evictions, *ssd_evicted_bytes;
    uint64_t last_ssd_evictions, last_ssd_evicted_bytes;
    /* The rebalancer (rebalance.h): no labels. */
    mx_metric_family_t *f_rb[CD_OBS_RB_N];
    mx_gauge_t *rb_pending, *rb_catalog;
    mx_counter_t *rb_objects, *rb_bytes, *rb_failed, *rb_dropped;
    uint64_t last_rb[4];
    cd_obs_adm_t *adm; /* observe_admission.c */
    /* The process (procstat.h): resident bytes, open descriptors, threads. */
    mx_metric_family_t *f_proc[CD_OBS_PROC_N];
    mx_gauge_t *proc[CD_OBS_PROC_N];
};

const char *const cd_obs_kind_names[5] = {"kv", "idx", "kda", "session", "vis"};
const char *const cd_obs_lookup_kind_names[CD_OBS_LOOKUP_KINDS] = {"kv", "vis"};

/* The outcome and tier labels of strata_object_gets_total, by cd_obs_get_outcome_t. */
static const char *const cd_obs_get_outcome[CD_OBS_GET_OUTCOMES] = {"hit", "hit", "miss"};
static const char *const cd_obs_get_tier[CD_OBS_GET_OUTCOMES] = {"dram", "ssd", "none"};

/* The RPC names, as the method label carries them. */
static const char *cd_obs_method_name(int m)
{
    const char *path = srpc_cache_methods[m].path;
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

static st_status_t cd_obs_family(cd_obs_t *o, const char *name, const char *help,
                                 mx_metric_type_t type, const char *const *labels, size_t n_labels,
                                 mx_metric_family_t **fam_p)
{
    mx_metric_desc_t desc = {0};

    desc.name = name;
    desc.help = help;
    desc.type = type;
    desc.label_names = labels;
    desc.n_labels = n_labels;
    if (type == MX_METRIC_HISTOGRAM) {
        desc.buckets = mx_latency_buckets;
        desc.n_buckets = mx_latency_buckets_n;
        desc.scale = 1e-9;
    }
    return mx_register(o->reg, &desc, fam_p);
}

cd_obs_adm_t *cd_obs_admission(cd_obs_t *obs)
{
    return obs != NULL ? obs->adm : NULL;
}

mx_metrics_t *cd_obs_registry(cd_obs_t *obs)
{
    return obs->reg;
}

/* The rebalancer's families (docs/observability.md), one series each. */
static st_status_t cd_obs_rebalance_create(cd_obs_t *o)
{
    static const struct {
        const char *name, *help;
        mx_metric_type_t type;
    } f[CD_OBS_RB_N] = {
        {"strata_rebalance_pending",
         "Durable objects still to be copied to, or acknowledged by, their new replicas",
         MX_METRIC_GAUGE},
        {"strata_rebalance_catalog", "Durable objects this node holds and moves on member changes",
         MX_METRIC_GAUGE},
        {"strata_rebalance_objects_total",
         "Durable object copies pushed to a new replica and acknowledged", MX_METRIC_COUNTER},
        {"strata_rebalance_bytes_total", "Payload bytes of those copies", MX_METRIC_COUNTER},
        {"strata_rebalance_failures_total", "Copies or checks that failed (and were retried)",
         MX_METRIC_COUNTER},
        {"strata_rebalance_dropped_total",
         "Local copies dropped after every new replica acknowledged them", MX_METRIC_COUNTER},
    };
    st_status_t st = ST_OK;

    for (int i = 0; st == ST_OK && i < CD_OBS_RB_N; i++) {
        mx_metric_desc_t desc = {0};

        desc.name = f[i].name;
        desc.help = f[i].help;
        desc.type = f[i].type;
        st = mx_register(o->reg, &desc, &o->f_rb[i]);
    }
    if (st == ST_OK && (st = mx_gauge(o->f_rb[0], NULL, &o->rb_pending)) == ST_OK &&
        (st = mx_gauge(o->f_rb[1], NULL, &o->rb_catalog)) == ST_OK &&
        (st = mx_counter(o->f_rb[2], NULL, &o->rb_objects)) == ST_OK &&
        (st = mx_counter(o->f_rb[3], NULL, &o->rb_bytes)) == ST_OK &&
        (st = mx_counter(o->f_rb[4], NULL, &o->rb_failed)) == ST_OK) {
        st = mx_counter(o->f_rb[5], NULL, &o->rb_dropped);
    }
    return st;
}

/* The process's families (docs/observability.md), one series each. */
static st_status_t cd_obs_process_create(cd_obs_t *o)
{
    static const char *const f[CD_OBS_PROC_N][2] = {
        {"strata_process_resident_bytes", "Resident memory of the daemon process (RSS)"},
        {"strata_process_open_fds", "Open file descriptors of the daemon process"},
        {"strata_process_threads", "Threads of the daemon process"},
    };
    st_status_t st = ST_OK;

    for (int i = 0; st == ST_OK && i < CD_OBS_PROC_N; i++) {
        mx_metric_desc_t desc = {0};

        desc.name = f[i][0];
        desc.help = f[i][1];
        desc.type = MX_METRIC_GAUGE;
        st = mx_register(o->reg, &desc, &o->f_proc[i]);
        if (st == ST_OK) {
            st = mx_gauge(o->f_proc[i], NULL, &o->proc[i]);
        }
    }
    return st;
}

/* The process at scrape time (a value that could not be read shows 0). */
static void cd_obs_collect_process(cd_obs_t *o)
{
    cm_proc_t ps;

    (void)cm_proc_sample(&ps);
    mx_gauge_set(o->proc[0], (double)ps.ps_rss_bytes);
    mx_gauge_set(o->proc[1], (double)ps.ps_open_fds);
    mx_gauge_set(o->proc[2], (double)ps.ps_threads);
}

/* The rebalancer's counters at scrape time. */
static void cd_obs_collect_rebalance(cd_obs_t *o)
{
    cd_rb_stats_t s;
    uint64_t now[4];
    mx_counter_t *c[4] = {o->rb_objects, o->rb_bytes, o->rb_failed, o->rb_dropped};

    cd_rb_stats(o->d->rb, &s);
    now[0] = s.objects, now[1] = s.bytes, now[2] = s.failed, now[3] = s.dropped;
    mx_gauge_set(o->rb_pending, (double)s.pending);
    mx_gauge_set(o->rb_catalog, (double)s.catalog);
    for (int i = 0; i < 4; i++) {
        if (now[i] > o->last_rb[i]) {
            mx_counter_add(c[i], now[i] - o->last_rb[i]);
            o->last_rb[i] = now[i];
        }
    }
}

st_status_t cd_obs_create(cd_daemon_t *d, cd_obs_t **obs_p)
{
    cd_obs_t *o = calloc(1, sizeof(*o));
    st_status_t st;

    if (o == NULL) {
        return ST_ERR_NOMEM;
    }
    o->d = d;
    st = mx_create(&o->reg);
#define CD_FAM(field, name, help, type, ...)                                                \
    if (st == ST_OK) {                                                                      \
        static const char *const l_[] = {__VA_ARGS__};                                      \
        st = cd_obs_family(o, name, help, type, l_, sizeof(l_) / sizeof(l_[0]), &o->field); \
    }
    CD_FAM(f_lookups, "strata_lookups_total", "Lookup calls answered", MX_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_lookups_hit, "strata_lookups_with_hit_total",
           "Lookup calls with a matched prefix of at least one block", MX_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_lookup_tokens, "strata_lookup_tokens_total", "Looked-up tokens", MX_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_matched, "strata_lookup_matched_tokens_total", "Matched tokens (per owned segment)",
           MX_METRIC_COUNTER, "namespace", "kind")
    CD_FAM(f_resumable, "strata_lookup_resumable_tokens_total",
           "Resumable tokens (per owned segment, up to its last KDA checkpoint)", MX_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_stored_bytes, "strata_stored_bytes_total", "Bytes of committed writes",
           MX_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_stored_objects, "strata_stored_objects_total", "Objects committed", MX_METRIC_COUNTER,
           "namespace", "kind", "transport")
    CD_FAM(f_served_bytes, "strata_served_bytes_total", "Bytes handed out for reading",
           MX_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_served_objects, "strata_served_objects_total", "Objects handed out for reading",
           MX_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_evictions, "strata_evictions_total", "Objects evicted from a tier", MX_METRIC_COUNTER,
           "namespace", "kind", "tier")
    CD_FAM(f_evicted_bytes, "strata_evicted_bytes_total", "Bytes evicted from a tier",
           MX_METRIC_COUNTER, "namespace", "tier")
    CD_FAM(f_tier_used, "strata_tier_used_bytes", "Bytes held in the tier now", MX_METRIC_GAUGE,
           "namespace", "tier")
    CD_FAM(f_tier_limit, "strata_tier_limit_bytes", "The tier's byte limit (process-wide)",
           MX_METRIC_GAUGE, "tier")
    CD_FAM(f_tier_objects, "strata_tier_objects", "Objects held in the tier now", MX_METRIC_GAUGE,
           "namespace", "tier")
    CD_FAM(f_spills, "strata_spills_total",
           "Objects written from DRAM to SSD (evicted, or ahead of eviction)", MX_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_promotions, "strata_promotions_total",
           "Objects read back from SSD into DRAM on a miss", MX_METRIC_COUNTER, "namespace", "kind")
    CD_FAM(f_leases_active, "strata_leases_active", "Read leases held now", MX_METRIC_GAUGE,
           "namespace")
    CD_FAM(f_reservations_active, "strata_reservations_active",
           "Reservations (Reserve not yet committed or aborted) held now", MX_METRIC_GAUGE,
           "namespace")
    CD_FAM(f_pins_active, "strata_pins_active", "Pins in force now", MX_METRIC_GAUGE, "namespace")
    CD_FAM(f_sessions_active, "strata_sessions_active", "Sessions open now", MX_METRIC_GAUGE,
           "namespace")
    CD_FAM(f_leases_granted, "strata_leases_granted_total", "Read leases granted",
           MX_METRIC_COUNTER, "namespace")
    CD_FAM(f_leases_expired, "strata_leases_expired_total", "Leases that ran out before release",
           MX_METRIC_COUNTER, "namespace")
    CD_FAM(f_duration, "strata_request_duration_seconds",
           "Time from taking a request to having its answer", MX_METRIC_HISTOGRAM, "method")
    CD_FAM(f_errors, "strata_errors_total", "Requests answered with an error", MX_METRIC_COUNTER,
           "method", "code")
    CD_FAM(f_object_gets, "strata_object_gets_total",
           "Objects asked for by key (Get, Locate, GetSession), by outcome and the tier that "
           "served a hit",
           MX_METRIC_COUNTER, "namespace", "kind", "outcome", "tier")
    CD_FAM(f_lookup_blocks, "strata_lookup_blocks_total",
           "Blocks asked about by Lookup calls: in the matched prefix (hit) or not (miss)",
           MX_METRIC_COUNTER, "namespace", "kind", "outcome")
    CD_FAM(f_tenant_quota, "strata_tenant_quota",
           "A tenant's quota of a resource (0: no limit; bytes for memory_bytes and ssd_bytes)",
           MX_METRIC_GAUGE, "tenant", "resource")
    CD_FAM(f_tenant_used, "strata_tenant_used", "What a tenant uses of a resource now",
           MX_METRIC_GAUGE, "tenant", "resource")
    CD_FAM(f_score_calls, "strata_score_calls_total", "Score calls answered", MX_METRIC_COUNTER,
           "namespace")
    CD_FAM(f_score_blocks, "strata_score_blocks_total", "Blocks asked about by Score calls",
           MX_METRIC_COUNTER, "namespace")
    CD_FAM(f_score_scored, "strata_score_blocks_scored_total",
           "Blocks that Score calls scored row by row (the others pruned by their bounds)",
           MX_METRIC_COUNTER, "namespace")
    CD_FAM(f_score_rows, "strata_score_rows_total", "Key rows that Score calls scored",
           MX_METRIC_COUNTER, "namespace")
#undef CD_FAM
    if (st == ST_OK) {
        mx_metric_desc_t desc = {0};

        desc.name = "strata_dataplane_isolated";
        desc.help = "1: no tenant's data-plane keys reach another tenant's memory; 0: several "
                    "tenants share a transport that checks no remote key (allow_shared_dataplane)";
        desc.type = MX_METRIC_GAUGE;
        st = mx_register(o->reg, &desc, &o->f_dp_isolated);
    }
    if (st == ST_OK) {
        st = mx_gauge(o->f_dp_isolated, NULL, &o->dp_isolated);
    }
    if (st == ST_OK) {
        st = cd_obs_rebalance_create(o);
    }
    if (st == ST_OK) {
        st = cd_obs_adm_create(o->reg, &o->adm);
    }
    if (st == ST_OK) {
        st = cd_obs_process_create(o);
    }
    if (st == ST_OK) {
        st = mx_gauge(o->f_tier_limit, MX_LABELS("dram"), &o->dram_limit);
    }
    for (int m = 0; st == ST_OK && m < CD_OBS_METHODS; m++) {
        st = mx_histogram(o->f_duration, MX_LABELS(cd_obs_method_name(m)), &o->duration[m]);
    }
    if (st != ST_OK) {
        cd_obs_destroy(o);
        return st;
    }
    *obs_p = o;
    return ST_OK;
}

st_status_t cd_obs_ns_add(cd_obs_t *o, const char *name, cd_ns_metrics_t **mx_p)
{
    cd_ns_metrics_t *mx = calloc(1, sizeof(*mx));
    st_status_t st = ST_OK;

    if (mx == NULL) {
        return ST_ERR_NOMEM;
    }
#define CD_C(fam, field, ...)                                        \
    if (st == ST_OK) {                                               \
        st = mx_counter(o->fam, MX_LABELS(__VA_ARGS__), &mx->field); \
    }
#define CD_G(fam, field, ...)                                      \
    if (st == ST_OK) {                                             \
        st = mx_gauge(o->fam, MX_LABELS(__VA_ARGS__), &mx->field); \
    }
    CD_C(f_lookups, lookups, name, "kv")
    CD_C(f_lookups_hit, lookups_hit, name, "kv")
    CD_C(f_lookup_tokens, lookup_tokens, name, "kv")
    CD_C(f_matched, matched_tokens, name, "kv")
    CD_C(f_resumable, resumable_tokens, name, "kv")
    for (int k = 0; k < 5; k++) {
        CD_C(f_stored_bytes, stored_bytes[k], name, cd_obs_kind_names[k], "inline")
        CD_C(f_stored_objects, stored_objects[k], name, cd_obs_kind_names[k], "inline")
        CD_C(f_served_bytes, served_bytes[k], name, cd_obs_kind_names[k], "inline")
        CD_C(f_served_objects, served_objects[k], name, cd_obs_kind_names[k], "inline")
    }
    for (int k = 0; k < 5; k++) {
        for (int g = 0; g < CD_OBS_GET_OUTCOMES; g++) {
            CD_C(f_object_gets, gets[k][g], name, cd_obs_kind_names[k], cd_obs_get_outcome[g],
                 cd_obs_get_tier[g])
        }
    }
    for (int k = 0; k < CD_OBS_LOOKUP_KINDS; k++) {
        CD_C(f_lookup_blocks, lookup_blocks[k][0], name, cd_obs_lookup_kind_names[k], "hit")
        CD_C(f_lookup_blocks, lookup_blocks[k][1], name, cd_obs_lookup_kind_names[k], "miss")
    }
    CD_C(f_evictions, evictions, name, "all", "dram")
    CD_C(f_evicted_bytes, evicted_bytes, name, "dram")
    CD_C(f_leases_granted, leases_granted, name)
    CD_C(f_leases_expired, leases_expired, name)
    CD_C(f_score_calls, score_calls, name)
    CD_C(f_score_blocks, score_blocks, name)
    CD_C(f_score_scored, score_blocks_scored, name)
    CD_C(f_score_rows, score_rows, name)
    if (o->d->tier != NULL) {
        /* Spilled: KV and IDX; promoted: those and KDA (written through). */
        for (int k = 0; k < 3; k++) {
            if (k < 2) {
                CD_C(f_spills, spills[k], name, cd_obs_kind_names[k])
            }
            CD_C(f_promotions, promotions[k], name, cd_obs_kind_names[k])
        }
    }
    CD_G(f_tier_used, dram_used, name, "dram")
    CD_G(f_tier_objects, dram_objects, name, "dram")
    CD_G(f_leases_active, leases_active, name)
    CD_G(f_reservations_active, reservations_active, name)
    CD_G(f_pins_active, pins_active, name)
    CD_G(f_sessions_active, sessions_active, name)
#undef CD_C
#undef CD_G
    if (st != ST_OK) {
        free(mx);
        return st;
    }
    *mx_p = mx;
    return ST_OK;
}

void cd_obs_call(cd_obs_t *o, int m, uint64_t ns, st_status_t status)
{
    if (o == NULL || m < 0 || m >= CD_OBS_METHODS) {
        return;
    }
    mx_histogram_observe(o->duration[m], ns);
    if (status != ST_OK) {
        mx_counter_t *c;

        /* Rare: the child is created on first use, under the registry lock. */
        if (mx_counter(o->f_errors, MX_LABELS(cd_obs_method_name(m), st_status_name(status)), &c) ==
            ST_OK) {
            mx_counter_inc(c);
        }
    }
}

void cd_obs_kind_totals(cd_daemon_t *d, int all, uint32_t local, cd_obs_kinds_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        const cd_ns_metrics_t *mx = d->ns[i]->mx;

        if (mx == NULL || (!all && d->ns[i]->local_id != local)) {
            continue;
        }
        for (int k = 0; k < 5; k++) {
            for (int g = 0; g < CD_OBS_GET_OUTCOMES; g++) {
                out->gets[k][g] += mx_counter_get(mx->gets[k][g]);
            }
        }
        for (int k = 0; k < CD_OBS_LOOKUP_KINDS; k++) {
            out->lookup_blocks[k][0] += mx_counter_get(mx->lookup_blocks[k][0]);
            out->lookup_blocks[k][1] += mx_counter_get(mx->lookup_blocks[k][1]);
        }
    }
    pthread_mutex_unlock(&d->ns_lock);
}

/* /stats: "kinds": {"vis": {"get_hits_dram": N, "get_hits_ssd": N, "get_misses": N,
 * "lookup_block_hits": N, "lookup_block_misses": N}, ...} over every namespace
 * (docs/observability.md §3). */
static void cd_obs_stats_kinds(mx_json_t *j, cd_daemon_t *d)
{
    cd_obs_kinds_t t;

    cd_obs_kind_totals(d, 1, 0, &t);
    mx_json_key(j, "kinds");
    mx_json_begin_object(j);
    for (int k = 0; k < 5; k++) {
        int lk = k == 0 ? CD_OBS_LOOKUP_KV : k == 4 ? CD_OBS_LOOKUP_VIS : -1;

        mx_json_key(j, cd_obs_kind_names[k]);
        mx_json_begin_object(j);
        mx_json_key(j, "get_hits_dram");
        mx_json_uint(j, t.gets[k][CD_OBS_GET_DRAM]);
        mx_json_key(j, "get_hits_ssd");
        mx_json_uint(j, t.gets[k][CD_OBS_GET_SSD]);
        mx_json_key(j, "get_misses");
        mx_json_uint(j, t.gets[k][CD_OBS_GET_MISS]);
        mx_json_key(j, "lookup_block_hits");
        mx_json_uint(j, lk >= 0 ? t.lookup_blocks[lk][0] : 0);
        mx_json_key(j, "lookup_block_misses");
        mx_json_uint(j, lk >= 0 ? t.lookup_blocks[lk][1] : 0);
        mx_json_end_object(j);
    }
    mx_json_end_object(j);
}

/* The tenants' records, copied out of the store (NULL when there are none or
 * no memory); *n_p gets how many. The caller frees. */
static cd_tenant_usage_t *cd_obs_tenants(cd_obs_t *o, size_t *n_p)
{
    size_t n = cd_store_tenants(o->d->store, NULL, 0);
    cd_tenant_usage_t *u = NULL;

    /* Tenants only come, never go: copy at most the n counted. */
    if (n > 0 && (u = calloc(n, sizeof(*u))) != NULL) {
        size_t now = cd_store_tenants(o->d->store, u, n);

        n = now < n ? now : n;
    }
    *n_p = u != NULL ? n : 0;
    return u;
}

/* Scrape time: each tenant's quota and use, per resource (children made at
 * a tenant's first scrape). */
static void cd_obs_collect_tenants(cd_obs_t *o)
{
    size_t n;
    cd_tenant_usage_t *u = cd_obs_tenants(o, &n);

    for (size_t i = 0; i < n; i++) {
        const uint64_t *q = (const uint64_t *)&u[i].quota, *used = (const uint64_t *)&u[i].used;

        for (int r = 0; r < CD_TENANT_RESOURCES; r++) {
            const char *res = cd_tenant_resource_names[r];
            mx_gauge_t *gq, *gu;

            if (mx_gauge(o->f_tenant_quota, MX_LABELS(u[i].tenant, res), &gq) != ST_OK ||
                mx_gauge(o->f_tenant_used, MX_LABELS(u[i].tenant, res), &gu) != ST_OK) {
                break;
            }
            mx_gauge_set(gq, (double)q[r]);
            mx_gauge_set(gu, (double)used[r]);
        }
    }
    free(u);
}

/* /stats: "tenants": {"acme": {"memory_bytes": {"quota": Q, "used": U}, ...}}, and "dataplane". */
static void cd_obs_stats_tenants(mx_json_t *j, void *arg)
{
    cd_daemon_t *d = ((cd_obs_t *)arg)->d;
    size_t n;
    cd_tenant_usage_t *u = cd_obs_tenants(arg, &n);

    mx_json_key(j, "tenants");
    mx_json_begin_object(j);
    for (size_t i = 0; i < n; i++) {
        const uint64_t *q = (const uint64_t *)&u[i].quota, *used = (const uint64_t *)&u[i].used;

        mx_json_key(j, u[i].tenant);
        mx_json_begin_object(j);
        for (int r = 0; r < CD_TENANT_RESOURCES; r++) {
            mx_json_key(j, cd_tenant_resource_names[r]);
            mx_json_begin_object(j);
            mx_json_key(j, "quota");
            mx_json_uint(j, q[r]);
            mx_json_key(j, "used");
            mx_json_uint(j, used[r]);
            mx_json_end_object(j);
        }
        mx_json_end_object(j);
    }
    mx_json_end_object(j);
    free(u);
    /* "dataplane": {"transport": T, "enforces_keys": B, "isolated": B,
     * "allow_shared_dataplane": B} (docs/observability.md). */
    mx_json_key(j, "dataplane");
    mx_json_begin_object(j);
    mx_json_key(j, "transport");
    mx_json_string(j, d->dp != NULL ? d->cfg.transport : "none");
    mx_json_key(j, "enforces_keys");
    mx_json_bool(j, cd_dp_committed_read_only(d->dp));
    mx_json_key(j, "isolated");
    mx_json_bool(j, cd_daemon_dataplane_isolated(d));
    mx_json_key(j, "allow_shared_dataplane");
    mx_json_bool(j, d->cfg.shared_dataplane);
    mx_json_end_object(j);
    cd_obs_stats_kinds(j, d);
}

/* Scrape time: store gauges, and the store's counters as deltas. */
static void cd_obs_collect(mx_metrics_t *reg, void *arg)
{
    cd_obs_t *o = arg;
    cd_daemon_t *d = o->d;

    mx_gauge_set(o->dram_limit, (double)d->cfg.memory_limit); /* once, not per namespace */
    mx_gauge_set(o->dp_isolated, cd_daemon_dataplane_isolated(d) ? 1.0 : 0.0);
    pthread_mutex_lock(&d->ns_lock);
    for (uint32_t i = 0; i < d->n_ns; i++) {
        cd_ns_entry_t *e = d->ns[i];
        cd_ns_metrics_t *mx = e->mx;
        cd_stats_t s;
        uint64_t objs = 0;

        if (mx == NULL || cd_store_stats(d->store, e->local_id, &s) != ST_OK) {
            continue;
        }
        for (int k = 0; k < CD_KIND_COUNT; k++) {
            objs += s.objects[k];
        }
        mx_gauge_set(mx->dram_used, (double)s.arena_used);
        mx_gauge_set(mx->dram_objects, (double)objs);
        mx_gauge_set(mx->leases_active, (double)s.leases_active);
        mx_gauge_set(mx->reservations_active, (double)s.reservations_active);
        mx_gauge_set(mx->pins_active, (double)s.pins_active);
        mx_gauge_set(mx->sessions_active, (double)s.sessions_active);
#define CD_DELTA(cur, last, ctr)             \
    if ((cur) > (last)) {                    \
        mx_counter_add(ctr, (cur) - (last)); \
        (last) = (cur);                      \
    }
        CD_DELTA(s.evicted_objects, mx->last_evictions, mx->evictions)
        CD_DELTA(s.evicted_bytes, mx->last_evicted_bytes, mx->evicted_bytes)
        CD_DELTA(s.leases_granted, mx->last_granted, mx->leases_granted)
        CD_DELTA(s.leases_expired, mx->last_expired, mx->leases_expired)
        if (d->tier != NULL && mx->promotions[0] != NULL) {
            uint64_t spills[3], promoted[3];

            cd_tier_flows(d->tier, e->local_id, spills, promoted);
            for (int k = 0; k < 3; k++) {
                if (mx->spills[k] != NULL) {
                    CD_DELTA(spills[k], mx->last_spills[k], mx->spills[k])
                }
                CD_DELTA(promoted[k], mx->last_promotions[k], mx->promotions[k])
            }
        }
#undef CD_DELTA
    }
    pthread_mutex_unlock(&d->ns_lock);
    cd_obs_collect_tenants(o);
    cd_obs_collect_rebalance(o);
    cd_obs_adm_collect(o->adm, d->server);
    cd_obs_collect_process(o);
    if (d->tier != NULL) {
        ssd_stats_t ss;
        uint64_t used = 0, objs = 0;

        if (o->ssd_used == NULL &&
            (mx_gauge(o->f_tier_used, MX_LABELS("*", "ssd"), &o->ssd_used) != ST_OK ||
             mx_gauge(o->f_tier_limit, MX_LABELS("ssd"), &o->ssd_limit) != ST_OK ||
             mx_gauge(o->f_tier_objects, MX_LABELS("*", "ssd"), &o->ssd_objects) != ST_OK ||
             mx_counter(o->f_evictions, MX_LABELS("*", "all", "ssd"), &o->ssd_evictions) != ST_OK ||
             mx_counter(o->f_evicted_bytes, MX_LABELS("*", "ssd"), &o->ssd_evicted_bytes) !=
                 ST_OK)) {
            o->ssd_used = NULL;
            return;
        }
        cd_tier_stats(d->tier, &ss, NULL);
        for (int k = 0; k < SSD_KIND_MAX_; k++) {
            used += ss.bytes[k];
            objs += ss.objects[k];
        }
        mx_gauge_set(o->ssd_used, (double)used);
        mx_gauge_set(o->ssd_limit, (double)ss.map_size);
        mx_gauge_set(o->ssd_objects, (double)objs);
        if (ss.evictions > o->last_ssd_evictions) {
            mx_counter_add(o->ssd_evictions, ss.evictions - o->last_ssd_evictions);
            o->last_ssd_evictions = ss.evictions;
        }
        if (ss.evicted_bytes > o->last_ssd_evicted_bytes) {
            mx_counter_add(o->ssd_evicted_bytes, ss.evicted_bytes - o->last_ssd_evicted_bytes);
            o->last_ssd_evicted_bytes = ss.evicted_bytes;
        }
    }
    (void)reg;
}

st_status_t cd_obs_serve(cd_obs_t *o, const char *listen, const char *node, const char *peers,
                         const mx_http_opts_t *sec, int *port_p)
{
    mx_http_opts_t opts = {0};
    char host[64];
    const char *colon = strrchr(listen, ':');
    long port;
    st_status_t st;

    if (colon == NULL || (size_t)(colon - listen) >= sizeof(host)) {
        lg_error("metrics_listen=%s is not host:port", listen);
        return ST_ERR_INVALID;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = strtol(colon + 1, NULL, 10);
    if (port < 0 || port > 65535) {
        lg_error("metrics_listen=%s: port out of range", listen);
        return ST_ERR_INVALID;
    }
    st = mx_add_collector(o->reg, cd_obs_collect, o);
    if (st != ST_OK) {
        return st;
    }
    opts.bind_addr = host;
    opts.port = (uint16_t)port;
    opts.threads = 1;
    opts.stats.node = node;
    opts.stats.peers = peers != NULL && peers[0] != '\0' ? peers : NULL;
    opts.stats.fn = cd_obs_stats_tenants;
    opts.stats.arg = o;
    if (sec != NULL) {
        opts.tls_cert_pem = sec->tls_cert_pem;
        opts.tls_key_pem = sec->tls_key_pem;
        opts.token = sec->token;
        opts.cors_origins = sec->cors_origins;
    }
    st = mx_http_start(o->reg, &opts, &o->http);
    if (st != ST_OK) {
        return st;
    }
    *port_p = mx_http_port(o->http);
    return ST_OK;
}

st_status_t cd_obs_reload_tls(cd_obs_t *o, const char *cert_pem, const char *key_pem)
{
    if (o->http == NULL) {
        lg_error("metrics: no metrics server is running: no certificate to reload");
        return ST_ERR_INVALID;
    }
    return mx_http_reload_tls(o->http, cert_pem, key_pem);
}

void cd_obs_destroy(cd_obs_t *o)
{
    if (o == NULL) {
        return;
    }
    mx_http_stop(o->http);
    mx_destroy(o->reg);
    cd_obs_adm_destroy(o->adm);
    free(o);
}
