/*
 * stats.c - the /stats JSON document (schema 1, docs/observability.md).
 *
 * Built from the registry: "counters" sums every counter family over its
 * label sets (name without the strata_ prefix), "gauges" does the same for
 * gauges, "histograms" gives count and sum, and "tiers" regroups the gauges
 * strata_tier_used_bytes and strata_tier_limit_bytes by their tier label.
 * A module's hook may add its own members after these.
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "mx_internal.h"

#define MX_MAX_TIERS 8

typedef struct mx_tier {
    const char *name;
    double used;
    double limit;
} mx_tier_t;

static const char *mx_short_name(const char *name)
{
    return strncmp(name, "strata_", 7) == 0 ? name + 7 : name;
}

static double mx_child_value(const mx_metric_family_t *f, const mx_child_t *c)
{
    if (f->type == MX_METRIC_COUNTER) {
        return (double)mx_counter_get(&c->u.counter);
    }
    return mx_gauge_get(&c->u.gauge);
}

static uint64_t mx_hist_count(const mx_metric_family_t *f, const mx_child_t *c)
{
    uint64_t n = 0;
    for (size_t i = 0; i <= f->n_bounds; i++) {
        n += atomic_load_explicit(&c->u.hist.counts[i], memory_order_relaxed);
    }
    return n;
}

/* Adds the per-tier values of a tier gauge family into tiers[]. Lock held. */
static void mx_do_collect_tiers(const mx_metric_family_t *f, int is_limit, mx_tier_t *tiers,
                                size_t *n_tiers)
{
    size_t li = f->n_labels;
    for (size_t i = 0; i < f->n_labels; i++) {
        if (strcmp(f->label_names[i], "tier") == 0) {
            li = i;
        }
    }
    if (li == f->n_labels || f->type == MX_METRIC_COUNTER || f->type == MX_METRIC_HISTOGRAM) {
        return;
    }
    for (size_t i = 0; i < f->n_children; i++) {
        const char *tier = f->children[i]->values[li];
        size_t t = 0;
        while (t < *n_tiers && strcmp(tiers[t].name, tier) != 0) {
            t++;
        }
        if (t == *n_tiers) {
            if (*n_tiers == MX_MAX_TIERS) {
                continue;
            }
            tiers[t] = (mx_tier_t){.name = tier};
            (*n_tiers)++;
        }
        double v = mx_child_value(f, f->children[i]);
        if (is_limit) {
            tiers[t].limit += v;
        } else {
            tiers[t].used += v;
        }
    }
}

/* Writes counters, gauges, histograms and tiers. Lock held. */
static void mx_do_write_registry(mx_metrics_t *m, mx_json_t *j)
{
    static const mx_metric_type_t order[3] = {MX_METRIC_COUNTER, MX_METRIC_GAUGE,
                                              MX_METRIC_HISTOGRAM};
    static const char *const keys[3] = {"counters", "gauges", "histograms"};
    for (int k = 0; k < 3; k++) {
        mx_json_key(j, keys[k]);
        mx_json_begin_object(j);
        for (size_t i = 0; i < m->n_fams; i++) {
            const mx_metric_family_t *f = m->fams[i];
            mx_metric_type_t t = f->type == MX_METRIC_GAUGE_INT ? MX_METRIC_GAUGE : f->type;
            if (t != order[k] || strcmp(f->name, "strata_build_info") == 0) {
                continue;
            }
            mx_json_key(j, mx_short_name(f->name));
            if (t == MX_METRIC_HISTOGRAM) {
                uint64_t count = 0, sum = 0;
                for (size_t c = 0; c < f->n_children; c++) {
                    count += mx_hist_count(f, f->children[c]);
                    sum += atomic_load_explicit(&f->children[c]->u.hist.sum, memory_order_relaxed);
                }
                mx_json_begin_object(j);
                mx_json_key(j, "count");
                mx_json_uint(j, count);
                mx_json_key(j, "sum");
                mx_json_double(j, mx_scaled(sum, f->scale));
                mx_json_end_object(j);
            } else if (f->type == MX_METRIC_COUNTER) {
                uint64_t sum = 0;
                for (size_t c = 0; c < f->n_children; c++) {
                    sum += mx_counter_get(&f->children[c]->u.counter);
                }
                mx_json_uint(j, sum);
            } else {
                double sum = 0;
                for (size_t c = 0; c < f->n_children; c++) {
                    sum += mx_gauge_get(&f->children[c]->u.gauge);
                }
                mx_json_double(j, sum);
            }
        }
        mx_json_end_object(j);
    }

    mx_tier_t tiers[MX_MAX_TIERS];
    size_t n_tiers = 0;
    for (size_t i = 0; i < m->n_fams; i++) {
        const mx_metric_family_t *f = m->fams[i];
        if (strcmp(f->name, "strata_tier_used_bytes") == 0) {
            mx_do_collect_tiers(f, 0, tiers, &n_tiers);
        } else if (strcmp(f->name, "strata_tier_limit_bytes") == 0) {
            mx_do_collect_tiers(f, 1, tiers, &n_tiers);
        }
    }
    mx_json_key(j, "tiers");
    mx_json_begin_object(j);
    for (size_t t = 0; t < n_tiers; t++) {
        mx_json_key(j, tiers[t].name);
        mx_json_begin_object(j);
        mx_json_key(j, "used_bytes");
        mx_json_double(j, tiers[t].used);
        mx_json_key(j, "limit_bytes");
        mx_json_double(j, tiers[t].limit);
        mx_json_end_object(j);
    }
    mx_json_end_object(j);
}

/* Writes "peers": the comma-separated list split into strings. */
static void mx_write_peers(mx_json_t *j, const char *peers)
{
    mx_json_key(j, "peers");
    mx_json_begin_array(j);
    const char *p = peers ? peers : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        while (n > 0 && (*p == ' ')) {
            p++, n--;
        }
        while (n > 0 && p[n - 1] == ' ') {
            n--;
        }
        if (n > 0 && n < 256) {
            char one[256];
            memcpy(one, p, n);
            one[n] = '\0';
            mx_json_string(j, one);
        }
        p += n;
        while (*p == ' ') {
            p++;
        }
        if (*p == ',') {
            p++;
        }
    }
    mx_json_end_array(j);
}

st_status_t mx_write_stats(mx_metrics_t *m, const mx_stats_opts_t *opts, mx_mbuf_t *out)
{
    static const mx_stats_opts_t none = {0};
    if (opts == NULL) {
        opts = &none;
    }
    uint64_t now_ms = cm_real_ms();

    mx_json_t j;
    mx_json_init(&j, out);
    pthread_mutex_lock(&m->scrape_lock);
    mx_run_collectors(m);
    mx_json_begin_object(&j);
    mx_json_key(&j, "schema");
    mx_json_uint(&j, 1);
    mx_json_key(&j, "node");
    mx_json_string(&j, opts->node ? opts->node : "");
    mx_json_key(&j, "version");
    mx_json_string(&j, STRATA_VERSION);
    mx_json_key(&j, "commit");
    mx_json_string(&j, STRATA_COMMIT);
    mx_json_key(&j, "time_ms");
    mx_json_uint(&j, now_ms);
    mx_write_peers(&j, opts->peers);
    pthread_mutex_lock(&m->lock);
    mx_do_write_registry(m, &j);
    pthread_mutex_unlock(&m->lock);
    if (opts->fn != NULL) {
        opts->fn(&j, opts->arg);
    }
    mx_json_end_object(&j);
    pthread_mutex_unlock(&m->scrape_lock);
    return out->err;
}
