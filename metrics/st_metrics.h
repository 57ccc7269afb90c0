/*
 * st_metrics.h - the metrics registry of strata: counters, gauges and
 * histograms with labels, exposed as Prometheus text (format 0.0.4) and as
 * the JSON that /stats and the dashboard read (docs/observability.md).
 *
 * A module registers a family once (name, help, type, label names, buckets)
 * and asks for the child of one label set once, at set-up or on first use.
 * The child pointer stays valid until st_metrics_destroy(), so the hot path is
 * one relaxed atomic add on a pointer the caller holds:
 *
 *   st_metric_family_t *lookups;
 *   st_counter_t *c;
 *   st_metrics_register(reg, &(st_metric_desc_t){.name = "strata_lookups_total",
 *                       .help = "Lookups served.", .type = ST_METRIC_COUNTER,
 *                       .label_names = ST_LABELS("namespace", "kind"), .n_labels = 2},
 *                       &lookups);
 *   st_metrics_counter(lookups, ST_LABELS("default", "KV"), &c);
 *   ...
 *   st_counter_inc(c);
 *
 * Thread safety: every function may be called from any thread. Registering a
 * family and creating a child take the registry's lock; the st_counter_*,
 * st_gauge_* and st_histogram_observe* functions take no lock and never
 * allocate.
 */
#ifndef STRATA_ST_METRICS_H
#define STRATA_ST_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "strata/status.h"

/* Most labels one family may have. */
#define ST_METRICS_MAX_LABELS  8
/* Most finite buckets one histogram family may have. */
#define ST_METRICS_MAX_BUCKETS 64

/* A compound literal array of label names or values: ST_LABELS("ns", "kind"). */
#define ST_LABELS(...) ((const char *const[]){__VA_ARGS__})

typedef enum st_metric_type {
    ST_METRIC_COUNTER = 1,   /* monotonic uint64; the name must end in _total */
    ST_METRIC_GAUGE = 2,     /* a double that goes up and down */
    ST_METRIC_GAUGE_INT = 3, /* an int64 that goes up and down (exposed as a gauge) */
    ST_METRIC_HISTOGRAM = 4  /* fixed buckets; _bucket{le=...}, _sum and _count */
} st_metric_type_t;

typedef struct st_metrics st_metrics_t;
typedef struct st_metric_family st_metric_family_t;

/* One counter of one label set. Use only through st_counter_*(). */
typedef struct st_counter {
    _Atomic uint64_t value;
} st_counter_t;

/* One gauge of one label set: the bits of a double, or an int64. */
typedef struct st_gauge {
    _Atomic uint64_t bits;
    int is_double;
} st_gauge_t;

/*
 * One histogram of one label set. Values are observed in raw integer units
 * (nanoseconds, bytes); the exposed value is raw × the family's scale, so the
 * hot path is two atomic adds. counts[i] counts the observations in bucket i
 * alone (not cumulative); counts[n_bounds] is the +Inf bucket.
 */
typedef struct st_histogram {
    const uint64_t *bounds; /* upper bounds in raw units, ascending */
    uint32_t n_bounds;
    double scale;
    _Atomic uint64_t sum;
    _Atomic uint64_t *counts; /* n_bounds + 1 */
} st_histogram_t;

/* What st_metrics_register() needs to know about a family. */
typedef struct st_metric_desc {
    const char *name; /* Prometheus metric name, e.g. "strata_lookups_total" */
    const char *help; /* one line of help text (escaped on output) */
    st_metric_type_t type;
    const char *const *label_names; /* n_labels names; NULL when n_labels is 0 */
    size_t n_labels;
    const double *buckets; /* histograms: finite upper bounds, strictly ascending */
    size_t n_buckets;
    double scale; /* histograms: exposed value = raw × scale; 0 means 1 */
} st_metric_desc_t;

/*
 * A collect hook, called at the start of every scrape (/metrics, /stats and
 * st_metrics_write_text()), so that a module can set gauges from state it
 * owns (occupancy, leases active). Hooks run one scrape at a time, in the
 * order they were added, without the registry lock held: they may set gauges
 * and create children.
 */
typedef void (*st_metrics_collect_fn)(st_metrics_t *metrics, void *arg);

/*
 * Latency buckets, in seconds, from 20 µs to 5 s (1-2-5 steps), for every
 * per-call latency histogram of the project (scale 1e-9: observe nanoseconds).
 */
