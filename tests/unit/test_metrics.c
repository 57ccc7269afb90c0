/* test_metrics.c - the registry and the Prometheus text exposition. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unistd.h>
#include <cmocka.h>

#include "log.h"
#include "metrics.h"
#include "support/unit_main.h"

static mx_metrics_t *new_registry(void)
{
    mx_metrics_t *m = NULL;
    assert_int_equal(mx_create(&m), ST_OK);
    assert_non_null(m);
    return m;
}

/* Scrapes m; the caller frees the returned text. */
static char *scrape(mx_metrics_t *m)
{
    mx_mbuf_t b = {0};
    assert_int_equal(mx_write_text(m, &b), ST_OK);
    assert_non_null(b.data);
    return b.data;
}

static mx_metric_family_t *reg(mx_metrics_t *m, const char *name, mx_metric_type_t type,
                               const char *const *labels, size_t n)
{
    mx_metric_family_t *f = NULL;
    mx_metric_desc_t d = {
        .name = name, .help = "Help.", .type = type, .label_names = labels, .n_labels = n};
    assert_int_equal(mx_register(m, &d, &f), ST_OK);
    return f;
}

static void test_counter_text(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f =
        reg(m, "strata_lookups_total", MX_METRIC_COUNTER, MX_LABELS("namespace", "kind"), 2);
    mx_counter_t *a, *b, *a2;
    assert_int_equal(mx_counter(f, MX_LABELS("t1", "kv"), &a), ST_OK);
    assert_int_equal(mx_counter(f, MX_LABELS("t0", "kv"), &b), ST_OK);
    assert_int_equal(mx_counter(f, MX_LABELS("t1", "kv"), &a2), ST_OK);
    assert_ptr_equal(a, a2); /* the label set is cached */
    mx_counter_inc(a);
    mx_counter_add(a, 41);
    mx_counter_inc(b);
    char *t = scrape(m);
    assert_non_null(strstr(t, "# HELP strata_lookups_total Help.\n"
                              "# TYPE strata_lookups_total counter\n"
                              "strata_lookups_total{namespace=\"t0\",kind=\"kv\"} 1\n"
                              "strata_lookups_total{namespace=\"t1\",kind=\"kv\"} 42\n"));
    free(t);
    mx_destroy(m);
}

static void test_ordering_and_build_info(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_gauge_t *g;
    mx_metric_family_t *z = reg(m, "strata_z", MX_METRIC_GAUGE, NULL, 0);
    mx_metric_family_t *a = reg(m, "strata_a", MX_METRIC_GAUGE_INT, MX_LABELS("tier"), 1);
    assert_int_equal(mx_gauge(z, NULL, &g), ST_OK);
    mx_gauge_set(g, 0.25);
    assert_int_equal(mx_gauge(a, MX_LABELS("ssd"), &g), ST_OK);
    mx_gauge_set_int(g, -3);
    assert_int_equal(mx_gauge(a, MX_LABELS("dram"), &g), ST_OK);
    mx_gauge_set_int(g, 7);
    mx_gauge_add_int(g, 3);
    char *t = scrape(m);
    char *pa = strstr(t, "# HELP strata_a ");
    char *pb = strstr(t, "# HELP strata_build_info ");
    char *pz = strstr(t, "# HELP strata_z ");
    assert_true(pa && pb && pz && pa < pb && pb < pz);
    char *dram = strstr(t, "strata_a{tier=\"dram\"} 10\n");
    char *ssd = strstr(t, "strata_a{tier=\"ssd\"} -3\n");
    assert_true(dram && ssd && dram < ssd);
    assert_non_null(strstr(t, "strata_z 0.25\n"));
    assert_non_null(strstr(t, "strata_build_info{version=\""));
    assert_non_null(strstr(t, "# TYPE strata_build_info gauge\n"));
    /* Two scrapes of an unchanged registry are byte for byte the same. */
    char *t2 = scrape(m);
    assert_string_equal(t, t2);
    free(t2);
    free(t);
    mx_destroy(m);
}

static void test_escaping(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f;
    mx_metric_desc_t d = {.name = "strata_errors_total",
                          .help = "Errors with a \\ backslash\nand a newline.",
                          .type = MX_METRIC_COUNTER,
                          .label_names = MX_LABELS("code"),
                          .n_labels = 1};
    assert_int_equal(mx_register(m, &d, &f), ST_OK);
    mx_counter_t *c;
    assert_int_equal(mx_counter(f, MX_LABELS("a\"b\\c\nd é"), &c), ST_OK);
    mx_counter_inc(c);
    char *t = scrape(m);
    assert_non_null(
        strstr(t, "# HELP strata_errors_total Errors with a \\\\ backslash\\nand a newline.\n"));
    assert_non_null(strstr(t, "strata_errors_total{code=\"a\\\"b\\\\c\\nd é\"} 1\n"));
    free(t);
    mx_destroy(m);
}

