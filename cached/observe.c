/*
 * observe.c - stratad's metrics; see observe.h and docs/observability.md.
 */
#include "observe.h"

#include <stdlib.h>
#include <string.h>

#include "daemon.h"
#include "dataplane.h"
#include "st_log.h"
#include "tier.h"

#define CD_OBS_METHODS SRPC_CACHE_N_METHODS

struct cd_obs {
    cd_daemon_t *d;
    st_metrics_t *reg;
    st_metrics_http_t *http;
    st_metric_family_t *f_lookups, *f_lookups_hit, *f_lookup_tokens, *f_matched, *f_resumable;
    st_metric_family_t *f_stored_bytes, *f_stored_objects, *f_served_bytes, *f_served_objects;
    st_metric_family_t *f_evictions, *f_evicted_bytes, *f_tier_used, *f_tier_limit;
    st_metric_family_t *f_tier_objects, *f_leases_active, *f_leases_granted, *f_leases_expired;
    st_metric_family_t *f_duration, *f_errors, *f_spills, *f_promotions;
    st_metric_family_t *f_tenant_quota, *f_tenant_used, *f_dp_isolated;
    st_gauge_t *dp_isolated; /* strata_dataplane_isolated, no labels */
    st_histogram_t *duration[CD_OBS_METHODS];
    st_gauge_t *dram_limit; /* process-wide: one series, tier="dram" */
    /* The SSD tier (daemon-wide: namespace label "*"), created at the first scrape. */
    st_gauge_t *ssd_used, *ssd_limit, *ssd_objects;
    st_counter_t *ssd_evictions, *ssd_evicted_bytes;
    uint64_t last_ssd_evictions, last_ssd_evicted_bytes;
};

static const char *const cd_obs_kinds[5] = {"kv", "idx", "kda", "session", "vis"};

/* The RPC names, as the method label carries them. */
static const char *cd_obs_method_name(int m)
{
    const char *path = srpc_cache_methods[m].path;
    const char *slash = strrchr(path, '/');

    return slash ? slash + 1 : path;
}

static st_status_t cd_obs_family(cd_obs_t *o, const char *name, const char *help,
                                 st_metric_type_t type, const char *const *labels, size_t n_labels,
                                 st_metric_family_t **fam_p)
{
    st_metric_desc_t desc = {0};

    desc.name = name;
    desc.help = help;
    desc.type = type;
    desc.label_names = labels;
    desc.n_labels = n_labels;
    if (type == ST_METRIC_HISTOGRAM) {
        desc.buckets = st_metrics_latency_buckets;
        desc.n_buckets = st_metrics_latency_buckets_n;
        desc.scale = 1e-9;
    }
    return st_metrics_register(o->reg, &desc, fam_p);
}