extern const double st_metrics_latency_buckets[];
extern const size_t st_metrics_latency_buckets_n;

/* ---- registry --------------------------------------------------------------- */

/*
 * Creates an empty registry into *metrics_p, with the gauge
 * strata_build_info{version,commit} = 1 already registered.
 * Returns ST_OK or ST_ERR_NOMEM (*metrics_p untouched).
 */
st_status_t st_metrics_create(st_metrics_t **metrics_p);

/*
 * Frees the registry, its families and children. Every family and child
 * pointer taken from it becomes invalid. The caller makes sure nothing uses
 * it any more (stop the HTTP server first). NULL is a no-op.
 */
void st_metrics_destroy(st_metrics_t *metrics);

/*
 * Registers a family and writes it to *family_p. The name must match
 * [a-zA-Z_:][a-zA-Z0-9_:]*, a label name [a-zA-Z_][a-zA-Z0-9_]* not starting
 * with "__"; counters must end in "_total" and other types must not;
 * histograms may not use the label "le" nor end in _bucket, _sum or _count.
 * Returns:
 *   ST_OK
 *   ST_ERR_INVALID  a name, label, type, bucket list or scale is wrong (logged, naming it)
 *   ST_ERR_EXISTS   a family of that name is already registered
 *   ST_ERR_NOMEM    allocation failed
 * *family_p is written only on ST_OK; the family lives as long as the registry.
 */
st_status_t st_metrics_register(st_metrics_t *metrics, const st_metric_desc_t *desc,
                                st_metric_family_t **family_p);

/* Returns the registered family of that name, or NULL. Takes the lock. */
st_metric_family_t *st_metrics_find(st_metrics_t *metrics, const char *name);

/*
 * Returns in *counter_p the child of family for the label values (n_labels
 * strings, valid UTF-8; NULL when the family has no labels), created at zero
 * on first use. The pointer stays valid until st_metrics_destroy(): cache it.
 * Returns ST_OK, ST_ERR_INVALID (wrong family type, NULL or non-UTF-8 value),
 * or ST_ERR_NOMEM. The same functions exist for gauges and histograms.
 */
st_status_t st_metrics_counter(st_metric_family_t *family, const char *const *values,
                               st_counter_t **counter_p);
st_status_t st_metrics_gauge(st_metric_family_t *family, const char *const *values,
                             st_gauge_t **gauge_p);
st_status_t st_metrics_histogram(st_metric_family_t *family, const char *const *values,
                                 st_histogram_t **histogram_p);

/*
 * Adds a collect hook (see st_metrics_collect_fn). arg is passed back as is.
 * Returns ST_OK or ST_ERR_NOMEM.
 */
st_status_t st_metrics_add_collector(st_metrics_t *metrics, st_metrics_collect_fn fn, void *arg);

/* ---- hot path: no lock, no allocation ------------------------------------- */

