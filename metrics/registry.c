/*
 * registry.c - metric families, their label sets, and the hot-path updates.
 *
 * Families are kept sorted by name and each family's children sorted by their
 * label values, so exposition is deterministic and finding a child is a binary
 * search. Children are allocated once and never move: the pointers handed out
 * stay valid until mx_destroy().
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mx_internal.h"
#include "log.h"
#include "utf8.h"

const double mx_latency_buckets[] = {20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3,
                                     20e-3, 50e-3, 0.1,    0.2,    0.5,    1.0,  2.0,  5.0};
const size_t mx_latency_buckets_n = sizeof(mx_latency_buckets) / sizeof(mx_latency_buckets[0]);

/* ---- validation ------------------------------------------------------------ */

static int mx_is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int mx_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int mx_valid_metric_name(const char *s)
{
    if (s == NULL || !(mx_is_alpha(s[0]) || s[0] == ':')) {
        return 0;
    }
    for (const char *p = s + 1; *p; p++) {
        if (!(mx_is_alpha(*p) || mx_is_digit(*p) || *p == ':')) {
            return 0;
        }
    }
    return 1;
}

static int mx_valid_label_name(const char *s)
{
    if (s == NULL || !mx_is_alpha(s[0]) || strncmp(s, "__", 2) == 0) {
        return 0;
    }
    for (const char *p = s + 1; *p; p++) {
        if (!(mx_is_alpha(*p) || mx_is_digit(*p))) {
            return 0;
        }
    }
    return 1;
}

static int mx_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Checks desc; logs and returns ST_ERR_INVALID naming what is wrong. */
static st_status_t mx_check_desc(const mx_metric_desc_t *d)
{
    const char *name = d->name ? d->name : "(null)";
    if (!mx_valid_metric_name(d->name)) {
        lg_error("invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*) metric=%s", name);
        return ST_ERR_INVALID;
    }
    if (d->type < MX_METRIC_COUNTER || d->type > MX_METRIC_HISTOGRAM) {
        lg_error("invalid metric type metric=%s type=%d", name, (int)d->type);
        return ST_ERR_INVALID;
    }
    if (d->type == MX_METRIC_COUNTER && !mx_ends_with(name, "_total")) {
        lg_error("counter name must end in _total metric=%s", name);
        return ST_ERR_INVALID;
    }
    if (d->type != MX_METRIC_COUNTER && mx_ends_with(name, "_total")) {
        lg_error("only counter names may end in _total metric=%s", name);
        return ST_ERR_INVALID;
    }
    if (d->type == MX_METRIC_HISTOGRAM &&
        (mx_ends_with(name, "_bucket") || mx_ends_with(name, "_sum") ||
         mx_ends_with(name, "_count"))) {
        lg_error("histogram name may not end in _bucket, _sum or _count metric=%s", name);
        return ST_ERR_INVALID;
    }
    if (d->n_labels > MX_MAX_LABELS || (d->n_labels > 0 && d->label_names == NULL)) {
        lg_error("invalid label list metric=%s labels=%zu max=%d", name, d->n_labels,
                 MX_MAX_LABELS);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < d->n_labels; i++) {
        const char *l = d->label_names[i];
        if (!mx_valid_label_name(l)) {
            lg_error("invalid label name (want [a-zA-Z_][a-zA-Z0-9_]*, no leading __) "
                     "metric=%s label=%s",
                     name, l ? l : "(null)");
            return ST_ERR_INVALID;
        }
        if (d->type == MX_METRIC_HISTOGRAM && strcmp(l, "le") == 0) {
            lg_error("histogram may not use the label le metric=%s", name);
            return ST_ERR_INVALID;
        }
        for (size_t k = 0; k < i; k++) {
            if (strcmp(l, d->label_names[k]) == 0) {
                lg_error("duplicate label name metric=%s label=%s", name, l);
                return ST_ERR_INVALID;
            }
        }
    }
    if (d->type != MX_METRIC_HISTOGRAM) {
        return ST_OK;
    }
    if (d->n_buckets == 0 || d->n_buckets > MX_MAX_BUCKETS || d->buckets == NULL) {
        lg_error("histogram needs 1 to %d buckets metric=%s buckets=%zu", MX_MAX_BUCKETS, name,
                 d->n_buckets);
        return ST_ERR_INVALID;
    }
    if (!(d->scale >= 0) || !isfinite(d->scale)) {
        lg_error("histogram scale must be a finite positive number metric=%s", name);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < d->n_buckets; i++) {
        if (!isfinite(d->buckets[i]) || d->buckets[i] < 0 ||
            (i > 0 && d->buckets[i] <= d->buckets[i - 1])) {
            lg_error("histogram buckets must be finite, non-negative and strictly ascending "
                     "metric=%s bucket=%zu",
                     name, i);
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* Converts an exposed bound to raw units: raw <= result exactly when raw × scale <= bound. */
static uint64_t mx_bound_raw(double bound, double scale)
{
    double r = bound / scale;
    double near = nearbyint(r);
    if (fabs(r - near) <= 1e-9 * (near > 1 ? near : 1)) {
        r = near;
    }
    if (r >= 1.8e19) {
        return UINT64_MAX;
    }
    return (uint64_t)floor(r);
}

/* ---- families ---------------------------------------------------------------- */

static void mx_family_free(mx_metric_family_t *f)
{
    if (f == NULL) {
        return;
    }
    for (size_t i = 0; i < f->n_children; i++) {
        free(f->children[i]);
    }
    free(f->children);
    for (size_t i = 0; i < f->n_labels; i++) {
        free(f->label_names[i]);
    }
    free(f->bounds_raw);
    free(f->bounds);
    free(f->help);
    free(f->name);
    free(f);
}

static mx_metric_family_t *mx_family_new(const mx_metric_desc_t *d)
{
    mx_metric_family_t *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return NULL;
    }
    f->type = d->type;
    f->name = strdup(d->name);
    f->help = strdup(d->help ? d->help : "");
    if (f->name == NULL || f->help == NULL) {
        goto err_free;
    }
    for (size_t i = 0; i < d->n_labels; i++) {
        f->label_names[i] = strdup(d->label_names[i]);
        if (f->label_names[i] == NULL) {
            goto err_free;
        }
        f->n_labels = i + 1;
    }
    if (d->type == MX_METRIC_HISTOGRAM) {
        f->scale = d->scale > 0 ? d->scale : 1.0;
        f->bounds = malloc(d->n_buckets * sizeof(double));
        f->bounds_raw = malloc(d->n_buckets * sizeof(uint64_t));
        if (f->bounds == NULL || f->bounds_raw == NULL) {
            goto err_free;
        }
        for (size_t i = 0; i < d->n_buckets; i++) {
            f->bounds[i] = d->buckets[i];
            f->bounds_raw[i] = mx_bound_raw(d->buckets[i], f->scale);
        }
        f->n_bounds = d->n_buckets;
    }
    return f;

err_free:
    mx_family_free(f);
    return NULL;
}

/* Index of the first family whose name is >= name. Lock held. */
static size_t mx_do_family_pos(mx_metrics_t *m, const char *name)
{
    size_t lo = 0, hi = m->n_fams;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m->fams[mid]->name, name) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* Inserts ptr at index pos of a pointer array, growing it. Returns 0 or -1. */
static int mx_insert_ptr(void ***arr, size_t *n, size_t *cap, size_t pos, void *ptr)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        void **na = realloc(*arr, ncap * sizeof(void *));
        if (na == NULL) {
            return -1;
        }
        *arr = na;
        *cap = ncap;
    }
    memmove(*arr + pos + 1, *arr + pos, (*n - pos) * sizeof(void *));
    (*arr)[pos] = ptr;
    (*n)++;
    return 0;
}