static void test_histogram_cumulative(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f;
    mx_metric_desc_t d = {.name = "strata_request_duration_seconds",
                          .help = "Latency.",
                          .type = MX_METRIC_HISTOGRAM,
                          .label_names = MX_LABELS("method"),
                          .n_labels = 1,
                          .buckets = mx_latency_buckets,
                          .n_buckets = mx_latency_buckets_n,
                          .scale = 1e-9};
    assert_int_equal(mx_register(m, &d, &f), ST_OK);
    mx_histogram_t *h;
    assert_int_equal(mx_histogram(f, MX_LABELS("Lookup"), &h), ST_OK);
    mx_histogram_observe(h, 20000);       /* exactly 20 µs: in le=2e-05 */
    mx_histogram_observe(h, 20001);       /* just above: le=5e-05 */
    mx_histogram_observe(h, 1000000);     /* 1 ms */
    mx_histogram_observe_value(h, 0.003); /* 3 ms */
    mx_histogram_observe(h, 9000000000);  /* 9 s: only +Inf */
    char *t = scrape(m);
    const char *want = "# TYPE strata_request_duration_seconds histogram\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"2e-05\"} 1\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"5e-05\"} 2\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.0001\"} 2\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.0002\"} 2\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.0005\"} 2\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.001\"} 3\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.002\"} 3\n"
                       "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"0.005\"} 4\n";
    assert_non_null(strstr(t, want));
    assert_non_null(
        strstr(t, "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"5\"} 4\n"
                  "strata_request_duration_seconds_bucket{method=\"Lookup\",le=\"+Inf\"} 5\n"
                  "strata_request_duration_seconds_sum{method=\"Lookup\"} 9.004040001\n"
                  "strata_request_duration_seconds_count{method=\"Lookup\"} 5\n"));
    free(t);
    mx_destroy(m);
}

/* ---- concurrency -------------------------------------------------------------- */

#define N_THREADS 8
#define N_INCS    200000

typedef struct {
    mx_metric_family_t *f;
    mx_histogram_t *h;
    mx_counter_t *got;
} worker_arg_t;

static void *worker(void *p)
{
    worker_arg_t *a = p;
    mx_counter_t *c = NULL;
    /* Every thread asks for the same label set at once: one child must win. */
    if (mx_counter(a->f, MX_LABELS("shared"), &c) != ST_OK) {
        return NULL;
    }
    a->got = c;
    for (int i = 0; i < N_INCS; i++) {
        mx_counter_inc(c);
        mx_histogram_observe(a->h, (uint64_t)i);
    }
    return NULL;
}

