/*
 * expose.c - the Prometheus text exposition format, version 0.0.4.
 *
 * Per family: "# HELP name text", "# TYPE name type", then one line per
 * sample: name{label="value",...} value. Help text escapes \ and newline;
 * label values escape \, " and newline. Histograms write cumulative
 * name_bucket{...,le="bound"} lines ending with le="+Inf", then name_sum and
 * name_count (equal to the +Inf bucket).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "mx_internal.h"

static const char *mx_type_name(mx_metric_type_t t)
{
    switch (t) {
    case MX_METRIC_COUNTER: return "counter";
    case MX_METRIC_GAUGE:
    case MX_METRIC_GAUGE_INT: return "gauge";
    case MX_METRIC_HISTOGRAM: return "histogram";
    }
    return "untyped";
}

/* Appends s escaped for the exposition format: backslash and newline always, the double quote
 * too in a label value (quote). */
static void mx_escape(mx_mbuf_t *b, const char *s, bool quote)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\') {
            mx_mbuf_append(b, "\\\\", 2);
        } else if (quote && *p == '"') {
            mx_mbuf_append(b, "\\\"", 2);
        } else if (*p == '\n') {
            mx_mbuf_append(b, "\\n", 2);
        } else {
            mx_mbuf_append(b, p, 1);
        }
    }
}

/*
 * Writes name+suffix and the label set of child c, plus le="..." when le is
 * not NULL, then a space.
 */
static void mx_sample_head(mx_mbuf_t *b, const mx_metric_family_t *f, const char *suffix,
                           const mx_child_t *c, const char *le)
{
    mx_mbuf_puts(b, f->name);
    mx_mbuf_puts(b, suffix);
    if (f->n_labels > 0 || le != NULL) {
        mx_mbuf_append(b, "{", 1);
        for (size_t i = 0; i < f->n_labels; i++) {
            if (i > 0) {
                mx_mbuf_append(b, ",", 1);
            }
            mx_mbuf_puts(b, f->label_names[i]);
            mx_mbuf_append(b, "=\"", 2);
            mx_escape(b, c->values[i], true);
            mx_mbuf_append(b, "\"", 1);
        }
        if (le != NULL) {
            mx_mbuf_puts(b, f->n_labels > 0 ? ",le=\"" : "le=\"");
            mx_mbuf_puts(b, le);
            mx_mbuf_append(b, "\"", 1);
        }
        mx_mbuf_append(b, "}", 1);
    }
    mx_mbuf_append(b, " ", 1);
}

static void mx_write_histogram(mx_mbuf_t *b, const mx_metric_family_t *f, const mx_child_t *c)
{
    const mx_histogram_t *h = &c->u.hist;
    char num[40];
    uint64_t cum = 0;
    for (size_t i = 0; i <= f->n_bounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < f->n_bounds) {
            mx_format_double(f->bounds[i], num, sizeof(num));
        }
        mx_sample_head(b, f, "_bucket", c, i < f->n_bounds ? num : "+Inf");
        mx_mbuf_printf(b, "%" PRIu64 "\n", cum);
    }
    double sum = mx_scaled(atomic_load_explicit(&h->sum, memory_order_relaxed), f->scale);
    mx_format_double(sum, num, sizeof(num));
    mx_sample_head(b, f, "_sum", c, NULL);
    mx_mbuf_puts(b, num);
    mx_mbuf_append(b, "\n", 1);
    mx_sample_head(b, f, "_count", c, NULL);
    mx_mbuf_printf(b, "%" PRIu64 "\n", cum);
}

/* Writes one family; metrics->lock held. */
static void mx_do_write_family(mx_mbuf_t *b, const mx_metric_family_t *f)
{
    mx_mbuf_printf(b, "# HELP %s ", f->name);
    mx_escape(b, f->help, false);
    mx_mbuf_printf(b, "\n# TYPE %s %s\n", f->name, mx_type_name(f->type));
    char num[40];
    for (size_t i = 0; i < f->n_children; i++) {
        const mx_child_t *c = f->children[i];
        switch (f->type) {
        case MX_METRIC_COUNTER:
            mx_sample_head(b, f, "", c, NULL);
            mx_mbuf_printf(b, "%" PRIu64 "\n", mx_counter_get(&c->u.counter));
            break;
        case MX_METRIC_GAUGE:
            mx_sample_head(b, f, "", c, NULL);
            mx_format_double(mx_gauge_get(&c->u.gauge), num, sizeof(num));
            mx_mbuf_puts(b, num);
            mx_mbuf_append(b, "\n", 1);
            break;
        case MX_METRIC_GAUGE_INT:
            mx_sample_head(b, f, "", c, NULL);
            mx_mbuf_printf(b, "%" PRId64 "\n",
                           (int64_t)atomic_load_explicit(&c->u.gauge.bits, memory_order_relaxed));
            break;
        case MX_METRIC_HISTOGRAM: mx_write_histogram(b, f, c); break;
        }
    }
}

st_status_t mx_write_text(mx_metrics_t *m, mx_mbuf_t *out)
{
    pthread_mutex_lock(&m->scrape_lock);
    mx_run_collectors(m);
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_fams; i++) {
        mx_do_write_family(out, m->fams[i]);
    }
    pthread_mutex_unlock(&m->lock);
    pthread_mutex_unlock(&m->scrape_lock);
    return out->err;
}