st_status_t mx_register(mx_metrics_t *m, const mx_metric_desc_t *desc,
                        mx_metric_family_t **family_p)
{
    if (m == NULL || desc == NULL || family_p == NULL) {
        lg_error("mx_register: NULL argument");
        return ST_ERR_INVALID;
    }
    st_status_t st = mx_check_desc(desc);
    if (st != ST_OK) {
        return st;
    }
    mx_metric_family_t *f = mx_family_new(desc);
    if (f == NULL) {
        lg_error("out of memory registering metric metric=%s", desc->name);
        return ST_ERR_NOMEM;
    }
    f->owner = m;
    pthread_mutex_lock(&m->lock);
    size_t pos = mx_do_family_pos(m, f->name);
    if (pos < m->n_fams && strcmp(m->fams[pos]->name, f->name) == 0) {
        st = ST_ERR_EXISTS;
    } else if (mx_insert_ptr((void ***)&m->fams, &m->n_fams, &m->cap_fams, pos, f) != 0) {
        st = ST_ERR_NOMEM;
    }
    pthread_mutex_unlock(&m->lock);
    if (st != ST_OK) {
        if (st == ST_ERR_EXISTS) {
            lg_error("metric registered twice metric=%s", f->name);
        } else {
            lg_error("out of memory registering metric metric=%s", f->name);
        }
        mx_family_free(f);
        return st;
    }
    *family_p = f;
    return ST_OK;
}

