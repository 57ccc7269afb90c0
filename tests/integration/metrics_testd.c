/*
 * metrics_testd.c - a stand-in for stratad's observability side: it registers
 * the metric families of docs/observability.md, serves them with the metrics
 * HTTP server and makes traffic whose hit rates it computes itself.
 *
 *   metrics_testd [--port N] [--node NAME] [--peers LIST] [--mode scrape|random]
 *                 [--batches N] [--seed S] [--exit-after SECONDS]
 *                 [--cors-origin LIST] [--token TOKEN] [--bind ADDR]
 *
 * --cors-origin, --token and --bind set the server's cors_origins, token and
 *   bind_addr (st_metrics_http.h).
 *
 * --mode scrape: every scrape (/metrics or /stats) first adds one fixed batch
 *   of 5 lookups of 100 tokens each, 4 of them with 95 tokens matched and 80
 *   resumable: any window of scrapes shows a token hit rate of exactly 76 %,
 *   a request hit rate of 80 % and a resumable-token hit rate of 64 %.
 * --mode random: after the first complete /metrics scrape (all counters still
 *   zero), a thread makes --batches random lookups, then sets done. /stats then
 *   carries "test": {"done", "token_hit_rate", "request_hit_rate",
 *   "resumable_hit_rate", "token_hit_rate_by_namespace", "lookups"},
 *   computed from the program's own tallies, and the gauge strata_test_done turns 1.
 *
 * Prints "port=N" on stdout once listening; exits on SIGTERM or SIGINT, or
 * after --exit-after seconds (default 300) so a failed test cannot leave it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "st_log.h"
#include "st_metrics_http.h"

#define N_NS    2
#define N_KINDS 2

static const char *const namespaces[N_NS] = {"tenant-a", "tenant-b"};
static const char *const kinds[N_KINDS] = {"kv", "vis"};

typedef struct testd {
    st_metrics_t *m;
    /* Per namespace × kind. */
    st_counter_t *lookups[N_NS][N_KINDS], *hits[N_NS][N_KINDS], *tokens[N_NS][N_KINDS];
    st_counter_t *matched[N_NS][N_KINDS], *resumable[N_NS][N_KINDS];
    st_counter_t *bytes_ucx, *objects_ucx, *evictions, *spills, *promotions, *errors;
    st_histogram_t *lat_lookup;
    st_gauge_t *used[2], *limit[2], *leases, *done_gauge;
    /* The program's own tallies (random mode). */
    uint64_t t_lookups, t_hits, t_tokens, t_matched, t_resumable;
    uint64_t t_ns_tokens[N_NS], t_ns_matched[N_NS];
    atomic_int done;
    atomic_uint_fast64_t scrapes, stats_calls;
    int mode_scrape;
    int started;
    unsigned batches;
    unsigned seed;
    pthread_t traffic;
} testd_t;

static void die(const char *what, st_status_t st)
{
    fprintf(stderr, "metrics_testd: %s: %s\n", what, st_strerror(st));
    exit(1);
}

static st_metric_family_t *family(testd_t *t, const char *name, st_metric_type_t type,
                                  const char *help, const char *const *labels, size_t n)
{
    st_metric_family_t *f;
    st_metric_desc_t d = {.name = name,
                          .help = help,
                          .type = type,
                          .label_names = labels,
                          .n_labels = n,
                          .buckets = st_metrics_latency_buckets,
                          .n_buckets = st_metrics_latency_buckets_n,
                          .scale = 1e-9};
    st_status_t st = st_metrics_register(t->m, &d, &f);
    if (st != ST_OK) {
        die(name, st);
    }
    return f;
}

static st_counter_t *counter(st_metric_family_t *f, const char *const *values)
{
    st_counter_t *c;
    st_status_t st = st_metrics_counter(f, values, &c);
    if (st != ST_OK) {
        die("counter", st);
    }
    return c;
}

