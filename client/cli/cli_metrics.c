/*
 * cli_metrics.c - the client's own view, exported by `strata bench
 * --metrics-listen`: the composed lookup answers (docs/observability.md §1
 * "strata_client_*"), bytes fetched and stored, and lookup latency. Unlike a
 * daemon's counters, these are the client's prefixes across every owner.
 */
#include "cli_metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct cli_metrics {
    mx_server_t srv; /* its registry, server and --metrics-tls-* files */
    mx_counter_t *lookups, *lookups_hit, *tokens, *matched, *resumable, *fetched, *stored;
    mx_histogram_t *latency;
};

static st_status_t cli_metric(cli_metrics_t *m, const char *name, const char *help,
                              mx_metric_type_t type, const char *ns, mx_counter_t **c,
                              mx_histogram_t **h)
{
    mx_metric_desc_t d = {0};
    mx_metric_family_t *fam;
    static const char *const labels[] = {"namespace"};
    st_status_t st;

    d.name = name;
    d.help = help;
    d.type = type;
    d.label_names = labels;
    d.n_labels = 1;
    if (type == MX_METRIC_HISTOGRAM) {
        d.buckets = mx_latency_buckets;
        d.n_buckets = mx_latency_buckets_n;
        d.scale = 1e-9;
    }
    st = mx_register(m->srv.reg, &d, &fam);
    if (st != ST_OK) {
        return st;
    }
    return c != NULL ? mx_counter(fam, MX_LABELS(ns), c) : mx_histogram(fam, MX_LABELS(ns), h);
}

st_status_t cli_metrics_start(const char *listen, const char *ns, const char *cert, const char *key,
                              const char *token_file, cli_metrics_t **m_p, int *port_p)
{
    cli_metrics_t *m = calloc(1, sizeof(*m));
    const char *colon = strrchr(listen, ':');
    char host[64];
    st_status_t st;

    if (m == NULL) {
        return ST_ERR_NOMEM;
    }
    if (colon == NULL || (size_t)(colon - listen) >= sizeof(host)) {
        fprintf(stderr, "strata: --metrics-listen %s is not host:port\n", listen);
        free(m);
        return ST_ERR_INVALID;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    st = mx_create(&m->srv.reg);
#define CLI_C(field, name, help)                                                \
    if (st == ST_OK) {                                                          \
        st = cli_metric(m, name, help, MX_METRIC_COUNTER, ns, &m->field, NULL); \
    }
    CLI_C(lookups, "strata_client_lookups_total", "Lookups composed by this client")
    CLI_C(lookups_hit, "strata_client_lookups_with_hit_total",
          "Of those, with a prefix of at least one block")
    CLI_C(tokens, "strata_client_lookup_tokens_total", "Looked-up tokens")
    CLI_C(matched, "strata_client_lookup_matched_tokens_total",
          "Tokens of the longest cached prefix")
    CLI_C(resumable, "strata_client_lookup_resumable_tokens_total",
          "Tokens of the resumable prefix")
    CLI_C(fetched, "strata_client_fetched_bytes_total", "Object bytes read from the cluster")
    CLI_C(stored, "strata_client_stored_bytes_total", "Object bytes written to the cluster")
#undef CLI_C
    if (st == ST_OK) {
        st = cli_metric(m, "strata_client_lookup_duration_seconds", "Time of one lookup",
                        MX_METRIC_HISTOGRAM, ns, NULL, &m->latency);
    }
    if (st == ST_OK) {
        st = mx_http_serve(&m->srv, host, (uint16_t)strtol(colon + 1, NULL, 10), "strata-bench",
                           cert, key, token_file);
    }
    if (st != ST_OK) {
        cli_metrics_stop(m);
        return st;
    }
    *port_p = mx_http_port(m->srv.http);
    *m_p = m;
    return ST_OK;
}

void cli_metrics_lookup(cli_metrics_t *m, uint64_t tokens, uint64_t matched, uint64_t resumable,
                        uint64_t ns)
{
    if (m == NULL) {
        return;
    }
    mx_counter_inc(m->lookups);
    if (matched > 0) {
        mx_counter_inc(m->lookups_hit);
    }
    mx_counter_add(m->tokens, tokens);
    mx_counter_add(m->matched, matched);
    mx_counter_add(m->resumable, resumable);
    mx_histogram_observe(m->latency, ns);
}

void cli_metrics_bytes(cli_metrics_t *m, uint64_t fetched, uint64_t stored)
{
    if (m != NULL) {
        mx_counter_add(m->fetched, fetched);
        mx_counter_add(m->stored, stored);
    }
}

void cli_metrics_stop(cli_metrics_t *m)
{
    if (m != NULL) {
        mx_server_stop(&m->srv);
        free(m);
    }
}