st_status_t cd_obs_create(cd_daemon_t *d, cd_obs_t **obs_p)
{
    cd_obs_t *o = calloc(1, sizeof(*o));
    st_status_t st;

    if (o == NULL) {
        return ST_ERR_NOMEM;
    }
    o->d = d;
    st = st_metrics_create(&o->reg);
#define CD_FAM(field, name, help, type, ...)                                                \
    if (st == ST_OK) {                                                                      \
        static const char *const l_[] = {__VA_ARGS__};                                      \
        st = cd_obs_family(o, name, help, type, l_, sizeof(l_) / sizeof(l_[0]), &o->field); \
    }
    CD_FAM(f_lookups, "strata_lookups_total", "Lookup calls answered", ST_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_lookups_hit, "strata_lookups_with_hit_total",
           "Lookup calls with a matched prefix of at least one block", ST_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_lookup_tokens, "strata_lookup_tokens_total", "Looked-up tokens", ST_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_matched, "strata_lookup_matched_tokens_total", "Matched tokens (per owned segment)",
           ST_METRIC_COUNTER, "namespace", "kind")
    CD_FAM(f_resumable, "strata_lookup_resumable_tokens_total",
           "Resumable tokens (per owned segment, up to its last KDA checkpoint)", ST_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_stored_bytes, "strata_stored_bytes_total", "Bytes of committed writes",
           ST_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_stored_objects, "strata_stored_objects_total", "Objects committed", ST_METRIC_COUNTER,
           "namespace", "kind", "transport")
    CD_FAM(f_served_bytes, "strata_served_bytes_total", "Bytes handed out for reading",
           ST_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_served_objects, "strata_served_objects_total", "Objects handed out for reading",
           ST_METRIC_COUNTER, "namespace", "kind", "transport")
    CD_FAM(f_evictions, "strata_evictions_total", "Objects evicted from a tier", ST_METRIC_COUNTER,
           "namespace", "kind", "tier")
    CD_FAM(f_evicted_bytes, "strata_evicted_bytes_total", "Bytes evicted from a tier",
           ST_METRIC_COUNTER, "namespace", "tier")
    CD_FAM(f_tier_used, "strata_tier_used_bytes", "Bytes held in the tier now", ST_METRIC_GAUGE,
           "namespace", "tier")
    CD_FAM(f_tier_limit, "strata_tier_limit_bytes", "The tier's byte limit (process-wide)",
           ST_METRIC_GAUGE, "tier")
    CD_FAM(f_tier_objects, "strata_tier_objects", "Objects held in the tier now", ST_METRIC_GAUGE,
           "namespace", "tier")
    CD_FAM(f_spills, "strata_spills_total",
           "Objects written from DRAM to SSD (evicted, or ahead of eviction)", ST_METRIC_COUNTER,
           "namespace", "kind")
    CD_FAM(f_promotions, "strata_promotions_total",
           "Objects read back from SSD into DRAM on a miss", ST_METRIC_COUNTER, "namespace", "kind")
    CD_FAM(f_leases_active, "strata_leases_active", "Read leases held now", ST_METRIC_GAUGE,
           "namespace")
    CD_FAM(f_leases_granted, "strata_leases_granted_total", "Read leases granted",
           ST_METRIC_COUNTER, "namespace")
    CD_FAM(f_leases_expired, "strata_leases_expired_total", "Leases that ran out before release",
           ST_METRIC_COUNTER, "namespace")
    CD_FAM(f_duration, "strata_request_duration_seconds",
           "Time from taking a request to having its answer", ST_METRIC_HISTOGRAM, "method")
    CD_FAM(f_errors, "strata_errors_total", "Requests answered with an error", ST_METRIC_COUNTER,
           "method", "code")
    CD_FAM(f_tenant_quota, "strata_tenant_quota",
           "A tenant's quota of a resource (0: no limit; bytes for memory_bytes and ssd_bytes)",
           ST_METRIC_GAUGE, "tenant", "resource")
    CD_FAM(f_tenant_used, "strata_tenant_used", "What a tenant uses of a resource now",
           ST_METRIC_GAUGE, "tenant", "resource")
#undef CD_FAM
    if (st == ST_OK) {
        st_metric_desc_t desc = {0};

        desc.name = "strata_dataplane_isolated";
        desc.help = "1: no tenant's data-plane keys reach another tenant's memory; 0: several "
                    "tenants share a transport that checks no remote key (allow_shared_dataplane)";
        desc.type = ST_METRIC_GAUGE;
        st = st_metrics_register(o->reg, &desc, &o->f_dp_isolated);
    }
    if (st == ST_OK) {
        st = st_metrics_gauge(o->f_dp_isolated, NULL, &o->dp_isolated);
    }
    if (st == ST_OK) {
        st = st_metrics_gauge(o->f_tier_limit, ST_LABELS("dram"), &o->dram_limit);
    }
    for (int m = 0; st == ST_OK && m < CD_OBS_METHODS; m++) {
        st = st_metrics_histogram(o->f_duration, ST_LABELS(cd_obs_method_name(m)), &o->duration[m]);
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
#define CD_C(fam, field, ...)                                                \
    if (st == ST_OK) {                                                       \
        st = st_metrics_counter(o->fam, ST_LABELS(__VA_ARGS__), &mx->field); \
    }
#define CD_G(fam, field, ...)                                              \
    if (st == ST_OK) {                                                     \
        st = st_metrics_gauge(o->fam, ST_LABELS(__VA_ARGS__), &mx->field); \
    }
    CD_C(f_lookups, lookups, name, "kv")
    CD_C(f_lookups_hit, lookups_hit, name, "kv")
    CD_C(f_lookup_tokens, lookup_tokens, name, "kv")
    CD_C(f_matched, matched_tokens, name, "kv")
    CD_C(f_resumable, resumable_tokens, name, "kv")
    for (int k = 0; k < 5; k++) {
        CD_C(f_stored_bytes, stored_bytes[k], name, cd_obs_kinds[k], "inline")
        CD_C(f_stored_objects, stored_objects[k], name, cd_obs_kinds[k], "inline")
        CD_C(f_served_bytes, served_bytes[k], name, cd_obs_kinds[k], "inline")
        CD_C(f_served_objects, served_objects[k], name, cd_obs_kinds[k], "inline")
    }
    CD_C(f_evictions, evictions, name, "all", "dram")
    CD_C(f_evicted_bytes, evicted_bytes, name, "dram")
    CD_C(f_leases_granted, leases_granted, name)
    CD_C(f_leases_expired, leases_expired, name)
    if (o->d->tier != NULL) {
        /* Spilled: KV and IDX; promoted: those and KDA (written through). */
        for (int k = 0; k < 3; k++) {
            if (k < 2) {
                CD_C(f_spills, spills[k], name, cd_obs_kinds[k])
            }
            CD_C(f_promotions, promotions[k], name, cd_obs_kinds[k])
        }
    }
    CD_G(f_tier_used, dram_used, name, "dram")
    CD_G(f_tier_objects, dram_objects, name, "dram")
    CD_G(f_leases_active, leases_active, name)
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
    st_histogram_observe(o->duration[m], ns);
    if (status != ST_OK) {
        st_counter_t *c;

        /* Rare: the child is created on first use, under the registry lock. */
        if (st_metrics_counter(o->f_errors,
                               ST_LABELS(cd_obs_method_name(m), st_status_name(status)),
                               &c) == ST_OK) {
            st_counter_inc(c);
        }
    }
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
            st_gauge_t *gq, *gu;

            if (st_metrics_gauge(o->f_tenant_quota, ST_LABELS(u[i].tenant, res), &gq) != ST_OK ||
                st_metrics_gauge(o->f_tenant_used, ST_LABELS(u[i].tenant, res), &gu) != ST_OK) {
                break;
            }
            st_gauge_set(gq, (double)q[r]);
            st_gauge_set(gu, (double)used[r]);
        }
    }
    free(u);
}