static void test_concurrent_increments(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f = reg(m, "strata_ops_total", MX_METRIC_COUNTER, MX_LABELS("x"), 1);
    mx_metric_family_t *hf;
    const double b[] = {1000, 100000};
    mx_metric_desc_t d = {.name = "strata_op_size_bytes",
                          .help = "Sizes.",
                          .type = MX_METRIC_HISTOGRAM,
                          .buckets = b,
                          .n_buckets = 2};
    assert_int_equal(mx_register(m, &d, &hf), ST_OK);
    mx_histogram_t *h;
    assert_int_equal(mx_histogram(hf, NULL, &h), ST_OK);
    pthread_t th[N_THREADS];
    worker_arg_t args[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (worker_arg_t){.f = f, .h = h};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    /* Scrape while they run: the lock and the atomics must cope. */
    for (int i = 0; i < 20; i++) {
        free(scrape(m));
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_non_null(args[i].got);
        assert_ptr_equal(args[i].got, args[0].got);
    }
    assert_int_equal(mx_counter_get(args[0].got), (uint64_t)N_THREADS * N_INCS);
    char *t = scrape(m);
    char want[256];
    snprintf(want, sizeof(want), "strata_ops_total{x=\"shared\"} %llu\n",
             (unsigned long long)N_THREADS * N_INCS);
    assert_non_null(strstr(t, want));
    /* Per thread: 0..1000 (1001 values) <= 1000, 0..100000 <= 1e5, all N_INCS. */
    snprintf(want, sizeof(want),
             "strata_op_size_bytes_bucket{le=\"1000\"} %d\n"
             "strata_op_size_bytes_bucket{le=\"100000\"} %d\n"
             "strata_op_size_bytes_bucket{le=\"+Inf\"} %d\n",
             N_THREADS * 1001, N_THREADS * 100001, N_THREADS * N_INCS);
    assert_non_null(strstr(t, want));
    free(t);
    mx_destroy(m);
}

/* ---- validation ------------------------------------------------------------------ */

static st_status_t try_reg(mx_metrics_t *m, const char *name, mx_metric_type_t type,
                           const char *const *labels, size_t n, const double *b, size_t nb)
{
    mx_metric_family_t *f = NULL;
    mx_metric_desc_t d = {.name = name,
                          .help = "h",
                          .type = type,
                          .label_names = labels,
                          .n_labels = n,
                          .buckets = b,
                          .n_buckets = nb};
    return mx_register(m, &d, &f);
}

static void test_invalid_names(void **state)
{
    mx_metrics_t *m = new_registry();
    const double ok_b[] = {1, 2};
    const double bad_b[] = {2, 1};
    /* The errors are expected: send them to a file and check they name the culprit. */
    char path[] = "/tmp/st_test_metrics_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    lg_set_level(LG_ERROR);
    int old = lg_set_fd(fd);
    assert_int_equal(try_reg(m, "9lives_total", MX_METRIC_COUNTER, NULL, 0, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "has-dash_total", MX_METRIC_COUNTER, NULL, 0, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "", MX_METRIC_GAUGE, NULL, 0, NULL, 0), ST_ERR_INVALID);
    assert_int_equal(try_reg(m, NULL, MX_METRIC_GAUGE, NULL, 0, NULL, 0), ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_lookups", MX_METRIC_COUNTER, NULL, 0, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_used_total", MX_METRIC_GAUGE, NULL, 0, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_x", MX_METRIC_GAUGE, MX_LABELS("__name"), 1, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_x", MX_METRIC_GAUGE, MX_LABELS("a:b"), 1, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_x", MX_METRIC_GAUGE, MX_LABELS("a", "a"), 2, NULL, 0),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_h", MX_METRIC_HISTOGRAM, MX_LABELS("le"), 1, ok_b, 2),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_h", MX_METRIC_HISTOGRAM, NULL, 0, bad_b, 2),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_h", MX_METRIC_HISTOGRAM, NULL, 0, NULL, 0), ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_h_count", MX_METRIC_HISTOGRAM, NULL, 0, ok_b, 2),
                     ST_ERR_INVALID);
    assert_int_equal(try_reg(m, "strata_x", (mx_metric_type_t)9, NULL, 0, NULL, 0), ST_ERR_INVALID);
    /* Valid, then the same name again. */
    assert_int_equal(try_reg(m, "strata:ok_total", MX_METRIC_COUNTER, MX_LABELS("_a1"), 1, NULL, 0),
                     ST_OK);
    assert_int_equal(try_reg(m, "strata:ok_total", MX_METRIC_COUNTER, NULL, 0, NULL, 0),
                     ST_ERR_EXISTS);
    /* Label values: NULL, invalid UTF-8; family used as the wrong type. */
    mx_metric_family_t *f = mx_find(m, "strata:ok_total");
    assert_non_null(f);
    mx_counter_t *c;
    mx_gauge_t *g;
    assert_int_equal(mx_counter(f, NULL, &c), ST_ERR_INVALID);
    assert_int_equal(mx_counter(f, MX_LABELS("\xc3\x28"), &c), ST_ERR_INVALID);
    assert_int_equal(mx_counter(f, MX_LABELS("\xed\xa0\x80"), &c), ST_ERR_INVALID);
    assert_int_equal(mx_gauge(f, MX_LABELS("x"), &g), ST_ERR_INVALID);
    assert_null(mx_find(m, "strata_h"));
    lg_set_fd(old);
    char log[16384] = {0};
    assert_true(pread(fd, log, sizeof(log) - 1, 0) > 0);
    close(fd);
    assert_non_null(strstr(log, "invalid metric name"));
    assert_non_null(strstr(log, "metric=9lives_total"));
    assert_non_null(strstr(log, "counter name must end in _total metric=strata_lookups"));
    assert_non_null(strstr(log, "label=__name"));
    assert_non_null(strstr(log, "histogram may not use the label le metric=strata_h"));
    assert_non_null(strstr(log, "metric registered twice metric=strata:ok_total"));
    assert_non_null(strstr(log, "not UTF-8 metric=strata:ok_total label=_a1"));
    mx_destroy(m);
}

/* ---- collectors, numbers, JSON --------------------------------------------------- */

static int collected;

static void collect_occupancy(mx_metrics_t *m, void *arg)
{
    mx_gauge_t *g = arg;
    collected++;
    mx_gauge_set(g, 1.5 * collected);
}

