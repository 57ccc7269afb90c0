/*
 * metrics.h - the metrics registry of strata: counters, gauges and
 * histograms with labels, exposed as Prometheus text (format 0.0.4) and as
 * the JSON that /stats and the dashboard read (docs/observability.md).
 *
 * A module registers a family once (name, help, type, label names, buckets)
 * and asks for the child of one label set once, at set-up or on first use.
 * The child pointer stays valid until mx_destroy(), so the hot path is
 * one relaxed atomic add on a pointer the caller holds:
 *
 *   mx_metric_family_t *lookups;
 *   mx_counter_t *c;
 *   mx_register(reg, &(mx_metric_desc_t){.name = "strata_lookups_total",
 *                       .help = "Lookups served.", .type = MX_METRIC_COUNTER,
 *                       .label_names = MX_LABELS("namespace", "kind"), .n_labels = 2},
 *                       &lookups);
 *   mx_counter(lookups, MX_LABELS("default", "KV"), &c);
 *   ...
 *   mx_counter_inc(c);
 *
 * Thread safety: every function may be called from any thread. Registering a
 * family and creating a child take the registry's lock; the mx_counter_*,
 * mx_gauge_* and mx_histogram_observe* functions take no lock and never
 * allocate.
 */
#ifndef STRATA_METRICS_H
#define STRATA_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "strata/status.h"

/* Most labels one family may have. */
#define MX_MAX_LABELS  8
/* Most finite buckets one histogram family may have. */
#define MX_MAX_BUCKETS 64

/* A compound literal array of label names or values: MX_LABELS("ns", "kind"). */
#define MX_LABELS(...) ((const char *const[]){__VA_ARGS__})

typedef enum mx_metric_type {
    MX_METRIC_COUNTER = 1,   /* monotonic uint64; the name must end in _total */
    MX_METRIC_GAUGE = 2,     /* a double that goes up and down */
    MX_METRIC_GAUGE_INT = 3, /* an int64 that goes up and down (exposed as a gauge) */
    MX_METRIC_HISTOGRAM = 4  /* fixed buckets; _bucket{le=...}, _sum and _count */
} mx_metric_type_t;

typedef struct mx_metrics mx_metrics_t;
typedef struct mx_metric_family mx_metric_family_t;

/* One counter of one label set. Use only through mx_counter_*(). */
typedef struct mx_counter {
    _Atomic uint64_t value;
} mx_counter_t;

/* One gauge of one label set: the bits of a double, or an int64. */
typedef struct mx_gauge {
    _Atomic uint64_t bits;
    int is_double;
} mx_gauge_t;

/*
 * One histogram of one label set. Values are observed in raw integer units
 * (nanoseconds, bytes); the exposed value is raw × the family's scale, so the
 * hot path is two atomic adds. counts[i] counts the observations in bucket i
 * alone (not cumulative); counts[n_bounds] is the +Inf bucket.
 */
typedef struct mx_histogram {
    const uint64_t *bounds; /* upper bounds in raw units, ascending */
    uint32_t n_bounds;
    double scale;
    _Atomic uint64_t sum;
    _Atomic uint64_t *counts; /* n_bounds + 1 */
} mx_histogram_t;

/* What mx_register() needs to know about a family. */
typedef struct mx_metric_desc {
    const char *name; /* Prometheus metric name, e.g. "strata_lookups_total" */
    const char *help; /* one line of help text (escaped on output) */
    mx_metric_type_t type;
    const char *const *label_names; /* n_labels names; NULL when n_labels is 0 */
    size_t n_labels;
    const double *buckets; /* histograms: finite upper bounds, strictly ascending */
    size_t n_buckets;
    double scale; /* histograms: exposed value = raw × scale; 0 means 1 */
} mx_metric_desc_t;

/*
 * A collect hook, called at the start of every scrape (/metrics, /stats and
 * mx_write_text()), so that a module can set gauges from state it
 * owns (occupancy, leases active). Hooks run one scrape at a time, in the
 * order they were added, without the registry lock held: they may set gauges
 * and create children.
 */