/* /stats: "tenants": {"acme": {"memory_bytes": {"quota": Q, "used": U}, ...}}, and "dataplane". */
static void cd_obs_stats_tenants(st_json_t *j, void *arg)
{
    cd_daemon_t *d = ((cd_obs_t *)arg)->d;
    size_t n;
    cd_tenant_usage_t *u = cd_obs_tenants(arg, &n);

    st_json_key(j, "tenants");
    st_json_begin_object(j);
    for (size_t i = 0; i < n; i++) {
        const uint64_t *q = (const uint64_t *)&u[i].quota, *used = (const uint64_t *)&u[i].used;

        st_json_key(j, u[i].tenant);
        st_json_begin_object(j);
        for (int r = 0; r < CD_TENANT_RESOURCES; r++) {
            st_json_key(j, cd_tenant_resource_names[r]);
            st_json_begin_object(j);
            st_json_key(j, "quota");
            st_json_uint(j, q[r]);
            st_json_key(j, "used");
            st_json_uint(j, used[r]);
            st_json_end_object(j);
        }
        st_json_end_object(j);
    }
    st_json_end_object(j);
    free(u);
    /* "dataplane": {"transport": T, "enforces_keys": B, "isolated": B,
     * "allow_shared_dataplane": B} (docs/observability.md). */
    st_json_key(j, "dataplane");
    st_json_begin_object(j);
    st_json_key(j, "transport");
    st_json_string(j, d->dp != NULL ? d->cfg.transport : "none");
    st_json_key(j, "enforces_keys");
    st_json_bool(j, cd_dp_committed_read_only(d->dp));
    st_json_key(j, "isolated");
    st_json_bool(j, cd_daemon_dataplane_isolated(d));
    st_json_key(j, "allow_shared_dataplane");
    st_json_bool(j, d->cfg.shared_dataplane);
    st_json_end_object(j);
}

