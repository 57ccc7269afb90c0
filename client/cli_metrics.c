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

#include "st_log.h"

struct cli_metrics {
    st_metrics_t *reg;
    st_metrics_http_t *http;
    st_metrics_http_files_t files; /* --metrics-tls-cert, -key, --metrics-token-file */
    st_counter_t *lookups, *lookups_hit, *tokens, *matched, *resumable, *fetched, *stored;
    st_histogram_t *latency;
};

static st_status_t cli_metric(cli_metrics_t *m, const char *name, const char *help,
                              st_metric_type_t type, const char *ns, st_counter_t **c,
                              st_histogram_t **h)
{
    st_metric_desc_t d = {0};
    st_metric_family_t *fam;
    static const char *const labels[] = {"namespace"};
    st_status_t st;

    d.name = name;
    d.help = help;
    d.type = type;
    d.label_names = labels;
    d.n_labels = 1;
    if (type == ST_METRIC_HISTOGRAM) {
        d.buckets = st_metrics_latency_buckets;
        d.n_buckets = st_metrics_latency_buckets_n;
        d.scale = 1e-9;
    }
    st = st_metrics_register(m->reg, &d, &fam);
    if (st != ST_OK) {
        return st;
    }
    return c != NULL ? st_metrics_counter(fam, ST_LABELS(ns), c)
                     : st_metrics_histogram(fam, ST_LABELS(ns), h);
}

st_status_t cli_metrics_start(const char *listen, const char *ns, const char *cert, const char *key,
                              const char *token_file, cli_metrics_t **m_p, int *port_p)
{
    cli_metrics_t *m = calloc(1, sizeof(*m));
    st_metrics_http_opts_t opts = {0};
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
    st = st_metrics_create(&m->reg);
#define CLI_C(field, name, help)                                                \
    if (st == ST_OK) {                                                          \
        st = cli_metric(m, name, help, ST_METRIC_COUNTER, ns, &m->field, NULL); \
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
                        ST_METRIC_HISTOGRAM, ns, NULL, &m->latency);
    }
    if (st == ST_OK) {
        opts.bind_addr = host;
        opts.port = (uint16_t)strtol(colon + 1, NULL, 10);
        opts.stats.node = "strata-bench";
        st = st_metrics_http_load(cert, key, token_file, &m->files, &opts);
    }
    if (st == ST_OK) {
        st = st_metrics_http_start(m->reg, &opts, &m->http);
    }
    if (st != ST_OK) {
        cli_metrics_stop(m);
        return st;
    }
    *port_p = st_metrics_http_port(m->http);
    *m_p = m;
    return ST_OK;
}

void cli_metrics_lookup(cli_metrics_t *m, uint64_t tokens, uint64_t matched, uint64_t resumable,
                        uint64_t ns)
{
    if (m == NULL) {
        return;
    }
    st_counter_inc(m->lookups);
    if (matched > 0) {
        st_counter_inc(m->lookups_hit);
    }
    st_counter_add(m->tokens, tokens);
    st_counter_add(m->matched, matched);
    st_counter_add(m->resumable, resumable);
    st_histogram_observe(m->latency, ns);
}

void cli_metrics_bytes(cli_metrics_t *m, uint64_t fetched, uint64_t stored)
{
    if (m != NULL) {
        st_counter_add(m->fetched, fetched);
        st_counter_add(m->stored, stored);
    }
}

void cli_metrics_stop(cli_metrics_t *m)
{
    if (m != NULL) {
        st_metrics_http_stop(m->http);
        st_metrics_http_files_free(&m->files);
        st_metrics_destroy(m->reg);
        free(m);
    }
}
