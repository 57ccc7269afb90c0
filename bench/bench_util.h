/*
 * bench_util.h - timing and statistics shared by the benchmarks: a monotonic
 * clock, the median, percentiles and spread of repeated samples, and the
 * "--name value" options of their command lines.
 */
#ifndef STRATA_BENCH_UTIL_H
#define STRATA_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic time in nanoseconds. */
uint64_t bench_now_ns(void);

typedef struct bench_stats {
    double median;
    double p99;
    double min;
    double max;
    double mad; /* median absolute deviation, the spread we report */
} bench_stats_t;

/* Sorts samples in place and fills out. n must be at least 1. */
void bench_stats(double *samples, size_t n, bench_stats_t *out);

/* Percentile q (0..100) of sorted samples. */
double bench_percentile(const double *sorted, size_t n, double q);

/*
 * Order-balanced ratios a / b for runs whose order alternates from round to
 * round (an even round ran a first, the odd one after it ran b first): one
 * per pair of rounds, the geometric mean of the two orders' ratios,
 * sqrt(a[r] a[r+1] / (b[r] b[r+1])). Returns how many (rounds / 2).
 */
size_t bench_balanced(const double *a, const double *b, size_t rounds, double *out);

/* One option of a command line: "--name value", or "--name" alone (a flag). */
typedef enum {
    BENCH_OPT_SIZE, /* size_t, strtoul */
    BENCH_OPT_U64,  /* uint64_t, strtoull */
    BENCH_OPT_INT,  /* int, atoi */
    BENCH_OPT_STR,  /* const char *, the word itself */
    BENCH_OPT_FLAG, /* int, set to 1; takes no value */
} bench_opt_kind_t;

typedef struct bench_opt {
    const char *name;
    bench_opt_kind_t kind;
    void *at; /* where the value goes, of the type its kind names */
} bench_opt_t;

/*
 * Reads argv[first..] into the opts their names name. Returns 0, or the index
 * in argv of the first word that is no opt's name or that lacks its value
 * (the words before it are read).
 */
int bench_opts(int argc, char **argv, int first, const bench_opt_t *opts, size_t n_opts);

/* bench_opts for a command line of "--name value" pairs only: a last word
 * without a pair is passed over. */
int bench_opt_pairs(int argc, char **argv, int first, const bench_opt_t *opts, size_t n_opts);

#endif
