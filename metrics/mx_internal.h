/*
 * mx_internal.h - the registry's structures, shared by registry.c, expose.c
 * and stats.c. Nothing outside metrics/ includes this file.
 *
 * Lock convention (memcached's): functions named mx_do_*() run with
 * metrics->lock held; the others take it. metrics->scrape_lock serialises
 * whole scrapes (collect hooks, then formatting) and is always taken before
 * metrics->lock.
 */
#ifndef STRATA_MX_INTERNAL_H
#define STRATA_MX_INTERNAL_H

#include <pthread.h>

#include "metrics.h"

/* The build's version and commit (metrics/CMakeLists.txt defines both), in strata_build_info and
 * in /stats. */
#ifndef STRATA_VERSION
#define STRATA_VERSION "unknown"
#endif
#ifndef STRATA_COMMIT
#define STRATA_COMMIT "unknown"
#endif

/* One label set of a family. Allocated once (64-byte aligned), never moved. */
typedef struct mx_child {
    char **values; /* family->n_labels strings, stored after the child */
    union {
        mx_counter_t counter;
        mx_gauge_t gauge;
        mx_histogram_t hist;
    } u;
} mx_child_t;

struct mx_metric_family {
    mx_metrics_t *owner;
    char *name;
    char *help;
    mx_metric_type_t type;
    size_t n_labels;
    char *label_names[MX_MAX_LABELS];
    size_t n_bounds;
    double *bounds;       /* exposed units */
    uint64_t *bounds_raw; /* raw units, for the hot path */
    double scale;
    mx_child_t **children; /* sorted by label values */
    size_t n_children;
    size_t cap_children;
};

typedef struct mx_collector {
    mx_collect_fn fn;
    void *arg;
} mx_collector_t;

struct mx_metrics {
    pthread_mutex_t lock;        /* families, children, collectors */
    pthread_mutex_t scrape_lock; /* one scrape at a time */
    mx_metric_family_t **fams;   /* sorted by name */
    size_t n_fams;
    size_t cap_fams;
    mx_collector_t *collectors;
    size_t n_collectors;
    size_t cap_collectors;
};

/*
 * Returns raw × scale. When 1/scale is a whole number (1e-9 for nanoseconds)
 * it divides instead, so 188000 ns reads 0.000188, not 0.00018800000000000002.
 */
static inline double mx_scaled(uint64_t raw, double scale)
{
    double inv = 1.0 / scale;
    double whole = __builtin_nearbyint(inv);
    if (whole >= 1 && __builtin_fabs(inv - whole) <= 1e-9 * whole) {
        return (double)raw / whole;
    }
    return (double)raw * scale;
}

/* Runs the collect hooks; called with scrape_lock held and lock not held. */
void mx_run_collectors(mx_metrics_t *metrics);

#endif /* STRATA_MX_INTERNAL_H */