typedef void (*mx_collect_fn)(mx_metrics_t *metrics, void *arg);

/*
 * Latency buckets, in seconds, from 20 µs to 5 s (1-2-5 steps), for every
 * per-call latency histogram of the project (scale 1e-9: observe nanoseconds).
 */
extern const double mx_latency_buckets[];
extern const size_t mx_latency_buckets_n;

/* ---- registry --------------------------------------------------------------- */

/*
 * Creates an empty registry into *metrics_p, with the gauge
 * strata_build_info{version,commit} = 1 already registered.
 * Returns ST_OK or ST_ERR_NOMEM (*metrics_p untouched).
 */
st_status_t mx_create(mx_metrics_t **metrics_p);

/*
 * Frees the registry, its families and children. Every family and child
 * pointer taken from it becomes invalid. The caller makes sure nothing uses
 * it any more (stop the HTTP server first). NULL is a no-op.
 */
void mx_destroy(mx_metrics_t *metrics);

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
st_status_t mx_register(mx_metrics_t *metrics, const mx_metric_desc_t *desc,
                        mx_metric_family_t **family_p);

/* Returns the registered family of that name, or NULL. Takes the lock. */
mx_metric_family_t *mx_find(mx_metrics_t *metrics, const char *name);

/*
 * Returns in *counter_p the child of family for the label values (n_labels
 * strings, valid UTF-8; NULL when the family has no labels), created at zero
 * on first use. The pointer stays valid until mx_destroy(): cache it.
 * Returns ST_OK, ST_ERR_INVALID (wrong family type, NULL or non-UTF-8 value),
 * or ST_ERR_NOMEM. The same functions exist for gauges and histograms.
 */
st_status_t mx_counter(mx_metric_family_t *family, const char *const *values,
                       mx_counter_t **counter_p);
st_status_t mx_gauge(mx_metric_family_t *family, const char *const *values, mx_gauge_t **gauge_p);
st_status_t mx_histogram(mx_metric_family_t *family, const char *const *values,
                         mx_histogram_t **histogram_p);

/*
 * Adds a collect hook (see mx_collect_fn). arg is passed back as is.
 * Returns ST_OK or ST_ERR_NOMEM.
 */
st_status_t mx_add_collector(mx_metrics_t *metrics, mx_collect_fn fn, void *arg);

/* ---- hot path: no lock, no allocation ------------------------------------- */

static inline void mx_counter_add(mx_counter_t *c, uint64_t n)
{
    atomic_fetch_add_explicit(&c->value, n, memory_order_relaxed);
}

static inline void mx_counter_inc(mx_counter_t *c)
{
    atomic_fetch_add_explicit(&c->value, 1, memory_order_relaxed);
}

static inline uint64_t mx_counter_get(const mx_counter_t *c)
{
    return atomic_load_explicit(&c->value, memory_order_relaxed);
}

static inline uint64_t mx_dbits_(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
}

