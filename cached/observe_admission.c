/*
 * observe_admission.c - the metrics of fair queueing and admission control
 * (rpc/server_sched.c; docs/observability.md, "Admission"): queue depth, the
 * queueing time histogram, refusals by method and by flow, calls served by
 * flow. Counters are the rpc server's, turned into deltas at scrape time.
 */
#include "observe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "srpc.h"

#define CD_ADM_FAMS 9

struct cd_obs_adm {
    mx_metric_family_t *f[CD_ADM_FAMS];
    mx_gauge_t *queued_calls, *queued_bytes, *serving;
    mx_histogram_t *wait;
    mx_counter_t *lent;
    uint64_t last_lent;
    mx_counter_t *refused_method[SRPC_CACHE_N_METHODS];
    uint64_t last_method[SRPC_CACHE_N_METHODS];
    char last_name[SRPC_MAX_FLOWS][SRPC_FLOW_NAME + 1]; /* flow i's name at the last scrape */
    uint64_t last_served[SRPC_MAX_FLOWS];
    uint64_t last_refused[SRPC_MAX_FLOWS];
};

enum {
    ADM_QCALLS,
    ADM_QBYTES,
    ADM_SERVING,
    ADM_WAIT,
    ADM_REF_M,
    ADM_REF_F,
    ADM_SERVED,
    ADM_FQ,
    ADM_LENT
};

st_status_t cd_obs_adm_create(mx_metrics_t *reg, cd_obs_adm_t **adm_p)
{
    static const char *const l_method[] = {"method"}, *const l_flow[] = {"flow"};
    static const struct {
        const char *name, *help;
        mx_metric_type_t type;
        const char *const *labels;
    } f[CD_ADM_FAMS] = {
        {"strata_admission_queued_calls", "gRPC calls waiting in the fair queue now",
         MX_METRIC_GAUGE, NULL},
        {"strata_admission_queued_bytes", "Request bytes of the calls waiting now", MX_METRIC_GAUGE,
         NULL},
        {"strata_admission_serving", "gRPC handlers running now (at most max_serving_calls)",
         MX_METRIC_GAUGE, NULL},
        {"strata_admission_wait_seconds", "Time a served call waited in the fair queue",
         MX_METRIC_HISTOGRAM, NULL},
        {"strata_admission_refused_total",
         "Calls refused by admission control (RESOURCE_EXHAUSTED + strata-retry-after-ms)",
         MX_METRIC_COUNTER, l_method},
        {"strata_admission_flow_refused_total",
         "Calls refused by admission control, by flow (tenant:<name>, peer:<address>, cluster)",
         MX_METRIC_COUNTER, l_flow},
        {"strata_admission_flow_served_total", "Calls taken off the fair queue to run, by flow",
         MX_METRIC_COUNTER, l_flow},
        {"strata_admission_flow_queued_calls", "Calls of a flow waiting now", MX_METRIC_GAUGE,
         l_flow},
        {"strata_admission_lent_total",
         "Calls served between two slices of a long Get or Put, in its slot (slice_bytes)",
         MX_METRIC_COUNTER, NULL},
    };
    cd_obs_adm_t *a = calloc(1, sizeof(*a));
    st_status_t st = a != NULL ? ST_OK : ST_ERR_NOMEM;

    for (int i = 0; st == ST_OK && i < CD_ADM_FAMS; i++) {
        mx_metric_desc_t desc = {0};

        desc.name = f[i].name;
        desc.help = f[i].help;
        desc.type = f[i].type;
        desc.label_names = f[i].labels;
        desc.n_labels = f[i].labels != NULL ? 1 : 0;
        if (f[i].type == MX_METRIC_HISTOGRAM) {
            desc.buckets = mx_latency_buckets;
            desc.n_buckets = mx_latency_buckets_n;
            desc.scale = 1e-9;
        }
        st = mx_register(reg, &desc, &a->f[i]);
    }
    if (st == ST_OK && (st = mx_gauge(a->f[ADM_QCALLS], NULL, &a->queued_calls)) == ST_OK &&
        (st = mx_gauge(a->f[ADM_QBYTES], NULL, &a->queued_bytes)) == ST_OK &&
        (st = mx_gauge(a->f[ADM_SERVING], NULL, &a->serving)) == ST_OK &&
        (st = mx_histogram(a->f[ADM_WAIT], NULL, &a->wait)) == ST_OK) {
        st = mx_counter(a->f[ADM_LENT], NULL, &a->lent);
    }
    for (int m = 0; st == ST_OK && m < SRPC_CACHE_N_METHODS; m++) {
        const char *path = srpc_cache_methods[m].path;

        st = mx_counter(a->f[ADM_REF_M], MX_LABELS(strrchr(path, '/') + 1), &a->refused_method[m]);
    }
    if (st != ST_OK) {
        free(a);
        return st;
    }
    *adm_p = a;
    return ST_OK;
}

void cd_obs_adm_wait(cd_obs_adm_t *a, uint64_t wait_ns)
{
    if (a != NULL) {
        mx_histogram_observe(a->wait, wait_ns);
    }
}

/* Adds cur - *last to the flow's child of family (a renamed flow starts from 0). */
static void cd_obs_adm_delta(mx_metric_family_t *family, const char *flow, uint64_t cur,
                             uint64_t *last)
{
    mx_counter_t *c;

    if (cur > *last && mx_counter(family, MX_LABELS(flow), &c) == ST_OK) {
        mx_counter_add(c, cur - *last);
    }
    *last = cur;
}

void cd_obs_adm_collect(cd_obs_adm_t *a, const srpc_server_t *srv)
{
    srpc_sched_stats_t *st;
    srpc_method_stats_t ms[SRPC_CACHE_N_METHODS + 1];
    size_t nm;

    if (a == NULL || srv == NULL || (st = malloc(sizeof(*st))) == NULL) {
        return;
    }
    srpc_server_sched_stats(srv, st);
    mx_gauge_set(a->queued_calls, (double)st->queued_calls);
    mx_gauge_set(a->queued_bytes, (double)st->queued_bytes);
    mx_gauge_set(a->serving, (double)st->serving);
    if (st->lent > a->last_lent) {
        mx_counter_add(a->lent, st->lent - a->last_lent);
        a->last_lent = st->lent;
    }
    nm = srpc_server_stats(srv, ms, SRPC_CACHE_N_METHODS + 1);
    for (size_t m = 0; m < nm && m < SRPC_CACHE_N_METHODS; m++) {
        if (ms[m].overloaded > a->last_method[m]) {
            mx_counter_add(a->refused_method[m], ms[m].overloaded - a->last_method[m]);
            a->last_method[m] = ms[m].overloaded;
        }
    }
    for (size_t i = 0; i < st->n_flows; i++) {
        const srpc_flow_stats_t *fl = &st->flows[i];
        mx_gauge_t *g;

        if (strcmp(a->last_name[i], fl->name) != 0) {
            snprintf(a->last_name[i], sizeof(a->last_name[i]), "%s", fl->name);
            a->last_served[i] = a->last_refused[i] = 0;
        }
        cd_obs_adm_delta(a->f[ADM_SERVED], fl->name, fl->served, &a->last_served[i]);
        cd_obs_adm_delta(a->f[ADM_REF_F], fl->name, fl->refused, &a->last_refused[i]);
        if (mx_gauge(a->f[ADM_FQ], MX_LABELS(fl->name), &g) == ST_OK) {
            mx_gauge_set(g, (double)fl->queued);
        }
    }
    free(st);
}

void cd_obs_adm_destroy(cd_obs_adm_t *a)
{
    free(a);
}
