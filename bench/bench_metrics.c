/*
 * bench_metrics.c - the cost of the metrics hot path and of a scrape.
 *
 * Interleaved round by round, in one process:
 *   counter   mx_counter_inc() on a cached child (one relaxed atomic add);
 *   plain     a non-atomic increment of a volatile uint64 (the floor);
 *   mutex     a pthread mutex around the increment (the naive peer);
 *   histogram mx_histogram_observe() with the 17 latency buckets;
 *   shared    two threads incrementing the same counter (contended);
 *   private   two threads, each with its own label set (no sharing).
 * Then the scrape: mx_write_text() of 8 families × 128 label sets.
 * Prints ns per operation (median, p99, MAD) and the ratios.
 *
 * usage: bench_metrics [--rounds N] [--ops N]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "metrics.h"

static volatile uint64_t plain_counter;
static uint64_t locked_counter;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    mx_counter_t *c;
    size_t ops;
    pthread_barrier_t *start;
} thread_arg_t;

static void *spin(void *p)
{
    thread_arg_t *a = p;
    pthread_barrier_wait(a->start);
    for (size_t i = 0; i < a->ops; i++) {
        mx_counter_inc(a->c);
    }
    return NULL;
}

/* ns per increment with two threads on counters a and b. */
static double two_threads(mx_counter_t *a, mx_counter_t *b, size_t ops)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 3);
    thread_arg_t x = {a, ops, &start}, y = {b, ops, &start};
    pthread_t tx, ty;
    pthread_create(&tx, NULL, spin, &x);
    pthread_create(&ty, NULL, spin, &y);
    pthread_barrier_wait(&start);
    uint64_t t0 = bench_now_ns();
    pthread_join(tx, NULL);
    pthread_join(ty, NULL);
    uint64_t t1 = bench_now_ns();
    pthread_barrier_destroy(&start);
    return (double)(t1 - t0) / (double)ops;
}

static void report(const char *name, double *s, size_t n, bench_stats_t *out)
{
    bench_stats(s, n, out);
    printf("%-10s median %7.2f ns  p99 %7.2f ns  MAD %5.2f ns\n", name, out->median, out->p99,
           out->mad);
}

static void die(const char *what)
{
    fprintf(stderr, "bench_metrics: %s failed\n", what);
    exit(1);
}

int main(int argc, char **argv)
{
    size_t rounds = 21, ops = 1u << 22;
    const bench_opt_t opts[] = {{"--rounds", BENCH_OPT_SIZE, &rounds},
                                {"--ops", BENCH_OPT_SIZE, &ops}};
    int bad = bench_opt_pairs(argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0]));

    if (bad != 0) {
        fprintf(stderr, "bench_metrics: unknown option %s\n", argv[bad]);
        return 2;
    }
    if (rounds < 1 || ops < 1) {
        fprintf(stderr, "bench_metrics: --rounds and --ops must be at least 1\n");
        return 2;
    }
    mx_metrics_t *m;
    mx_metric_family_t *fc, *fh;
    mx_counter_t *c, *c2;
    mx_histogram_t *hist;
    if (mx_create(&m) != ST_OK) {
        die("mx_create");
    }
    mx_metric_desc_t dc = {.name = "bench_ops_total",
                           .help = "ops",
                           .type = MX_METRIC_COUNTER,
                           .label_names = MX_LABELS("t"),
                           .n_labels = 1};
    mx_metric_desc_t dh = {.name = "bench_seconds",
                           .help = "latency",
                           .type = MX_METRIC_HISTOGRAM,
                           .buckets = mx_latency_buckets,
                           .n_buckets = mx_latency_buckets_n,
                           .scale = 1e-9};
    if (mx_register(m, &dc, &fc) != ST_OK || mx_register(m, &dh, &fh) != ST_OK ||
        mx_counter(fc, MX_LABELS("a"), &c) != ST_OK ||
        mx_counter(fc, MX_LABELS("b"), &c2) != ST_OK || mx_histogram(fh, NULL, &hist) != ST_OK) {
        die("registration");
    }

    double *t[6];
    for (int k = 0; k < 6; k++) {
        t[k] = calloc(rounds, sizeof(double));
        if (t[k] == NULL) {
            die("calloc");
        }
    }
    for (size_t r = 0; r < rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < ops; i++) {
            mx_counter_inc(c);
        }
        uint64_t t1 = bench_now_ns();
        for (size_t i = 0; i < ops; i++) {
            plain_counter = plain_counter + 1;
        }
        uint64_t t2 = bench_now_ns();
        for (size_t i = 0; i < ops; i++) {
            pthread_mutex_lock(&lock);
            locked_counter++;
            pthread_mutex_unlock(&lock);
        }
        uint64_t t3 = bench_now_ns();
        for (size_t i = 0; i < ops; i++) {
            mx_histogram_observe(hist, (i * 2654435761u) % 200000000u); /* up to 200 ms */
        }
        uint64_t t4 = bench_now_ns();
        t[0][r] = (double)(t1 - t0) / (double)ops;
        t[1][r] = (double)(t2 - t1) / (double)ops;
        t[2][r] = (double)(t3 - t2) / (double)ops;
        t[3][r] = (double)(t4 - t3) / (double)ops;
        t[4][r] = two_threads(c, c, ops / 4);
        t[5][r] = two_threads(c, c2, ops / 4);
    }
    static const char *const names[6] = {"counter",   "plain",  "mutex",
                                         "histogram", "shared", "private"};
    bench_stats_t s[6];
    printf("bench_metrics: %zu rounds of %zu ops (threads: %zu ops each)\n", rounds, ops, ops / 4);
    for (int k = 0; k < 6; k++) {
        report(names[k], t[k], rounds, &s[k]);
    }
    printf("ratio counter/plain %.2f  mutex/counter %.2f  shared/private %.2f\n",
           s[0].median / s[1].median, s[2].median / s[0].median, s[4].median / s[5].median);

    /* A scrape of a registry of 8 families × 128 label sets. */
    for (int f = 0; f < 8; f++) {
        char name[64];
        snprintf(name, sizeof(name), "bench_family_%d_total", f);
        mx_metric_desc_t d = {.name = name,
                              .help = "A family.",
                              .type = MX_METRIC_COUNTER,
                              .label_names = MX_LABELS("namespace", "kind"),
                              .n_labels = 2};
        mx_metric_family_t *fam;
        if (mx_register(m, &d, &fam) != ST_OK) {
            die("register");
        }
        for (int i = 0; i < 128; i++) {
            char ns[32];
            mx_counter_t *x;
            snprintf(ns, sizeof(ns), "tenant-%03d", i / 2);
            if (mx_counter(fam, MX_LABELS(ns, i % 2 ? "kv" : "vis"), &x) != ST_OK) {
                die("child");
            }
            mx_counter_add(x, (uint64_t)i * 1000003u);
        }
    }
    size_t bytes = 0;
    for (size_t r = 0; r < rounds; r++) {
        mx_mbuf_t b = {0};
        uint64_t t0 = bench_now_ns();
        if (mx_write_text(m, &b) != ST_OK) {
            die("mx_write_text");
        }
        t[0][r] = (double)(bench_now_ns() - t0) / 1000.0;
        bytes = b.len;
        mx_mbuf_free(&b);
    }
    bench_stats(t[0], rounds, &s[0]);
    printf("scrape     median %7.1f us  p99 %7.1f us  for %zu bytes (1024 label sets + "
           "histogram)\n",
           s[0].median, s[0].p99, bytes);
    for (int k = 0; k < 6; k++) {
        free(t[k]);
    }
    mx_destroy(m);
    return 0;
}