mx_metric_family_t *mx_find(mx_metrics_t *m, const char *name)
{
    mx_metric_family_t *f = NULL;
    pthread_mutex_lock(&m->lock);
    size_t pos = mx_do_family_pos(m, name);
    if (pos < m->n_fams && strcmp(m->fams[pos]->name, name) == 0) {
        f = m->fams[pos];
    }
    pthread_mutex_unlock(&m->lock);
    return f;
}

/* ---- children ------------------------------------------------------------------ */

static int mx_values_cmp(const mx_metric_family_t *f, char *const *a, const char *const *b)
{
    for (size_t i = 0; i < f->n_labels; i++) {
        int c = strcmp(a[i], b[i]);
        if (c != 0) {
            return c;
        }
    }
    return 0;
}

/* Allocates a child at zero, with its values and histogram counts in one block. */
static mx_child_t *mx_child_new(mx_metric_family_t *f, const char *const *values)
{
    size_t head = (sizeof(mx_child_t) + 63) & ~(size_t)63;
    size_t ncounts = f->type == MX_METRIC_HISTOGRAM ? f->n_bounds + 1 : 0;
    size_t vptrs = f->n_labels * sizeof(char *);
    size_t vlen = 0;
    for (size_t i = 0; i < f->n_labels; i++) {
        vlen += strlen(values[i]) + 1;
    }
    void *mem = NULL;
    if (posix_memalign(&mem, 64, head + ncounts * sizeof(uint64_t) + vptrs + vlen) != 0) {
        return NULL;
    }
    mx_child_t *c = mem;
    memset(c, 0, sizeof(*c));
    _Atomic uint64_t *counts = (_Atomic uint64_t *)((char *)mem + head);
    for (size_t i = 0; i < ncounts; i++) {
        atomic_init(&counts[i], 0);
    }
    c->values = (char **)((char *)mem + head + ncounts * sizeof(uint64_t));
    char *text = (char *)c->values + vptrs;
    for (size_t i = 0; i < f->n_labels; i++) {
        size_t n = strlen(values[i]) + 1;
        memcpy(text, values[i], n);
        c->values[i] = text;
        text += n;
    }
    switch (f->type) {
    case MX_METRIC_COUNTER: atomic_init(&c->u.counter.value, 0); break;
    case MX_METRIC_GAUGE:
        c->u.gauge.is_double = 1;
        atomic_init(&c->u.gauge.bits, mx_dbits_(0.0));
        break;
    case MX_METRIC_GAUGE_INT: atomic_init(&c->u.gauge.bits, 0); break;
    case MX_METRIC_HISTOGRAM:
        c->u.hist.bounds = f->bounds_raw;
        c->u.hist.n_bounds = (uint32_t)f->n_bounds;
        c->u.hist.scale = f->scale;
        c->u.hist.counts = counts;
        atomic_init(&c->u.hist.sum, 0);
        break;
    }
    return c;
}