/* Scrape time: store gauges, and the store's counters as deltas. */
static void cd_obs_collect(st_metrics_t *reg, void *arg)
{
    cd_obs_t *o = arg;
    cd_daemon_t *d = o->d;

    st_gauge_set(o->dram_limit, (double)d->cfg.memory_limit); /* once, not per namespace */
    st_gauge_set(o->dp_isolated, cd_daemon_dataplane_isolated(d) ? 1.0 : 0.0);
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
        st_gauge_set(mx->dram_used, (double)s.arena_used);
        st_gauge_set(mx->dram_objects, (double)objs);
        st_gauge_set(mx->leases_active, (double)s.leases_active);
#define CD_DELTA(cur, last, ctr)             \
    if ((cur) > (last)) {                    \
        st_counter_add(ctr, (cur) - (last)); \
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
    if (d->tier != NULL) {
        st_ssd_stats_t ss;
        uint64_t used = 0, objs = 0;

        if (o->ssd_used == NULL &&
            (st_metrics_gauge(o->f_tier_used, ST_LABELS("*", "ssd"), &o->ssd_used) != ST_OK ||
             st_metrics_gauge(o->f_tier_limit, ST_LABELS("ssd"), &o->ssd_limit) != ST_OK ||
             st_metrics_gauge(o->f_tier_objects, ST_LABELS("*", "ssd"), &o->ssd_objects) != ST_OK ||
             st_metrics_counter(o->f_evictions, ST_LABELS("*", "all", "ssd"), &o->ssd_evictions) !=
                 ST_OK ||
             st_metrics_counter(o->f_evicted_bytes, ST_LABELS("*", "ssd"), &o->ssd_evicted_bytes) !=
                 ST_OK)) {
            o->ssd_used = NULL;
            return;
        }
        cd_tier_stats(d->tier, &ss, NULL);
        for (int k = 0; k < ST_SSD_KIND_MAX_; k++) {
            used += ss.bytes[k];
            objs += ss.objects[k];
        }
        st_gauge_set(o->ssd_used, (double)used);
        st_gauge_set(o->ssd_limit, (double)ss.map_size);
        st_gauge_set(o->ssd_objects, (double)objs);
        if (ss.evictions > o->last_ssd_evictions) {
            st_counter_add(o->ssd_evictions, ss.evictions - o->last_ssd_evictions);
            o->last_ssd_evictions = ss.evictions;
        }
        if (ss.evicted_bytes > o->last_ssd_evicted_bytes) {
            st_counter_add(o->ssd_evicted_bytes, ss.evicted_bytes - o->last_ssd_evicted_bytes);
            o->last_ssd_evicted_bytes = ss.evicted_bytes;
        }
    }
    (void)reg;
}

st_status_t cd_obs_serve(cd_obs_t *o, const char *listen, const char *node, const char *peers,
                         const st_metrics_http_opts_t *sec, int *port_p)
{
    st_metrics_http_opts_t opts = {0};
    char host[64];
    const char *colon = strrchr(listen, ':');
    long port;
    st_status_t st;

    if (colon == NULL || (size_t)(colon - listen) >= sizeof(host)) {
        st_error("metrics_listen=%s is not host:port", listen);
        return ST_ERR_INVALID;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    port = strtol(colon + 1, NULL, 10);
    if (port < 0 || port > 65535) {
        st_error("metrics_listen=%s: port out of range", listen);
        return ST_ERR_INVALID;
    }
    st = st_metrics_add_collector(o->reg, cd_obs_collect, o);
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
    st = st_metrics_http_start(o->reg, &opts, &o->http);
    if (st != ST_OK) {
        return st;
    }
    *port_p = st_metrics_http_port(o->http);
    return ST_OK;
}

st_status_t cd_obs_reload_tls(cd_obs_t *o, const char *cert_pem, const char *key_pem)
{
    if (o->http == NULL) {
        st_error("metrics: no metrics server is running: no certificate to reload");
        return ST_ERR_INVALID;
    }
    return st_metrics_http_reload_tls(o->http, cert_pem, key_pem);
}

void cd_obs_destroy(cd_obs_t *o)
{
    if (o == NULL) {
        return;
    }
    st_metrics_http_stop(o->http);
    st_metrics_destroy(o->reg);
    free(o);
}