static void test_collector(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f = reg(m, "strata_occupancy_ratio", MX_METRIC_GAUGE, NULL, 0);
    mx_gauge_t *g;
    assert_int_equal(mx_gauge(f, NULL, &g), ST_OK);
    assert_int_equal(mx_add_collector(m, collect_occupancy, g), ST_OK);
    collected = 0;
    char *t = scrape(m);
    assert_int_equal(collected, 1);
    assert_non_null(strstr(t, "strata_occupancy_ratio 1.5\n"));
    free(t);
    t = scrape(m);
    assert_int_equal(collected, 2);
    assert_non_null(strstr(t, "strata_occupancy_ratio 3\n"));
    free(t);
    mx_destroy(m);
}

static void test_format_double(void **state)
{
    char b[40];
    const struct {
        double v;
        const char *s;
    } cases[] = {{0, "0"},
                 {1, "1"},
                 {0.1, "0.1"},
                 {20e-6, "2e-05"},
                 {1e21, "1e+21"},
                 {1.0 / 3, "0.3333333333333333"},
                 {-2.5, "-2.5"},
                 {100000, "100000"},
                 {1e6, "1e+06"},
                 {1234567, "1.234567e+06"},
                 {1.5e-5, "1.5e-05"},
                 {0.0001, "0.0001"},
                 {1.0 / 0.0, "+Inf"},
                 {-1.0 / 0.0, "-Inf"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        mx_format_double(cases[i].v, b, sizeof(b));
        assert_string_equal(b, cases[i].s);
    }
    mx_format_double(0.0 / 0.0, b, sizeof(b));
    assert_string_equal(b, "NaN");
}

static void stats_hook(mx_json_t *j, void *arg)
{
    mx_json_key(j, "extra");
    mx_json_begin_object(j);
    mx_json_key(j, "quote\"d");
    mx_json_string(j, "line\nbreak");
    mx_json_key(j, "nan");
    mx_json_double(j, 0.0 / 0.0);
    mx_json_key(j, "list");
    mx_json_begin_array(j);
    mx_json_int(j, -1);
    mx_json_bool(j, 1);
    mx_json_null(j);
    mx_json_end_array(j);
    mx_json_end_object(j);
}

static void test_stats_json(void **state)
{
    mx_metrics_t *m = new_registry();
    mx_metric_family_t *f =
        reg(m, "strata_lookups_total", MX_METRIC_COUNTER, MX_LABELS("namespace"), 1);
    mx_metric_family_t *used =
        reg(m, "strata_tier_used_bytes", MX_METRIC_GAUGE_INT, MX_LABELS("namespace", "tier"), 2);
    mx_metric_family_t *lim =
        reg(m, "strata_tier_limit_bytes", MX_METRIC_GAUGE_INT, MX_LABELS("tier"), 1);
    mx_counter_t *c;
    mx_gauge_t *g;
    assert_int_equal(mx_counter(f, MX_LABELS("a"), &c), ST_OK);
    mx_counter_add(c, 5);
    assert_int_equal(mx_counter(f, MX_LABELS("b"), &c), ST_OK);
    mx_counter_add(c, 7);
    assert_int_equal(mx_gauge(used, MX_LABELS("a", "dram"), &g), ST_OK);
    mx_gauge_set_int(g, 100);
    assert_int_equal(mx_gauge(used, MX_LABELS("b", "dram"), &g), ST_OK);
    mx_gauge_set_int(g, 28);
    assert_int_equal(mx_gauge(lim, MX_LABELS("dram"), &g), ST_OK);
    mx_gauge_set_int(g, 1024);
    mx_stats_opts_t o = {.node = "n1", .peers = " h1:1, h2:2 ,", .fn = stats_hook, .arg = NULL};
    mx_mbuf_t b = {0};
    assert_int_equal(mx_write_stats(m, &o, &b), ST_OK);
    assert_non_null(strstr(b.data, "{\"schema\":1,\"node\":\"n1\","));
    assert_non_null(strstr(b.data, "\"peers\":[\"h1:1\",\"h2:2\"],"));
    assert_non_null(strstr(b.data, "\"counters\":{\"lookups_total\":12},"));
    assert_non_null(
        strstr(b.data, "\"tiers\":{\"dram\":{\"used_bytes\":128,\"limit_bytes\":1024}}"));
    assert_non_null(strstr(b.data, ",\"extra\":{\"quote\\\"d\":\"line\\nbreak\",\"nan\":null,"
                                   "\"list\":[-1,true,null]}}"));
    mx_mbuf_free(&b);
    mx_destroy(m);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_counter_text), cmocka_unit_test(test_ordering_and_build_info),
             cmocka_unit_test(test_escaping), cmocka_unit_test(test_histogram_cumulative),
             cmocka_unit_test(test_concurrent_increments), cmocka_unit_test(test_invalid_names),
             cmocka_unit_test(test_collector), cmocka_unit_test(test_format_double),
             cmocka_unit_test(test_stats_json));
}
