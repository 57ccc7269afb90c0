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
#include <stdio.h>

#include "mx_internal.h"

static const char *mx_type_name(st_metric_type_t t)
{
    switch (t) {
    case ST_METRIC_COUNTER: return "counter";
    case ST_METRIC_GAUGE:
    case ST_METRIC_GAUGE_INT: return "gauge";
    case ST_METRIC_HISTOGRAM: return "histogram";
    }
    return "untyped";
}

static void mx_escape_help(st_mbuf_t *b, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\') {
            st_mbuf_append(b, "\\\\", 2);
        } else if (*p == '\n') {
            st_mbuf_append(b, "\\n", 2);
        } else {
            st_mbuf_append(b, p, 1);
        }
    }
}

static void mx_escape_label(st_mbuf_t *b, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\') {
            st_mbuf_append(b, "\\\\", 2);
        } else if (*p == '"') {
            st_mbuf_append(b, "\\\"", 2);
        } else if (*p == '\n') {
            st_mbuf_append(b, "\\n", 2);
        } else {
            st_mbuf_append(b, p, 1);
        }
    }
}

/*
 * Writes name+suffix and the label set of child c, plus le="..." when le is
 * not NULL, then a space.
 */
static void mx_sample_head(st_mbuf_t *b, const st_metric_family_t *f, const char *suffix,
                           const mx_child_t *c, const char *le)
{
    st_mbuf_puts(b, f->name);
    st_mbuf_puts(b, suffix);
    if (f->n_labels > 0 || le != NULL) {
        st_mbuf_append(b, "{", 1);
        for (size_t i = 0; i < f->n_labels; i++) {
            if (i > 0) {
                st_mbuf_append(b, ",", 1);
            }
            st_mbuf_puts(b, f->label_names[i]);
            st_mbuf_append(b, "=\"", 2);
            mx_escape_label(b, c->values[i]);
            st_mbuf_append(b, "\"", 1);
        }
        if (le != NULL) {
            st_mbuf_puts(b, f->n_labels > 0 ? ",le=\"" : "le=\"");
            st_mbuf_puts(b, le);
            st_mbuf_append(b, "\"", 1);
        }
        st_mbuf_append(b, "}", 1);
    }
    st_mbuf_append(b, " ", 1);
}

static void mx_write_histogram(st_mbuf_t *b, const st_metric_family_t *f, const mx_child_t *c)
{
    const st_histogram_t *h = &c->u.hist;
    char num[40];
    uint64_t cum = 0;
    for (size_t i = 0; i <= f->n_bounds; i++) {
        cum += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        if (i < f->n_bounds) {
            st_metrics_format_double(f->bounds[i], num, sizeof(num));
        }
        mx_sample_head(b, f, "_bucket", c, i < f->n_bounds ? num : "+Inf");
        st_mbuf_printf(b, "%" PRIu64 "\n", cum);
    }
    double sum = mx_scaled(atomic_load_explicit(&h->sum, memory_order_relaxed), f->scale);
    st_metrics_format_double(sum, num, sizeof(num));
    mx_sample_head(b, f, "_sum", c, NULL);
    st_mbuf_puts(b, num);
    st_mbuf_append(b, "\n", 1);
    mx_sample_head(b, f, "_count", c, NULL);
    st_mbuf_printf(b, "%" PRIu64 "\n", cum);
}

/* Writes one family; metrics->lock held. */
static void mx_do_write_family(st_mbuf_t *b, const st_metric_family_t *f)
{
    st_mbuf_printf(b, "# HELP %s ", f->name);
    mx_escape_help(b, f->help);
    st_mbuf_printf(b, "\n# TYPE %s %s\n", f->name, mx_type_name(f->type));
    char num[40];
    for (size_t i = 0; i < f->n_children; i++) {
        const mx_child_t *c = f->children[i];
        switch (f->type) {
        case ST_METRIC_COUNTER:
            mx_sample_head(b, f, "", c, NULL);
            st_mbuf_printf(b, "%" PRIu64 "\n", st_counter_get(&c->u.counter));
            break;
        case ST_METRIC_GAUGE:
            mx_sample_head(b, f, "", c, NULL);
            st_metrics_format_double(st_gauge_get(&c->u.gauge), num, sizeof(num));
            st_mbuf_puts(b, num);
            st_mbuf_append(b, "\n", 1);
            break;
        case ST_METRIC_GAUGE_INT:
            mx_sample_head(b, f, "", c, NULL);
            st_mbuf_printf(b, "%" PRId64 "\n",
                           (int64_t)atomic_load_explicit(&c->u.gauge.bits, memory_order_relaxed));
            break;
        case ST_METRIC_HISTOGRAM: mx_write_histogram(b, f, c); break;
        }
    }
}

st_status_t st_metrics_write_text(st_metrics_t *m, st_mbuf_t *out)
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