static inline double mx_bitsd_(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

/* Converts to int64 without undefined behaviour: NaN is 0, out of range saturates. */
static inline int64_t mx_d2i_(double v)
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
static inline void mx_gauge_set(mx_gauge_t *g, double v)
{
    uint64_t bits = g->is_double ? mx_dbits_(v) : (uint64_t)mx_d2i_(v);
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}

static inline void mx_gauge_set_int(mx_gauge_t *g, int64_t v)
{
    uint64_t bits = g->is_double ? mx_dbits_((double)v) : (uint64_t)v;
    atomic_store_explicit(&g->bits, bits, memory_order_relaxed);
}

/* Adds delta (may be negative): a fetch-add, or a CAS loop on a double gauge. */
static inline void mx_gauge_add_int(mx_gauge_t *g, int64_t delta)
{
    if (!g->is_double) {
        atomic_fetch_add_explicit(&g->bits, (uint64_t)delta, memory_order_relaxed);
        return;
    }
    uint64_t old = atomic_load_explicit(&g->bits, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&g->bits, &old,
                                                  mx_dbits_(mx_bitsd_(old) + (double)delta),
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Returns the gauge's value as a double. */
static inline double mx_gauge_get(const mx_gauge_t *g)
{
    uint64_t bits = atomic_load_explicit(&g->bits, memory_order_relaxed);
    return g->is_double ? mx_bitsd_(bits) : (double)(int64_t)bits;
}

/* Records one observation of raw units (nanoseconds, bytes): two atomic adds. */
void mx_histogram_observe(mx_histogram_t *h, uint64_t raw);

/* Records one observation given in exposed units (seconds): value / scale, rounded. */
void mx_histogram_observe_value(mx_histogram_t *h, double value);

/* ---- exposition --------------------------------------------------------------- */

/* A growable text buffer. Zero-initialise; free data with mx_mbuf_free(). */
typedef struct mx_mbuf {
    char *data; /* NUL-terminated when len > 0 */
    size_t len;
    size_t cap;
    st_status_t err; /* the first failure (ST_ERR_NOMEM); appends stop after it */
} mx_mbuf_t;

void mx_mbuf_append(mx_mbuf_t *b, const char *s, size_t n);
void mx_mbuf_puts(mx_mbuf_t *b, const char *s);
void mx_mbuf_printf(mx_mbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mx_mbuf_free(mx_mbuf_t *b);

/*
 * Runs the collect hooks, then appends the Prometheus text exposition
 * (format 0.0.4) of every family to out: families sorted by name, children
 * sorted by label values, # HELP and # TYPE for each. Families without
 * children are written with their HELP and TYPE only.
 * Returns ST_OK or ST_ERR_NOMEM (out then holds a partial text).
 */
st_status_t mx_write_text(mx_metrics_t *metrics, mx_mbuf_t *out);

/*
 * Formats v the way Prometheus reads it: the shortest text that parses back
 * to the same double, "+Inf", "-Inf" or "NaN". buf holds at least 32 bytes.
 */
void mx_format_double(double v, char *buf, size_t size);

/* ---- JSON (for /stats and its hooks) ------------------------------------------ */

/*
 * A small streaming JSON writer over an mx_mbuf_t. It inserts commas itself:
 * call mx_json_key() before each member of an object. Non-finite numbers are
 * written as null; strings are escaped.
 */
typedef struct mx_json {
    mx_mbuf_t *out;
    int depth;
    uint8_t need_comma[32];
} mx_json_t;

void mx_json_init(mx_json_t *j, mx_mbuf_t *out);
void mx_json_begin_object(mx_json_t *j);
void mx_json_end_object(mx_json_t *j);
void mx_json_begin_array(mx_json_t *j);
void mx_json_end_array(mx_json_t *j);
void mx_json_key(mx_json_t *j, const char *key);
void mx_json_string(mx_json_t *j, const char *s);
void mx_json_uint(mx_json_t *j, uint64_t v);
void mx_json_int(mx_json_t *j, int64_t v);
void mx_json_double(mx_json_t *j, double v);
void mx_json_bool(mx_json_t *j, int v);
void mx_json_null(mx_json_t *j);

/*
 * A /stats hook: writes extra members into the top-level object (call
 * mx_json_key() then a value, as many times as it likes). Runs after the
 * collect hooks, without the registry lock held.
 */
typedef void (*mx_stats_fn)(mx_json_t *j, void *arg);

/* What mx_write_stats() puts besides the registry. */
typedef struct mx_stats_opts {
    const char *node;  /* this node's name ("" if NULL) */
    const char *peers; /* "host:port,host:port" of other nodes' /stats, or NULL */
    mx_stats_fn fn;    /* optional hook */
    void *arg;
} mx_stats_opts_t;

/*
 * Runs the collect hooks and appends the /stats JSON document (schema 1 of
 * docs/observability.md) to out. Returns ST_OK or ST_ERR_NOMEM.
 */
st_status_t mx_write_stats(mx_metrics_t *metrics, const mx_stats_opts_t *opts, mx_mbuf_t *out);

#endif /* STRATA_METRICS_H */