static st_gauge_t *gauge(st_metric_family_t *f, const char *const *values)
{
    st_gauge_t *g;
    st_status_t st = st_metrics_gauge(f, values, &g);
    if (st != ST_OK) {
        die("gauge", st);
    }
    return g;
}

static void setup_metrics(testd_t *t)
{
    const char *const nk[] = {"namespace", "kind"};
    st_metric_family_t *fl =
        family(t, "strata_lookups_total", ST_METRIC_COUNTER, "Lookups served.", nk, 2);
    st_metric_family_t *fh = family(t, "strata_lookups_with_hit_total", ST_METRIC_COUNTER,
                                    "Lookups that matched at least one block.", nk, 2);
    st_metric_family_t *ft =
        family(t, "strata_lookup_tokens_total", ST_METRIC_COUNTER, "Tokens looked up.", nk, 2);
    st_metric_family_t *fm = family(t, "strata_lookup_matched_tokens_total", ST_METRIC_COUNTER,
                                    "Looked-up tokens in the matched prefix.", nk, 2);
    st_metric_family_t *fr = family(t, "strata_lookup_resumable_tokens_total", ST_METRIC_COUNTER,
                                    "Looked-up tokens in the resumable prefix.", nk, 2);
    for (int n = 0; n < N_NS; n++) {
        for (int k = 0; k < N_KINDS; k++) {
            const char *v[2] = {namespaces[n], kinds[k]};
            t->lookups[n][k] = counter(fl, v);
            t->hits[n][k] = counter(fh, v);
            t->tokens[n][k] = counter(ft, v);
            t->matched[n][k] = counter(fm, v);
            t->resumable[n][k] = counter(fr, v);
        }
    }
    const char *const nkt[] = {"namespace", "kind", "transport"};
    const char *const v3[] = {"tenant-a", "kv", "ucx"};
    t->bytes_ucx = counter(family(t, "strata_served_bytes_total", ST_METRIC_COUNTER,
                                  "Bytes served to clients.", nkt, 3),
                           v3);
    t->objects_ucx = counter(family(t, "strata_served_objects_total", ST_METRIC_COUNTER,
                                    "Objects served to clients.", nkt, 3),
                             v3);
    const char *const ev[] = {"tenant-a", "kv", "dram"};
    t->evictions =
        counter(family(t, "strata_evictions_total", ST_METRIC_COUNTER,
                       "Objects evicted from a tier.", ST_LABELS("namespace", "kind", "tier"), 3),
                ev);
    t->spills = counter(family(t, "strata_spills_total", ST_METRIC_COUNTER,
                               "Objects spilled from DRAM to SSD.", nk, 2),
                        ST_LABELS("tenant-a", "kv"));
    t->promotions = counter(family(t, "strata_promotions_total", ST_METRIC_COUNTER,
                                   "Objects promoted from SSD to DRAM.", nk, 2),
                            ST_LABELS("tenant-a", "kv"));
    t->errors =
        counter(family(t, "strata_errors_total", ST_METRIC_COUNTER,
                       "Requests that failed, by status code.", ST_LABELS("method", "code"), 2),
                ST_LABELS("Lookup", "ST_ERR_NOT_FOUND"));
    st_metric_family_t *fd = family(t, "strata_request_duration_seconds", ST_METRIC_HISTOGRAM,
                                    "Time to serve a request.", ST_LABELS("method"), 1);
    if (st_metrics_histogram(fd, ST_LABELS("Lookup"), &t->lat_lookup) != ST_OK) {
        die("histogram", ST_ERR_INTERNAL);
    }
    st_metric_family_t *fu = family(t, "strata_tier_used_bytes", ST_METRIC_GAUGE_INT,
                                    "Bytes held in a tier.", ST_LABELS("namespace", "tier"), 2);
    st_metric_family_t *fli = family(t, "strata_tier_limit_bytes", ST_METRIC_GAUGE_INT,
                                     "Byte limit of a tier.", ST_LABELS("tier"), 1);
    const char *const tiers[2] = {"dram", "ssd"};
    for (int i = 0; i < 2; i++) {
        t->used[i] = gauge(fu, ST_LABELS("tenant-a", tiers[i]));
        t->limit[i] = gauge(fli, ST_LABELS(tiers[i])); /* process-wide: no namespace */
    }
    st_gauge_set_int(t->limit[0], 64LL << 30);
    st_gauge_set_int(t->limit[1], 1LL << 40);
    t->leases = gauge(family(t, "strata_leases_active", ST_METRIC_GAUGE_INT,
                             "Read leases held now.", ST_LABELS("namespace"), 1),
                      ST_LABELS("tenant-a"));
    t->done_gauge = gauge(family(t, "strata_test_done", ST_METRIC_GAUGE_INT,
                                 "1 once the test traffic is over.", NULL, 0),
                          NULL);
}

