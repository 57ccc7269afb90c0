/* bench_util.c - see bench_util.h. */
#include "bench_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t bench_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double q)
{
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    double frac = pos - (double)lo;

    if (lo + 1 >= n) {
        return sorted[n - 1];
    }
    return sorted[lo] * (1 - frac) + sorted[lo + 1] * frac;
}

void bench_stats(double *samples, size_t n, bench_stats_t *out)
{
    double *dev = malloc(sizeof(double) * n);

    qsort(samples, n, sizeof(double), bench_cmp);
    out->median = bench_percentile(samples, n, 50);
    out->p99 = bench_percentile(samples, n, 99);
    out->min = samples[0];
    out->max = samples[n - 1];
    out->mad = 0;
    if (dev != NULL) {
        for (size_t i = 0; i < n; i++) {
            dev[i] = fabs(samples[i] - out->median);
        }
        qsort(dev, n, sizeof(double), bench_cmp);
        out->mad = bench_percentile(dev, n, 50);
        free(dev);
    }
}

size_t bench_balanced(const double *a, const double *b, size_t rounds, double *out)
{
    size_t k = 0;

    for (size_t r = 0; r + 1 < rounds; r += 2) {
        out[k++] = sqrt(a[r] * a[r + 1] / (b[r] * b[r + 1]));
    }
    return k;
}

static const bench_opt_t *bench_opt_find(const char *name, const bench_opt_t *opts, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (strcmp(name, opts[k].name) == 0) {
            return &opts[k];
        }
    }
    return NULL;
}

int bench_opts(int argc, char **argv, int first, const bench_opt_t *opts, size_t n_opts)
{
    for (int i = first; i < argc; i++) {
        const bench_opt_t *o = bench_opt_find(argv[i], opts, n_opts);

        if (o == NULL || (o->kind != BENCH_OPT_FLAG && i + 1 == argc)) {
            return i;
        }
        if (o->kind == BENCH_OPT_FLAG) {
            *(int *)o->at = 1;
        } else if (o->kind == BENCH_OPT_SIZE) {
            *(size_t *)o->at = strtoul(argv[++i], NULL, 10);
        } else if (o->kind == BENCH_OPT_U64) {
            *(uint64_t *)o->at = strtoull(argv[++i], NULL, 10);
        } else if (o->kind == BENCH_OPT_INT) {
            *(int *)o->at = atoi(argv[++i]);
        } else {
            *(const char **)o->at = argv[++i];
        }
    }
    return 0;
}

int bench_opt_pairs(int argc, char **argv, int first, const bench_opt_t *opts, size_t n_opts)
{
    return bench_opts(argc - (argc - first) % 2, argv, first, opts, n_opts);
}
