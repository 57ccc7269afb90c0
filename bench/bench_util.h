/*
 * bench_util.h - timing and statistics shared by the benchmarks: a monotonic
 * clock, and the median, percentiles and spread of repeated samples.
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

#endif