/* Finds or creates the child of family f for values. */
static st_status_t mx_child_get(mx_metric_family_t *f, const char *const *values,
                                mx_child_t **child_p)
{
    static const char *const no_values[1] = {NULL};
    if (f->n_labels == 0) {
        values = no_values;
    } else if (values == NULL) {
        lg_error("label values missing metric=%s labels=%zu", f->name, f->n_labels);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < f->n_labels; i++) {
        if (values[i] == NULL || utf8_bad_byte(values[i], 0) >= 0) {
            lg_error("label value is NULL or not UTF-8 metric=%s label=%s", f->name,
                     f->label_names[i]);
            return ST_ERR_INVALID;
        }
    }
    mx_metrics_t *m = f->owner;
    st_status_t st = ST_OK;
    pthread_mutex_lock(&m->lock);
    size_t lo = 0, hi = f->n_children;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = mx_values_cmp(f, f->children[mid]->values, values);
        if (c == 0) {
            *child_p = f->children[mid];
            goto out_unlock;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    mx_child_t *c = mx_child_new(f, values);
    if (c == NULL ||
        mx_insert_ptr((void ***)&f->children, &f->n_children, &f->cap_children, lo, c) != 0) {
        free(c);
        lg_error("out of memory creating a label set metric=%s children=%zu", f->name,
                 f->n_children);
        st = ST_ERR_NOMEM;
        goto out_unlock;
    }
    *child_p = c;
out_unlock:
    pthread_mutex_unlock(&m->lock);
    return st;
}

static st_status_t mx_child_typed(mx_metric_family_t *f, const char *const *values, int want,
                                  mx_child_t **child_p)
{
    if (f == NULL || child_p == NULL) {
        lg_error("metric child: NULL argument");
        return ST_ERR_INVALID;
    }
    int ok = want == MX_METRIC_GAUGE
                 ? (f->type == MX_METRIC_GAUGE || f->type == MX_METRIC_GAUGE_INT)
                 : (int)f->type == want;
    if (!ok) {
        lg_error("metric used as the wrong type metric=%s type=%d wanted=%d", f->name, (int)f->type,
                 want);
        return ST_ERR_INVALID;
    }
    return mx_child_get(f, values, child_p);
}

st_status_t mx_counter(mx_metric_family_t *f, const char *const *values, mx_counter_t **counter_p)
{
    mx_child_t *c;
    st_status_t st = mx_child_typed(f, values, MX_METRIC_COUNTER, &c);
    if (st == ST_OK) {
        *counter_p = &c->u.counter;
    }
    return st;
}

st_status_t mx_gauge(mx_metric_family_t *f, const char *const *values, mx_gauge_t **gauge_p)
{
    mx_child_t *c;
    st_status_t st = mx_child_typed(f, values, MX_METRIC_GAUGE, &c);
    if (st == ST_OK) {
        *gauge_p = &c->u.gauge;
    }
    return st;
}

st_status_t mx_histogram(mx_metric_family_t *f, const char *const *values,
                         mx_histogram_t **histogram_p)
{
    mx_child_t *c;
    st_status_t st = mx_child_typed(f, values, MX_METRIC_HISTOGRAM, &c);
    if (st == ST_OK) {
        *histogram_p = &c->u.hist;
    }
    return st;
}

/* ---- hot path -------------------------------------------------------------- */

void mx_histogram_observe(mx_histogram_t *h, uint64_t raw)
{
    uint32_t lo = 0, hi = h->n_bounds;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (raw <= h->bounds[mid]) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    atomic_fetch_add_explicit(&h->counts[lo], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, raw, memory_order_relaxed);
}

void mx_histogram_observe_value(mx_histogram_t *h, double value)
{
    double r = value / h->scale;
    uint64_t raw = 0;
    if (r >= 1.8e19) {
        raw = UINT64_MAX;
    } else if (r > 0) {
        raw = (uint64_t)nearbyint(r);
    }
    mx_histogram_observe(h, raw);
}

/* ---- registry ---------------------------------------------------------------- */

st_status_t mx_create(mx_metrics_t **metrics_p)
{
    mx_metrics_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        lg_error("out of memory creating the metrics registry");
        return ST_ERR_NOMEM;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_mutex_init(&m->scrape_lock, NULL);
    mx_metric_family_t *f;
    mx_gauge_t *g;
    mx_metric_desc_t d = {.name = "strata_build_info",
                          .help = "Build of this process; the value is always 1.",
                          .type = MX_METRIC_GAUGE_INT,
                          .label_names = MX_LABELS("version", "commit"),
                          .n_labels = 2};
    st_status_t st = mx_register(m, &d, &f);
    if (st == ST_OK) {
        st = mx_gauge(f, MX_LABELS(STRATA_VERSION, STRATA_COMMIT), &g);
    }
    if (st != ST_OK) {
        mx_destroy(m);
        return st;
    }
    mx_gauge_set_int(g, 1);
    *metrics_p = m;
    return ST_OK;
}

void mx_destroy(mx_metrics_t *m)
{
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_fams; i++) {
        mx_family_free(m->fams[i]);
    }
    free(m->fams);
    free(m->collectors);
    pthread_mutex_destroy(&m->scrape_lock);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

st_status_t mx_add_collector(mx_metrics_t *m, mx_collect_fn fn, void *arg)
{
    st_status_t st = ST_OK;
    pthread_mutex_lock(&m->lock);
    if (m->n_collectors == m->cap_collectors) {
        size_t ncap = m->cap_collectors ? m->cap_collectors * 2 : 4;
        mx_collector_t *nc = realloc(m->collectors, ncap * sizeof(*nc));
        if (nc == NULL) {
            st = ST_ERR_NOMEM;
            goto out_unlock;
        }
        m->collectors = nc;
        m->cap_collectors = ncap;
    }
    m->collectors[m->n_collectors++] = (mx_collector_t){.fn = fn, .arg = arg};
out_unlock:
    pthread_mutex_unlock(&m->lock);
    if (st != ST_OK) {
        lg_error("out of memory adding a metrics collector");
    }
    return st;
}

void mx_run_collectors(mx_metrics_t *m)
{
    for (size_t i = 0;; i++) {
        pthread_mutex_lock(&m->lock);
        if (i >= m->n_collectors) {
            pthread_mutex_unlock(&m->lock);
            return;
        }
        mx_collector_t c = m->collectors[i];
        pthread_mutex_unlock(&m->lock);
        c.fn(m, c.arg);
    }
}