static inline void st_counter_add(st_counter_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

static inline void st_counter_inc(st_counter_t *c)
{
    atomic_fetch_add_explicit(&c->value, 1, memory_order_relaxed);
}

static inline uint64_t st_counter_get(const st_counter_t *c)
{
    return atomic_load_explicit(&c->value, memory_order_relaxed);
}

static inline uint64_t st_metrics_dbits_(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
}

static inline double st_metrics_bitsd_(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

/* Converts to int64 without undefined behaviour: NaN is 0, out of range saturates. */
static inline int64_t st_metrics_d2i_(double v)
{
    if (!(v == v)) {
        return 0;
    }
    if (v >= 9.2e18) {
        return INT64_MAX;
    }
    if (v <= -9.2e18) {
        return INT64_MIN;
    }
    return (int64_t)v;
}

/* Sets the gauge (an integer gauge keeps the value truncated toward zero). */
static inline void st_gauge_set(st_gauge_t *g, double v)
{
    uint64_t bits = g->is_double ? st_metrics_dbits_(v) : (uint64_t)st_metrics_d2i_(v);
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}

static inline void st_gauge_set_int(st_gauge_t *g, int64_t v)
{
    uint64_t bits = g->is_double ? st_metrics_dbits_((double)v) : (uint64_t)v;
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}

/* Adds delta (may be negative): a fetch-add, or a CAS loop on a double gauge. */
static inline void st_gauge_add_int(st_gauge_t *g, int64_t delta)
{
    if (!g->is_double) {
        atomic_fetch_add_explicit(&g->bits, (uint64_t)delta, memory_order_relaxed);
        return;
    }
    uint64_t old = atomic_load_explicit(&g->bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(
        &g->bits, &old, st_metrics_dbits_(st_metrics_bitsd_(old) + (double)delta),
        memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Returns the gauge's value as a double. */
static inline double st_gauge_get(const st_gauge_t *g)
{
    uint64_t bits = atomic_load_explicit(&g->bits, memory_order_relaxed);
    return g->is_double ? st_metrics_bitsd_(bits) : (double)(int64_t)bits;
}

/* Records one observation of raw units (nanoseconds, bytes): two atomic adds. */
void st_histogram_observe(st_histogram_t *h, uint64_t raw);

/* Records one observation given in exposed units (seconds): value / scale, rounded. */
void st_histogram_observe_value(st_histogram_t *h, double value);

/* ---- exposition --------------------------------------------------------------- */

/* A growable text buffer. Zero-initialise; free data with st_mbuf_free(). */
typedef struct st_mbuf {
    char *data; /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
    st_status_t err; /* the first failure (ST_ERR_NOMEM); appends stop after it */
} st_mbuf_t;

void st_mbuf_append(st_mbuf_t *b, const char *s, size_t n);
void st_mbuf_puts(st_mbuf_t *b, const char *s);
void st_mbuf_printf(st_mbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void st_mbuf_free(st_mbuf_t *b);

/*
 * Runs the collect hooks, then appends the Prometheus text exposition
 * (format 0.0.4) of every family to out: families sorted by name, children
 * sorted by label values, # HELP and # TYPE for each. Families without
 * children are written with their HELP and TYPE only.
 * Returns ST_OK or ST_ERR_NOMEM (out then holds a partial text).
 */
st_status_t st_metrics_write_text(st_metrics_t *metrics, st_mbuf_t *out);

/*
 * Formats v the way Prometheus reads it: the shortest text that parses back
 * to the same double, "+Inf", "-Inf" or "NaN". buf holds at least 32 bytes.
 */
void st_metrics_format_double(double v, char *buf, size_t size);

/* ---- JSON (for /stats and its hooks) ------------------------------------------ */

/*
 * A small streaming JSON writer over an st_mbuf_t. It inserts commas itself:
 * call st_json_key() before each member of an object. Non-finite numbers are
 * written as null; strings are escaped.
 */
typedef struct st_json {
    st_mbuf_t *out;
    int depth;
    uint8_t need_comma[32];
} st_json_t;

void st_json_init(st_json_t *j, st_mbuf_t *out);
void st_json_begin_object(st_json_t *j);
void st_json_end_object(st_json_t *j);
void st_json_begin_array(st_json_t *j);
void st_json_end_array(st_json_t *j);
void st_json_key(st_json_t *j, const char *key);
void st_json_string(st_json_t *j, const char *s);
void st_json_uint(st_json_t *j, uint64_t v);
void st_json_int(st_json_t *j, int64_t v);
void st_json_double(st_json_t *j, double v);
void st_json_bool(st_json_t *j, int v);
void st_json_null(st_json_t *j);

/*
 * A /stats hook: writes extra members into the top-level object (call
 * st_json_key() then a value, as many times as it likes). Runs after the
 * collect hooks, without the registry lock held.
 */
typedef void (*st_metrics_stats_fn)(st_json_t *j, void *arg);

/* What st_metrics_write_stats() puts besides the registry. */
typedef struct st_metrics_stats_opts {
    const char *node;       /* this node's name ("" if NULL) */
    const char *peers;      /* "host:port,host:port" of other nodes' /stats, or NULL */
    st_metrics_stats_fn fn; /* optional hook */
    void *arg;
} st_metrics_stats_opts_t;

/*
 * Runs the collect hooks and appends the /stats JSON document (schema 1 of
 * docs/observability.md) to out. Returns ST_OK or ST_ERR_NOMEM.
 */
st_status_t st_metrics_write_stats(st_metrics_t *metrics, const st_metrics_stats_opts_t *opts,
                                   st_mbuf_t *out);

#endif /* STRATA_ST_METRICS_H */