/* One lookup: tokens looked up, matched, resumable. */
static void lookup(testd_t *t, int ns, int kind, uint64_t tokens, uint64_t matched,
                   uint64_t resumable)
{
    st_counter_add(t->tokens[ns][kind], tokens);
    st_counter_add(t->matched[ns][kind], matched);
    st_counter_add(t->resumable[ns][kind], resumable);
    if (matched > 0) {
        st_counter_inc(t->hits[ns][kind]);
        st_counter_add(t->bytes_ucx, matched * 656 * 24);
        st_counter_add(t->objects_ucx, matched / 64 * 24);
    } else {
        st_counter_inc(t->errors);
    }
    st_counter_inc(t->lookups[ns][kind]);
    st_histogram_observe(t->lat_lookup, 30000 + matched * 100);
    t->t_lookups++, t->t_hits += matched > 0, t->t_tokens += tokens;
    t->t_matched += matched, t->t_resumable += resumable;
    t->t_ns_tokens[ns] += tokens, t->t_ns_matched[ns] += matched;
}

static void *traffic(void *arg)
{
    testd_t *t = arg;
    unsigned s = t->seed;
    for (unsigned i = 0; i < t->batches; i++) {
        uint64_t blocks = 1 + rand_r(&s) % 32;
        uint64_t hit = rand_r(&s) % 4 == 0 ? 0 : rand_r(&s) % (blocks + 1);
        int kind = (int)(rand_r(&s) % N_KINDS);
        /* kv resumes at the last KDA checkpoint (every 16 blocks); vis needs none. */
        uint64_t res = kind == 0 ? hit / 16 * 16 : hit;
        lookup(t, (int)(rand_r(&s) % N_NS), kind, blocks * 64, hit * 64, res * 64);
        st_counter_add(t->evictions, rand_r(&s) % 3);
        if (i % 50 == 0) {
            usleep(1000);
        }
    }
    atomic_store(&t->done, 1);
    return NULL;
}

/* Runs at the start of every scrape, one scrape at a time. */
static void collect(st_metrics_t *m, void *arg)
{
    testd_t *t = arg;
    uint64_t before = atomic_fetch_add(&t->scrapes, 1);
    if (t->mode_scrape) {
        for (int i = 0; i < 5; i++) {
            lookup(t, 0, 0, 100, i < 4 ? 95 : 0, i < 4 ? 80 : 0);
        }
        st_counter_add(t->evictions, 3);
        st_counter_add(t->bytes_ucx, 1 << 20);
    } else if (!t->started && before - atomic_load(&t->stats_calls) >= 1) {
        /* A whole /metrics scrape has finished with every counter at zero. */
        t->started = 1;
        if (pthread_create(&t->traffic, NULL, traffic, t) != 0) {
            die("pthread_create", ST_ERR_NOMEM);
        }
    }
    uint64_t n = atomic_load(&t->scrapes);
    st_gauge_set_int(t->used[0], (int64_t)((20 + n % 40) << 30));
    st_gauge_set_int(t->used[1], (int64_t)(300LL << 30) + (int64_t)n * (1 << 28));
    st_gauge_set_int(t->leases, (int64_t)(n % 7));
    st_gauge_set_int(t->done_gauge, atomic_load(&t->done));
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static void stats_hook(st_json_t *j, void *arg)
{
    testd_t *t = arg;
    atomic_fetch_add(&t->stats_calls, 1);
    int done = t->mode_scrape || atomic_load(&t->done);
    st_json_key(j, "test");
    st_json_begin_object(j);
    st_json_key(j, "done");
    st_json_bool(j, done);
    if (done) {
        st_json_key(j, "lookups");
        st_json_uint(j, t->t_lookups);
        st_json_key(j, "token_hit_rate");
        st_json_double(j, ratio(t->t_matched, t->t_tokens));
        st_json_key(j, "request_hit_rate");
        st_json_double(j, ratio(t->t_hits, t->t_lookups));
        st_json_key(j, "resumable_hit_rate");
        st_json_double(j, ratio(t->t_resumable, t->t_tokens));
        st_json_key(j, "token_hit_rate_by_namespace");
        st_json_begin_object(j);
        for (int n = 0; n < N_NS; n++) {
            st_json_key(j, namespaces[n]);
            st_json_double(j, ratio(t->t_ns_matched[n], t->t_ns_tokens[n]));
        }
        st_json_end_object(j);
    }
    st_json_end_object(j);
}

int main(int argc, char **argv)
{
    testd_t t = {.batches = 20000, .seed = 42};
    st_metrics_http_opts_t o = {.stats = {.node = "testd"}};
    long port = 0, exit_after = 300;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "metrics_testd: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--port") == 0) {
            port = strtol(v, NULL, 10);
        } else if (strcmp(a, "--node") == 0) {
            o.stats.node = v;
        } else if (strcmp(a, "--peers") == 0) {
            o.stats.peers = v;
        } else if (strcmp(a, "--mode") == 0 && (!strcmp(v, "scrape") || !strcmp(v, "random"))) {
            t.mode_scrape = strcmp(v, "scrape") == 0;
        } else if (strcmp(a, "--batches") == 0) {
            t.batches = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--seed") == 0) {
            t.seed = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--exit-after") == 0) {
            exit_after = strtol(v, NULL, 10);
        } else if (strcmp(a, "--cors-origin") == 0) {
            o.cors_origins = v;
        } else if (strcmp(a, "--token") == 0) {
            o.token = v;
        } else if (strcmp(a, "--bind") == 0) {
            o.bind_addr = v;
        } else {
            fprintf(stderr, "metrics_testd: unknown option or value: %s %s\n", a, v);
            return 2;
        }
    }
    if (port < 0 || port > 65535) {
        fprintf(stderr, "metrics_testd: --port must be 0..65535, got %ld\n", port);
        return 2;
    }
    o.port = (uint16_t)port;
    o.stats.fn = stats_hook;
    o.stats.arg = &t;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts */

    st_status_t st = st_metrics_create(&t.m);
    if (st != ST_OK) {
        die("st_metrics_create", st);
    }
    setup_metrics(&t);
    if ((st = st_metrics_add_collector(t.m, collect, &t)) != ST_OK) {
        die("st_metrics_add_collector", st);
    }
    st_metrics_http_t *h;
    if ((st = st_metrics_http_start(t.m, &o, &h)) != ST_OK) {
        die("st_metrics_http_start", st);
    }
    printf("port=%u\n", (unsigned)st_metrics_http_port(h));
    fflush(stdout);

    struct timespec limit = {.tv_sec = exit_after};
    int sig = sigtimedwait(&set, NULL, &limit);
    if (sig < 0 && errno == EAGAIN) {
        fprintf(stderr, "metrics_testd: --exit-after %ld s reached, exiting\n", exit_after);
    }
    st_metrics_http_stop(h);
    if (t.started) {
        pthread_join(t.traffic, NULL);
    }
    st_metrics_destroy(t.m);
    return 0;
}
